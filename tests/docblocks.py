"""The code blocks of the documentation: the README and the site's pages, as the tests read them.

A page is the README or a Markdown file under ``docs/``; a page that includes a file of the
repository (``<!-- include: ../CONTRIBUTING.md § ## Writing a backend -->``, see
``docs/_hooks/repo_pages.py``) shows that file's blocks too, and they count as its own. The
blocks are the fenced ``python``, ``bash`` and ``console`` ones.

A comment on the line before a block says how the tests treat it:

- none: ``tests/test_docs_blocks.py`` runs it (and type-checks a Python block);
- ``<!-- docs-test: run by tests/test_x.py -->``: that test runs it (it needs a fresh
  virtualenv, a signal sent at the right moment, Flyte's command line...); it is still
  type-checked;
- ``<!-- docs-test: skip: why -->``: it cannot run here (a real cloud account, a package index
  that has the distributions); neither run nor type-checked. The exception, with its reason.

A mark on the line before an include line is that of every included block without its own
(RELIABILITY.md, included whole, is not this project's to annotate).
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LANGS = ("python", "bash", "console")

FENCE = re.compile(r"^```(?P<lang>[\w+-]*)\n(?P<code>.*?)^```$", re.S | re.M)
MARK = re.compile(r"<!-- docs-test: (?P<what>run by|skip:) ?(?P<arg>.*?) -->")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is written, the page that shows it, and how it is tested."""

    source: str  # repository path of the file it is written in
    line: int  # its first line of code, 1-based, in that file
    page: str  # repository path of the page that shows it
    lang: str
    code: str
    mark: str  # "", "run by" or "skip"
    arg: str  # for "run by", the test file; for "skip", the reason

    @property
    def name(self) -> str:
        return f"{self.source}:{self.line}"

    @property
    def file_name(self) -> str | None:
        """``name.py`` when the block's first line is ``# name.py``: a file for later blocks to run."""
        found = re.fullmatch(r"# ([\w/.-]+\.py)", self.code.splitlines()[0]) if self.code else None
        return found.group(1) if found else None


@cache
def hook() -> ModuleType:
    """The site's include hook, for its include syntax and section rule."""
    spec = importlib.util.spec_from_file_location("repo_pages", DOCS / "_hooks" / "repo_pages.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pages() -> list[str]:
    """The README and every page under docs/, as repository paths."""
    found = sorted(str(p.relative_to(ROOT)) for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)
    return ["README.md", *found]


def _blocks_of(text: str, source: str, page: str, first_line: int) -> list[Block]:
    out = []
    for found in FENCE.finditer(text):
        lang = found.group("lang")
        if lang not in LANGS:
            continue
        before = text[: found.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.fullmatch(before.strip())
        what, arg = (mark.group("what").rstrip(":"), mark.group("arg").strip()) if mark else ("", "")
        line = first_line + text.count("\n", 0, found.start("code"))
        out.append(Block(source, line, page, lang, found.group("code"), what, arg))
    return out


def page_blocks(page: str) -> list[Block]:
    """The blocks a page shows, in order, its includes' among them."""
    text = (ROOT / page).read_text()
    if page == "docs/index.md":  # the README is the home page: its blocks are counted once, as its own
        return []
    out: list[Block] = []
    last = 0
    for found in hook().INCLUDE.finditer(text):
        out += _blocks_of(text[last : found.start()], page, page, 1 + text.count("\n", 0, last))
        included = str((ROOT / page).parent.joinpath(found.group("path")).resolve().relative_to(ROOT))
        whole = (ROOT / included).read_text()
        start, end = 0, len(whole)
        if found.group("section"):
            start, end = hook().section_span(whole, found.group("section"), page)
        included_blocks = _blocks_of(whole[start:end], included, page, 1 + whole.count("\n", 0, start))
        before = text[: found.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.fullmatch(before.strip())
        if mark:  # a mark on the include line is every included block's that has none of its own
            what, arg = mark.group("what").rstrip(":"), mark.group("arg").strip()
            included_blocks = [b if b.mark else replace(b, mark=what, arg=arg) for b in included_blocks]
        out += included_blocks
        last = found.end()
    out += _blocks_of(text[last:], page, page, 1 + text.count("\n", 0, last))
    return out


def all_blocks() -> list[Block]:
    return [b for page in pages() for b in page_blocks(page)]


def transcript(code: str) -> list[tuple[str, list[str]]]:
    """(command, the output lines shown under it) for each ``$ `` line of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in code.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif line.strip() and steps:
            steps[-1][1].append(line)
    return steps


def commands(code: str) -> list[str]:
    """The commands of a bash block, without their comments."""
    return [c for line in code.splitlines() if (c := line.split("  #", 1)[0].strip())]


def normalize(lines: list[str]) -> list[str]:
    """Lines with what a rerun changes replaced: durations, rates, times."""
    out = []
    for line in lines:
        line = re.sub(r"\b\d+\.\d+s\b", "<t>s", line)
        line = re.sub(r"\(\d+\.\d+ MB/s\)", "(<r> MB/s)", line)
        line = re.sub(r"\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\b", "<date>", line)
        out.append(line.rstrip())
    return out


def same(actual: list[str], shown: list[str]) -> bool:
    """Equal, but for byte counts of six digits or more, which may differ by a few bytes: a
    tarball's size depends on its files' modification times (whole seconds in its compressed
    tar headers)."""
    if len(actual) != len(shown):
        return False
    for got, want in zip(actual, shown, strict=True):
        got_parts, want_parts = re.split(r"(\d{6,})", got), re.split(r"(\d{6,})", want)
        if len(got_parts) != len(want_parts):
            return False
        for k, (g, w) in enumerate(zip(got_parts, want_parts, strict=True)):
            if g != w and not (k % 2 and abs(int(g) - int(w)) <= 64):
                return False
    return True
