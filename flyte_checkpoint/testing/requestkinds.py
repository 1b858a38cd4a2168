"""The kinds of HTTP request an operation makes, told apart by method and path.

The fault suite injects a fault *at one request* of a save or a load: the start of an upload,
its first and its last part, the commit, the abort, a stat, the first and the last range of a
read, a listing, a delete. It does not know any store's protocol, so it learns the requests from
a clean run of the operation through the proxy (:attr:`FaultProxy.log`), sorts them into kinds
(:func:`request_kind`: the method, how many segments the path has, and the names of the query's
parameters: ``PUT /b/k?partNumber=2&uploadId=X`` and ``PUT /b/k?partNumber=3&uploadId=X`` are
one kind, ``POST /b/k?uploadId=X`` another), and faults the first and the last request of each
kind (:func:`positions`): every kind, but not every part of a big save.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from .faultproxy import Fault

#: The faults put at each request: throttling, two server errors, and a reset connection.
REQUEST_FAULTS: tuple[Fault, ...] = (
    Fault.answer(429),
    Fault.answer(500),
    Fault.answer(503),
    Fault.reset("up"),
)


def request_kind(line: str) -> str:
    """``"PUT /3?partNumber&uploadId"`` for ``"PUT /bucket/a/key?partNumber=1&uploadId=x"``: the
    method, the number of path segments and the query's parameter names, sorted."""
    method, _, target = line.partition(" ")
    parts = urlsplit(target)
    segments = len([s for s in parts.path.split("/") if s])
    names = sorted({name for name, _ in parse_qsl(parts.query, keep_blank_values=True)})
    return f"{method} /{segments}" + (f"?{'&'.join(names)}" if names else "")


def fault_label(fault: Fault) -> str:
    """``"HTTP 503"`` or ``"a reset connection"``."""
    return f"HTTP {fault.status}" if fault.action == "answer" else "a reset connection"


@dataclass(frozen=True)
class Position:
    """One request of an operation to put a fault at: the ``nth`` request of ``kind``."""

    kind: str
    nth: int
    count: int  # requests of this kind in the clean run
    example: str  # the request line in the clean run
    role: str  # what it is, for messages: "the commit", "the first of 3 requests like it"

    def matches(self, line: str) -> bool:
        return request_kind(line) == self.kind

    @property
    def label(self) -> str:
        """``"the commit (POST /b/k?uploadId=...)"``."""
        return f"{self.role} ({self.example})"


def positions(lines: list[str], commit: int | None = None) -> list[Position]:
    """The first and the last request of each kind in ``lines`` (a clean run's requests, in the
    order the server got them), kinds in order of first appearance; ``commit`` is the index in
    ``lines`` of the request that commits (named so in messages), if any."""
    kinds: dict[str, list[int]] = {}
    for index, line in enumerate(lines):
        kinds.setdefault(request_kind(line), []).append(index)
    found: list[Position] = []
    for kind, seen in kinds.items():
        picks = [1] if len(seen) == 1 else [1, len(seen)]
        for nth in picks:
            index = seen[nth - 1]
            if index == commit:
                role = "the commit"
            elif len(seen) == 1:
                role = "the only request like it"
            else:
                role = f"the {'first' if nth == 1 else 'last'} of {len(seen)} requests like it"
            found.append(Position(kind, nth, len(seen), shorten(lines[index]), role))
    return found


def commit_index(lines: list[str], pattern: str | None) -> int | None:
    """Which of a clean save's requests commits it: the last one ``pattern`` (a regular
    expression, :attr:`StoreRecipe.commit`) is found in, or else the last request."""
    if pattern is None:
        return len(lines) - 1 if lines else None
    found = [i for i, line in enumerate(lines) if re.search(pattern, line)]
    return found[-1] if found else None


def shorten(line: str, limit: int = 120) -> str:
    """A request line cut for a message."""
    return line if len(line) <= limit else line[: limit - 3] + "..."


__all__ = [
    "REQUEST_FAULTS",
    "Position",
    "commit_index",
    "fault_label",
    "positions",
    "request_kind",
    "shorten",
]
