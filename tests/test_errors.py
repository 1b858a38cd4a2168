"""The error hierarchy as the documentation's Errors page (docs/errors.md) states it, class by class."""

from __future__ import annotations

import builtins
import re
from pathlib import Path

from flyte_checkpoint import errors
from flyte_checkpoint.errors import CheckpointError

PAGE = Path(__file__).resolve().parents[1] / "docs" / "errors.md"


def readme_errors() -> dict[str, list[str]]:
    """Each row of the Errors page's table: the error, and the classes it is also a subclass of."""
    text = PAGE.read_text()
    assert "All errors are in `flyte_checkpoint.errors` and derive from `CheckpointError`" in text
    return {
        name: re.findall(r"`(\w+)`", bases)
        for name, bases in re.findall(r"^\| `(\w+Error)` \| ([^|]*) \|", text, flags=re.M)
    }


def resolve(name: str) -> type[BaseException]:
    found = getattr(errors, name, None) or getattr(builtins, name)
    assert isinstance(found, type) and issubclass(found, BaseException), name
    return found


def test_every_error_the_readme_lists_has_the_bases_it_states():
    documented = readme_errors()
    assert len(documented) >= 10
    for name, bases in documented.items():
        cls = getattr(errors, name)  # importable from flyte_checkpoint.errors
        assert issubclass(cls, CheckpointError), name
        assert bases, f"{name}: the page names no base"
        for base in bases:
            assert issubclass(cls, resolve(base)), f"{name} is not a {base}, as the page says"


def test_the_readme_lists_every_public_error():
    assert set(readme_errors()) == set(errors.__all__) - {"CheckpointError"}


def test_every_error_is_also_a_builtin_error():
    """CONTRIBUTING.md: each error is also a subclass of the matching built-in."""
    generic = {BaseException, Exception, object}
    for name in errors.__all__:
        cls = getattr(errors, name)
        matching = [b for b in cls.__mro__ if b.__module__ == "builtins" and b not in generic]
        assert name == "CheckpointError" or matching, f"{name} has no matching built-in"
