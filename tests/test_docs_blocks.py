"""Every code block of the README and of the documentation site runs, and its Python type-checks.

``tests/docblocks.py`` finds the blocks and says how each is marked. Here:

- every block is accounted for: run here, run by a test that reads its page, or skipped with
  a reason (the exception);
- each page's unmarked blocks run in order in a fresh folder, as a reader would run them:
  Python blocks as scripts (a block whose first line is ``# name.py`` is written as that file
  for the blocks after it), bash blocks command by command under ``bash -e``, console blocks in
  one shell with each command's output compared with the output shown (durations, rates and
  times replaced). ``python`` is this virtualenv's; ``s3://my-bucket`` is moto's S3 server on
  127.0.0.1 (``AWS_ENDPOINT_URL_S3``); ``FLYTE_CHECKPOINT_ROOT`` is the page's folder;
- every Python block not skipped passes ``mypy --strict``, but for the known failures listed
  in :data:`KNOWN_TYPE_ERRORS`, each of which must still occur: once the types are fixed
  the test fails until its entry is removed;
- ``mkdocs build --strict`` fails on a broken anchor and on a link to a file that does not
  exist (``make docs`` builds the real site; ``make test`` runs it before the suite).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import docblocks
from tests.docblocks import ROOT, Block
from tests.test_readme_walkthrough import copy_checkout, s3_env  # noqa: F401 (s3_env: the fixture)

#: The type errors the pages' examples may show: (mypy error code, the message, the text of the
#: line it is reported on). Each must occur at least once; once fixed, remove it here. None
#: now: the two of issue 35 (``fc.ctx().checkpoint`` typed ``Checkpoint | None``, ``@fc.task``
#: untyped) are fixed, and tests/test_types.py checks both.
KNOWN_TYPE_ERRORS: list[tuple[str, str, str]] = []

#: mypy's settings for the blocks: --strict; the frameworks' own code is not checked (torch
#: and lightning are large, and a block's types are what is checked, not theirs), so their
#: classes are Any, which a block's class may subclass (a LightningModule).
MYPY_INI = """\
[mypy]
strict = True
disallow_subclassing_any = False
[mypy-torch.*,lightning.*]
follow_imports = skip
follow_imports_for_stubs = True
"""


def unmarked(page: str) -> list[Block]:
    return [b for b in docblocks.page_blocks(page) if not b.mark]


PAGES_TO_RUN = [p for p in docblocks.pages() if unmarked(p)]


def test_every_block_runs_or_says_which_test_runs_it_or_why_not() -> None:
    """Proves: no block is left out silently; a block run elsewhere names a test that reads
    its page; skips have reasons and are the exception."""
    blocks = docblocks.all_blocks()
    assert len(blocks) >= 40, [b.name for b in blocks]
    skipped = [b for b in blocks if b.mark == "skip"]
    for block in blocks:
        if block.mark == "skip":
            assert len(block.arg) > 15, f"{block.name}: a skipped block says why"
        elif block.mark == "run by":
            test = ROOT / block.arg
            assert test.is_file(), f"{block.name}: {block.arg} does not exist"
            text = test.read_text()
            names = (Path(block.page).name, Path(block.source).name)
            assert any(name in text for name in names), f"{block.name}: {block.arg} does not read it"
    assert len(skipped) * 3 < len(blocks), [b.name for b in skipped]
    assert {b.page for b in blocks if not b.mark} >= {"README.md", "docs/quickstart.md", "docs/contract.md"}


def test_the_readme_is_one_screen_to_a_working_example_and_at_most_200_lines() -> None:
    """Proves: the README stays a front door (issue 35): at most 200 lines, its first example
    (a task that crashes and resumes, run above with its output) within the first 50 lines."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, len(lines)
    first = next(b for b in docblocks.page_blocks("README.md") if b.lang == "python")
    assert first.line <= 50 and not first.mark and "@fc.task" in first.code, first.name


def reader_env(work: Path, aws: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FLYTE_CHECKPOINT_", "PYTHON", "VIRTUAL_ENV", "AWS_"))
    }
    env.update(
        aws,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYTHONUNBUFFERED="1",  # a console block shows stdout and stderr as a terminal interleaves them
        FLYTE_CHECKPOINT_ROOT=str(work / "runs"),
        COLUMNS="200",
    )
    return env


def run_console(block: Block, work: Path, env: dict[str, str]) -> None:
    steps = docblocks.transcript(block.code)
    assert steps, f"{block.name}: a console block with no command"
    script = ["__s=0"]
    for i, (command, _) in enumerate(steps):
        script.append(f"echo '@@step {i}@@'; (exit $__s); {{ {command} ; }} 2>&1; __s=$?")
    run = subprocess.run(
        ["bash", "-c", "\n".join(script)], cwd=work, env=env, capture_output=True, text=True, timeout=600
    )
    parts = re.split(r"^@@step (\d+)@@\n", run.stdout, flags=re.M)[1:]
    outputs = {int(parts[i]): parts[i + 1].splitlines() for i in range(0, len(parts), 2)}
    for i, (command, shown) in enumerate(steps):
        got = outputs.get(i, [])
        assert docblocks.same(docblocks.normalize(got), docblocks.normalize(shown)), (
            f"{block.name}: $ {command}\nshown:\n" + "\n".join(shown) + "\ngot:\n" + "\n".join(got)
        )


