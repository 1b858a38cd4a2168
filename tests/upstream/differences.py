"""Run a Flyte test that checks a documented difference, and require it to fail as documented.

``pytest.mark.xfail(strict=True)`` would do this, but under ``CI=true`` the root conftest turns
every xfail into a failure (tests/test_ci_guard.py). This decorator is the strict xfail in a
form that rule accepts: the test passes when Flyte's test raises ``raises`` (the difference
docs/flyte.md's table documents), and fails when it raises anything else, or nothing (then the
difference is gone: update the table and drop the decorator).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest


def documented_difference(
    row: str, raises: type[BaseException]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Expect the decorated test to raise ``raises``, as docs/flyte.md's table row ``row`` says."""

    def decorate(test: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(test)
        def run(*args: Any, **kwargs: Any) -> None:
            try:
                test(*args, **kwargs)
            except raises:
                return
            pytest.fail(
                f"documented difference: {row} (docs/flyte.md): Flyte's test was expected to fail with"
                f" {raises.__name__} and passed; if the difference is gone, update the table and drop"
                " @documented_difference"
            )

        run.documented_difference = row  # type: ignore[attr-defined]
        return run

    return decorate
