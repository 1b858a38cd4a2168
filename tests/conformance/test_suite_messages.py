"""Every check of the shipped suites says which promise the store broke, or which setup failed.

A backend author reads the failure, not the suite's source: each ``assert`` in the suites'
modules carries a message that starts a sentence with ``promise broken:`` (a promise of the
store) or ``setup:`` (the test's own preparation: a fixture, a proxy fault that never fired).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import flyte_checkpoint.testing as testing

#: The suites' modules this rule covers (the incremental and copy suites are others' to bring
#: under it: issue 33 names the BlobStore, Checkpoint, Fault and Crash suites).
MODULES = (
    "suite.py",
    "sizes.py",
    "listing.py",
    "overwrites.py",
    "faults.py",
    "requestfaults.py",
    "containers.py",
    "crash.py",
)
MARKS = ("promise broken:", "setup:")


def _asserts(name: str) -> list[ast.Assert]:
    tree = ast.parse((Path(testing.__file__).parent / name).read_text())
    return [node for node in ast.walk(tree) if isinstance(node, ast.Assert)]


@pytest.mark.parametrize("name", MODULES)
def test_every_assertion_names_the_broken_promise_or_the_setup(name: str) -> None:
    unnamed = [
        f"{name}:{node.lineno}"
        for node in _asserts(name)
        if node.msg is None or not any(mark in ast.unparse(node.msg) for mark in MARKS)
    ]
    assert not unnamed, f"assertions with no 'promise broken:' or 'setup:' message: {unnamed}"


def test_the_suites_raise_no_pytest_raises_failure_without_a_promise() -> None:
    """``pytest.raises`` fails with "DID NOT RAISE", naming no promise: the suites check an
    operation's outcome instead (``data.outcome``), except around a block that must raise the
    test's own exception."""
    found = []
    for name in MODULES:
        tree = ast.parse((Path(testing.__file__).parent / name).read_text())
        for node in ast.walk(tree):
            raises = isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.raises"
            if raises and "RuntimeError" not in ast.unparse(node):
                found.append(f"{name}:{node.lineno}")
    assert not found, found
