"""The public types check: ``mypy --strict`` accepts the quick start and reports a wrong type.

``fc.ctx().checkpoint`` is a ``Checkpoint`` (not ``Checkpoint | None``), and ``@fc.task`` (bare
or with arguments, on ``def`` and ``async def``) keeps the function's signature.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_docs_blocks import mypy_strict

QUICK_START = """\
import asyncio

import flyte_checkpoint as fc


@fc.task(retries=3)
def train(n: int) -> int:
    cp = fc.ctx().checkpoint
    path = cp.load_sync()
    start = int(path.read_bytes()) if path else 0
    for i in range(start, n):
        cp.save_sync(str(i + 1).encode())
    return n


@fc.task
def bare(n: int, *, name: str = "x") -> str:
    return name * n


@fc.task(retries=1, run_name="r")
async def later(n: int) -> float:
    await fc.ctx().checkpoint.save(b"1")
    return n / 2


@fc.task
async def bare_async(n: int) -> bytes:
    return bytes(n)


total: int = train(5)
text: str = bare(2, name="y")
half: float = asyncio.run(later(3))
raw: bytes = asyncio.run(bare_async(3))
"""

#: Each line is checked alone, after the quick start: (the line, the error mypy must report).
WRONG = [
    (
        "wrong: str = train(5)",
        r'Incompatible types in assignment \(expression has type "int", variable has type "str"\)',
    ),
    ('train("5")', r'Argument 1 to "train" has incompatible type "str"; expected "int"'),
    ("bare(2, nam='y')", r'Unexpected keyword argument "nam" for "bare"'),
    ("late: int = asyncio.run(later(3))", r'expression has type "float", variable has type "int"'),
    ("raw2: str = asyncio.run(bare_async(3))", r'expression has type "bytes", variable has type "str"'),
]


def mypy(folder: Path, code: str) -> list[str]:
    (folder / "snippet.py").write_text(code)
    return [line for line in mypy_strict(folder, ["snippet.py"]) if ": error:" in line]


@pytest.mark.slow
def test_mypy_strict_passes_the_quick_start_and_reports_each_wrong_type(tmp_path: Path) -> None:
    """Proves: ``mypy --strict`` finds no error in a quick start that uses ``fc.ctx().checkpoint``
    and every form of ``@fc.task``; and each wrong line after it (a wrong result type, a wrong
    argument, a misspelt keyword, of sync and async tasks) is reported, on that line."""
    assert mypy(tmp_path, QUICK_START) == []
    code = QUICK_START + "".join(line + "\n" for line, _ in WRONG)
    errors = mypy(tmp_path, code)
    first = len(QUICK_START.splitlines()) + 1
    for n, (line, message) in enumerate(WRONG):
        found = [e for e in errors if e.startswith(f"snippet.py:{first + n}: error:")]
        assert found and re.search(message, found[0]), (line, errors)
    assert len(errors) == len(WRONG), errors