@pytest.mark.integration
@pytest.mark.parametrize("page", PAGES_TO_RUN)
def test_the_blocks_of_each_page_run_as_written(
    page: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Proves: a reader who runs a page's blocks in order, in an empty folder, gets no error and
    the outputs the page shows."""
    env = reader_env(tmp_path, request.getfixturevalue("s3_env"))
    for n, block in enumerate(unmarked(page)):
        if block.lang == "python" and block.file_name:
            target = tmp_path / block.file_name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code)
            continue
        if block.lang == "console":
            run_console(block, tmp_path, env)
            continue
        if block.lang == "python":
            script = tmp_path / f"_block_{n}.py"
            script.write_text(block.code)
            argv = [sys.executable, str(script)]
        else:
            argv = ["bash", "-e", "-o", "pipefail", "-c", block.code]
        out = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, (
            f"{block.name} failed:\n{block.code}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        )


def mypy_strict(folder: Path, files: list[str]) -> list[str]:
    """The lines of ``mypy --strict`` (with :data:`MYPY_INI`) on these files of ``folder``."""
    (folder / "mypy.ini").write_text(MYPY_INI)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            "mypy.ini",
            "--cache-dir",
            str(folder / ".cache"),
            *files,
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode in (0, 1), out.stdout + out.stderr
    return out.stdout.splitlines()


def mypy_errors(blocks: list[Block], folder: Path) -> list[tuple[Block, str, str, str]]:
    """(block, error code, message, the line's text) for each error mypy --strict reports."""
    files = {}
    for n, block in enumerate(blocks):
        name = f"block_{n:03d}_{re.sub(r'[^a-z0-9]+', '_', block.source.lower())}_{block.line}.py"
        (folder / name).write_text(block.code)
        files[name] = block
    errors = []
    for line in mypy_strict(folder, list(files)):
        found = re.match(r"^(block_\S+\.py):(\d+): error: (.*?)  \[([\w-]+)\]$", line)
        if found:
            block = files[found.group(1)]
            text = block.code.splitlines()[int(found.group(2)) - 1]
            errors.append((block, found.group(4), found.group(3), text))
        else:
            assert not re.match(r"^block_\S+\.py:\d+: error:", line), line
    return errors


@pytest.mark.slow
def test_the_python_blocks_pass_mypy_strict_but_for_the_known_failures(tmp_path: Path) -> None:
    """Proves: every Python block not skipped type-checks under mypy --strict, except for the
    two known failures of issue 35, which must still occur (else remove them from the list)."""
    blocks = [b for b in docblocks.all_blocks() if b.lang == "python" and b.mark != "skip"]
    assert len(blocks) >= 15
    errors = mypy_errors(blocks, tmp_path)
    unexpected = [
        f"{block.name} (+{text.strip()!r}): {message} [{code}]"
        for block, code, message, text in errors
        if not any(
            code == c and re.fullmatch(m, message) and re.search(t, text) for c, m, t in KNOWN_TYPE_ERRORS
        )
    ]
    assert not unexpected, "mypy --strict on the documentation's Python:\n" + "\n".join(unexpected)
    for c, m, t in KNOWN_TYPE_ERRORS:
        assert any(
            code == c and re.fullmatch(m, msg) and re.search(t, text) for _, code, msg, text in errors
        ), f"the known type error {m!r} [{c}] no longer occurs: fixed, so remove it from KNOWN_TYPE_ERRORS"


@pytest.mark.slow
def test_a_broken_anchor_or_a_link_to_nothing_fails_the_strict_build(tmp_path: Path) -> None:
    """Proves: ``mkdocs build --strict`` (what ``make docs`` runs) fails on a link to an anchor a
    page does not have, and on a link to a file of the repository that does not exist, and on
    nothing else in a copy of this checkout (``make docs`` builds the checkout itself)."""
    checkout = copy_checkout(tmp_path / "checkout")
    page = checkout / "docs" / "errors.md"
    page.write_text(
        page.read_text()
        + "\nSee [the contract](contract.md#no-such-section) and [a file](../examples/no_such_example.py).\n"
    )
    broken = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=checkout,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert broken.returncode != 0, broken.stderr
    assert "contract.md#no-such-section" in broken.stderr and "does not contain an anchor" in broken.stderr
    assert "../examples/no_such_example.py" in broken.stderr and "does not exist" in broken.stderr
    warnings = [line for line in broken.stderr.splitlines() if line.startswith("WARNING")]
    assert warnings and all("no-such-section" in w or "no_such_example" in w for w in warnings), warnings
