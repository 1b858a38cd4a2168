"""``documented_difference`` is a strict xfail: it passes only on the documented error."""

from __future__ import annotations

import pytest

from .differences import documented_difference


def test_the_documented_error_passes() -> None:
    @documented_difference("row", ValueError)
    def flyte_test() -> None:
        raise ValueError("as documented")

    flyte_test()


def test_a_test_that_passes_fails_naming_the_row() -> None:
    @documented_difference("the row", ValueError)
    def flyte_test() -> None:
        pass

    with pytest.raises(pytest.fail.Exception, match="documented difference: the row"):
        flyte_test()


def test_another_error_is_not_hidden() -> None:
    @documented_difference("row", ValueError)
    def flyte_test() -> None:
        raise KeyError("undocumented")

    with pytest.raises(KeyError):
        flyte_test()
