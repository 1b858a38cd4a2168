"""Every call one store instance receives, recorded on the instance itself (below any wrapper the
registry puts around it), with what its writers were given: to compare what two runs of the same
code asked of a store.

:func:`recording` puts a recording function in the store instance's ``__dict__`` for each method
of :class:`~flyte_checkpoint.storage.blobstore.BlobStore` (and ``sharded_writes`` where the store
has it), so the store's class, its capabilities and its fast paths stay what they are: a caller,
wrapped or not, reaches the same code. A writer it opens records its pieces (a run of written
bytes as its length and digest, a server-side copy as its source and range) at its commit or
abort; a store's own sharded writes record their segments the same way. Arguments are kept as
:func:`summary` gives them, strings through the caller's ``normalize`` (which replaces what
differs from run to run: a root, a random token)::

    with recording(store, normalize) as calls:
        ...
    calls.entries  # [("stat", "<run>/ckpt"), ("open_write", "<run>/ckpt"), ("commit", ...), ...]
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from flyte_checkpoint.storage.blobstore import BlobStore, BlobWriter, CopyCheck, CopySource

Normalize = Callable[[str], str]


def summary(value: Any, normalize: Normalize) -> Any:
    """A comparable stand-in for an argument: strings normalized, bytes as their length and
    digest, copy sources as their URI and size (not their version), containers item by item,
    other objects as their type's name."""
    if isinstance(value, str):
        return normalize(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        return ("bytes", len(data), hashlib.sha256(data).hexdigest()[:16])
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, CopySource):
        return ("source", normalize(value.uri), value.size)
    if isinstance(value, os.PathLike):
        return normalize(os.fspath(value))
    if isinstance(value, dict):
        return tuple(sorted((str(k), summary(v, normalize)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(summary(v, normalize) for v in value)
    return type(value).__name__


@dataclass
class Calls:
    """What :func:`recording` saw, in the order the calls began (several threads: interleaved)."""

    normalize: Normalize
    entries: list[tuple[Any, ...]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, *entry: Any) -> None:
        with self.lock:
            self.entries.append(entry)


class _Pieces:
    """What a writer (or a segment) was given: runs of written bytes, and copies, in order."""

    def __init__(self) -> None:
        self.pieces: list[tuple[Any, ...]] = []
        self._run = hashlib.sha256()
        self._n = 0

    def wrote(self, data: Any) -> None:
        self._run.update(data)
        self._n += len(data)

    def copied(self, source: CopySource, start: int, length: int, normalize: Normalize) -> None:
        self._end_run()
        self.pieces.append(("copy", normalize(source.uri), start, length))

    def done(self) -> tuple[tuple[Any, ...], ...]:
        self._end_run()
        return tuple(self.pieces)

    def _end_run(self) -> None:
        if self._n:
            self.pieces.append(("write", self._n, self._run.hexdigest()[:16]))
            self._run, self._n = hashlib.sha256(), 0


def _record_writer(writer: BlobWriter, uri: str, calls: Calls) -> BlobWriter:
    """Record the writer's pieces at its commit or abort, on the instance (its hooks), so the
    writer the store returned is the one the caller gets."""
    pieces = _Pieces()
    real_write, real_copy, real_commit, real_abort = (
        writer._write,
        writer._copy,
        writer._commit,
        writer._abort,
    )

    def write(data: Any) -> None:
        real_write(data)
        pieces.wrote(data)

    def copy(source: CopySource, start: int, length: int, expect: CopyCheck | None) -> None:
        real_copy(source, start, length, expect)
        pieces.copied(source, start, length, calls.normalize)

    def commit() -> None:
        calls.add("commit", calls.normalize(uri), pieces.done())
        real_commit()

    def abort() -> None:
        calls.add("abort", calls.normalize(uri), pieces.done())
        real_abort()

    writer._write, writer._copy, writer._commit, writer._abort = write, copy, commit, abort  # type: ignore[method-assign]
    return writer


class _RecordedSegment:
    def __init__(self, inner: Any, rank: int, calls: Calls) -> None:
        self._inner, self._rank, self._calls = inner, rank, calls
        self._pieces = _Pieces()

    def write(self, data: Any) -> int:
        n = self._inner.write(data)
        self._pieces.wrote(data)
        return n

    def padding_needed(self) -> int:
        return self._inner.padding_needed()

    def finish(self) -> Any:
        self._calls.add("segment.finish", self._rank, self._pieces.done())
        return self._inner.finish()

    def abort(self) -> None:
        self._calls.add("segment.abort", self._rank, self._pieces.done())
        self._inner.abort()


class _RecordedShardedWrites:
    """A store's own sharded writes, each call recorded (segments by rank)."""

    def __init__(self, inner: Any, calls: Calls) -> None:
        self._inner, self._calls = inner, calls

    def _add(self, op: str, *args: Any) -> None:
        self._calls.add(f"sharded.{op}", *(summary(a, self._calls.normalize) for a in args))

    def begin(self, token: str) -> Any:
        self._add("begin", token)
        return self._inner.begin(token)

    def segment(self, session: Any, rank: int, world: int, joiner: str) -> Any:
        self._add("segment", rank, world)
        segment = self._inner.segment(session, rank, world, joiner=joiner)
        return _RecordedSegment(segment, rank, self._calls)

    def __getattr__(self, name: str) -> Any:
        if name in ("check_world", "plan", "prepare"):  # part plans: no store call to record
            return getattr(self._inner, name)
        raise AttributeError(name)

    def commit(self, session: Any, pieces: Any, tail: bytes) -> None:
        self._add("commit", len(pieces), tail)
        self._inner.commit(session, pieces, tail)

    def abort(self, session: Any) -> None:
        self._add("abort")
        self._inner.abort(session)

    def sweep(self, session: Any) -> None:
        self._add("sweep")
        self._inner.sweep(session)


@contextlib.contextmanager
def recording(store: BlobStore, normalize: Normalize) -> Iterator[Calls]:
    """Record the calls ``store`` receives while the block runs (see the module docstring)."""
    calls = Calls(normalize)
    names = [n for n in dir(BlobStore) if not n.startswith("_") and callable(getattr(BlobStore, n))]
    names += ["sharded_writes"] if hasattr(store, "sharded_writes") else []
    assert not any(name in vars(store) for name in names), "the store is being recorded already"

    def recorder(name: str) -> Callable[..., Any]:
        real = getattr(store, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            calls.add(name, *(summary(a, normalize) for a in args), *sorted(kwargs.items()))
            result = real(*args, **kwargs)
            if name == "open_write":
                return _record_writer(result, args[0], calls)
            if name == "sharded_writes":
                return _RecordedShardedWrites(result, calls)
            return result

        return call

    for name in names:
        setattr(store, name, recorder(name))
    try:
        yield calls
    finally:
        for name in names:
            vars(store).pop(name, None)
