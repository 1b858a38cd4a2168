"""A gate: a hook for the spy store (tests/spystore.py) that holds a transfer at a point until
the test says go.

The first call to reach the gate's point (the ``writes``-th write to a store writer, or the
``reads``-th read of a store reader, counted over the spy store) sets :attr:`Gate.reached`
and waits for :attr:`Gate.release` before going on. The gate is one-shot: later calls pass
freely. How each write ended is kept in :attr:`Gate.endings`, in order: the call that
starts it, ``"commit"`` or ``"abort"`` of a writer, or a whole-object ``"write_bytes"`` or
``"upload_file"``.

So a test cancels or forks at a moment the code itself reports, whatever the machine's
speed; :data:`HANG` is only a guard that turns a hang into a failure.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import pytest

#: Seconds a gate waits to be released, and tests wait for a gate, before failing.
HANG = float(os.environ.get("FCP_HANG", "120"))


class Gate:
    """Holds the first call that is the ``writes``-th write or the ``reads``-th read."""

    def __init__(self, *, writes: int | None = None, reads: int | None = None) -> None:
        self.limits = {"write": writes, "read": reads}
        self.reached = threading.Event()
        self.release = threading.Event()
        self.endings: list[str] = []
        self._counts = {"write": 0, "read": 0}
        self._lock = threading.Lock()
        self._used = False

    def hook(self, op: str, uri: str) -> None:
        """The spy store's hook: runs before each store call (a save's manifest, written after
        its commit into the object's ``.fcp-history/`` sidecar, is not one it holds or counts)."""
        if ".fcp-history/" in uri:
            return
        if op in ("commit", "abort", "write_bytes", "upload_file"):
            self.endings.append(op)
        if op not in self._counts:
            return
        with self._lock:
            self._counts[op] += 1
            limit = self.limits[op]
            if self._used or limit is None or self._counts[op] < limit:
                return
            self._used = True
        self.reached.set()
        if not self.release.wait(HANG):
            raise AssertionError(f"the gate was not released within {HANG}s")

    def wait_reached(self) -> None:
        assert self.reached.wait(HANG), f"no transfer reached the gate within {HANG}s"


async def cancel_then_close(
    load: asyncio.Task[Any], checkpoint: Any, gate: Gate, watchdog: threading.Timer
) -> bool:
    """Cancel ``load`` (held at ``gate``), call ``checkpoint.close()`` in the event loop, then
    release the gate; whether ``close()`` returned while the download was still held.

    ``watchdog`` (started here, a timer that releases the gate) only turns a ``close()`` that
    waits for the download into a failure instead of a hang.
    """
    load.cancel()
    with pytest.raises(asyncio.CancelledError):
        await load
    watchdog.start()
    checkpoint.close()  # in the event loop: it must not wait for the held download
    returned_first = not gate.release.is_set()
    gate.release.set()
    return returned_first


class HoldAt:
    """A spy-store hook (tests/spystore.py) that holds the ``nth`` call of one of ``ops`` (the
    spy's operation names: ``read_range``, ``open_read``, a stream's ``read``...) until
    :attr:`release` is set: a load stopped between two of its reads, at a point it reports.

    :attr:`reached` is set when it holds, and ``stopped`` too (an event the caller also sets when
    the load ends first, so that it can wait for whichever comes)."""

    def __init__(self, ops: str | tuple[str, ...], nth: int, stopped: threading.Event | None = None) -> None:
        self.ops = (ops,) if isinstance(ops, str) else ops
        self.nth = nth
        self.stopped = stopped
        self.reached, self.release = threading.Event(), threading.Event()
        self._count = 0
        self._lock = threading.Lock()

    def __call__(self, op: str, uri: str) -> None:
        if op not in self.ops:
            return
        with self._lock:
            self._count += 1
            if self._count != self.nth:
                return
        self.reached.set()
        if self.stopped is not None:
            self.stopped.set()
        assert self.release.wait(HANG), f"a held load was not released within {HANG}s"

    def __repr__(self) -> str:
        return f"{'/'.join(self.ops)} #{self.nth}"
