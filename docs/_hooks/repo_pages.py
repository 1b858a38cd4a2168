"""MkDocs hook: pages that include files of the repository, and links that work in both places.

The pages under ``docs/`` are written to read on GitHub too, so their links are relative paths
of the repository (``../examples/demo.py``, ``../CONTRIBUTING.md#writing-a-backend``). In the
site, a link to a file that is shown as a page (``README.md`` is the home page, the plugin
READMEs, ``RELIABILITY.md``, CONTRIBUTING.md's backend half) goes to that page; a link to a
file of the repository that is not in the site (an example, a test) becomes its text; a link to
nothing is a warning, which ``mkdocs build --strict`` turns into a failure.

A page includes a file, or one section of it, with a line of its own::

    <!-- include: ../CONTRIBUTING.md § Writing a backend -->

(the section runs from that heading to the next heading of the same level or above, its
headings raised so that it starts at ``#``); the included text's links are resolved from the
included file's folder. On GitHub the line is a comment, and the page's own text links there.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.repo_pages")

#: Files of the repository shown as pages of the site: repository path -> page (docs path).
PAGES = {
    "README.md": "index.md",
    "RELIABILITY.md": "reliability.md",
    "CONTRIBUTING.md": "backends.md",
    "plugins/s3/README.md": "backends/s3.md",
    "plugins/gcs/README.md": "backends/gcs.md",
    "plugins/azure/README.md": "backends/azure.md",
}

INCLUDE = re.compile(r"^<!-- include: (?P<path>\S+)(?: § (?P<section>.+?))? -->$", re.M)
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
# [text](target) and ![alt](target), not images' or links' inside code spans.
LINK = re.compile(r"(?<!`)(!?\[(?P<text>[^\]\n]*)\])\((?P<target>[^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6}) ", re.M)


def section_span(text: str, heading: str, where: str) -> tuple[int, int]:
    """Where in ``text`` the section that starts at the line ``heading`` begins and ends (the
    next heading of the same level or above, outside code, or the end)."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip("\n") == heading), None)
    if start is None:
        raise ValueError(f"{where}: the included section {heading!r} is not a heading of the file")
    level = len(heading) - len(heading.lstrip("#"))
    end = len(lines)
    for i in range(start + 1, len(lines)):
        found = HEADING.match(lines[i])
        if found and len(found.group(1)) <= level and not _in_fence(lines, i):
            end = i
            break
    return sum(map(len, lines[:start])), sum(map(len, lines[:end]))


def _section(text: str, heading: str, where: str) -> str:
    start, end = section_span(text, heading, where)
    shift = len(heading) - len(heading.lstrip("#")) - 1
    return _shift_headings(text[start:end], shift) if shift else text[start:end]


def _in_fence(lines: list[str], index: int) -> bool:
    fences = sum(1 for line in lines[:index] if line.startswith(("```", "~~~")))
    return fences % 2 == 1


def _shift_headings(text: str, shift: int) -> str:
    return _outside_code(
        text, lambda part: HEADING.sub(lambda m: "#" * (len(m.group(1)) - shift) + " ", part)
    )


def _outside_code(text: str, change: Any) -> str:
    out, last = [], 0
    for fence in FENCE.finditer(text):
        out.append(change(text[last : fence.start()]))
        out.append(fence.group(0))
        last = fence.end()
    out.append(change(text[last:]))
    return "".join(out)


def _relink(text: str, source_dir: str, page_dir: str, root: Path, where: str) -> str:
    """``text``'s relative links, written from ``source_dir`` (repository path), for the page."""

    def one(match: re.Match[str]) -> str:
        target = match.group("target")
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
            return match.group(0)
        path, _, anchor = target.partition("#")
        repo_path = posixpath.normpath(posixpath.join(source_dir, path)) if path else None
        if repo_path is None:
            return match.group(0)
        if repo_path == "docs":
            new = posixpath.relpath("index.md", page_dir or ".")
        elif repo_path.startswith("docs/"):
            new = posixpath.relpath(repo_path[len("docs/") :], page_dir or ".")
        elif repo_path in PAGES:
            new = posixpath.relpath(PAGES[repo_path], page_dir or ".")
        elif (root / repo_path).exists():
            return match.group("text") if not match.group(1).startswith("!") else match.group(0)
        else:
            log.warning("%s: the link %r points at %s, which does not exist", where, target, repo_path)
            return match.group(0)
        return f"{match.group(1)}({new}{'#' + anchor if anchor else ''})"

    return _outside_code(text, lambda part: LINK.sub(one, part))


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Expand the page's includes and make its links the site's."""
    docs = Path(config["docs_dir"])
    root = docs.parent
    page_path = page.file.src_uri  # relative to docs/, with "/"
    page_dir = posixpath.dirname(page_path)
    source = f"docs/{page_path}"

    pieces, last = [], 0
    for found in INCLUDE.finditer(markdown):
        pieces.append(
            _relink(markdown[last : found.start()], posixpath.dirname(source), page_dir, root, source)
        )
        included = posixpath.normpath(posixpath.join(posixpath.dirname(source), found.group("path")))
        text = (root / included).read_text(encoding="utf-8")
        if found.group("section"):
            text = _section(text, found.group("section"), source)
        pieces.append(_relink(text, posixpath.dirname(included), page_dir, root, included))
        last = found.end()
    pieces.append(_relink(markdown[last:], posixpath.dirname(source), page_dir, root, source))
    return "".join(pieces)
