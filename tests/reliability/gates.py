"""A store wrapper that stops a transfer at a point and holds it there until the test says go.

``gated(uri)`` registers, for the URI's scheme, a store that wraps the real one (a runtime
registration, removed on exit). Its writers and readers pass everything through, except
that the first transfer to reach the gate's point (the ``after``-th write of a writer, or
read of a reader) sets :attr:`Gate.reached` and waits for :attr:`Gate.release` before going
on. The gate is one-shot: later transfers pass freely. Writers record how they ended
(``"committed"`` or ``"aborted"``) in :attr:`Gate.endings`, in order.

So a test cancels or forks at a moment the code itself reports, whatever the machine's
speed; :data:`HANG` is only a guard that turns a hang into a failure.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import BinaryIO

from flyte_checkpoint.blobstore import BlobStore, BlobWriter
from flyte_checkpoint.registry import register_store, store_for, unregister_store
from flyte_checkpoint.uri import scheme_of

#: Seconds a gate waits to be released, and tests wait for a gate, before failing.
HANG = float(os.environ.get("FCP_HANG", "120"))


class Gate:
    """Where transfers stop: at the ``after``-th write (or read) call of the first to get there."""

    def __init__(self, *, writes: int | None = None, reads: int | None = None) -> None:
        self.writes = writes
        self.reads = reads
        self.reached = threading.Event()
        self.release = threading.Event()
        self.endings: list[tuple[str, int]] = []  # (how, bytes written) for each writer
        self._lock = threading.Lock()
        self._used = False

    def pass_through(self, count: int, limit: int | None) -> None:
        """Called before the ``count``-th call; holds the first caller that reaches ``limit``."""
        if limit is None or count < limit:
            return
        with self._lock:
            if self._used:
                return
            self._used = True
        self.reached.set()
        if not self.release.wait(HANG):
            raise AssertionError(f"the gate was not released within {HANG}s")

    def wait_reached(self) -> None:
        assert self.reached.wait(HANG), f"no transfer reached the gate within {HANG}s"


class _GatedWriter(BlobWriter):
    def __init__(self, inner: BlobWriter, gate: Gate) -> None:
        super().__init__(inner.uri)
        self._inner = inner
        self._gate = gate
        self._calls = 0

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        self._calls += 1
        self._gate.pass_through(self._calls, self._gate.writes)
        self._inner.write(data)

    def _commit(self) -> None:
        self._inner.close()
        self._gate.endings.append(("committed", self.bytes_written))

    def _abort(self) -> None:
        self._inner.abort()
        self._gate.endings.append(("aborted", self.bytes_written))


class _GatedReader:
    def __init__(self, inner: BinaryIO, gate: Gate) -> None:
        self._inner = inner
        self._gate = gate
        self._calls = 0

    def read(self, n: int = -1) -> bytes:
        self._calls += 1
        self._gate.pass_through(self._calls, self._gate.reads)
        return self._inner.read(n)

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._inner.close()

    def __enter__(self) -> _GatedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class GatedStore(BlobStore):
    """``inner`` with its writers and readers passing through ``gate``."""

    def __init__(self, inner: BlobStore, gate: Gate) -> None:
        self.inner = inner
        self.gate = gate

    def open_write(self, uri: str) -> BlobWriter:
        return _GatedWriter(self.inner.open_write(uri), self.gate)

    def open_read(self, uri: str) -> BinaryIO:
        return _GatedReader(self.inner.open_read(uri), self.gate)  # type: ignore[return-value]

    def stat(self, uri: str) -> int | None:
        return self.inner.stat(uri)

    def delete(self, uri: str) -> None:
        self.inner.delete(uri)

    def list(self, prefix: str) -> Iterator[str]:
        return self.inner.list(prefix)


@contextlib.contextmanager
def gated(uri: str, gate: Gate) -> Iterator[Gate]:
    """Route the URI's scheme through a :class:`GatedStore` of its current store, for the block."""
    real = store_for(uri)
    name = f"gated-{scheme_of(uri)}"
    register_store(name, (scheme_of(uri),), lambda: GatedStore(real, gate), priority=100)
    try:
        yield gate
    finally:
        unregister_store(name)
