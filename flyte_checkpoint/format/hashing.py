"""The content hash (:mod:`.digests`) of the files a folder save packs, on a thread of its own.

The packer's thread reads the files and feeds the compressors; hashing there too made it the
slowest stage of small-file saves. Here it hands each piece of file data (``bytes``, which
nobody changes afterwards) to one hashing thread, in batches so that small files cost one
queue hand-off per batch rather than per file; the hashes release the GIL on large pieces,
so the hashing runs beside the reading. One thread keeps each file's pieces in order.
The queue is bounded: the reader waits rather than holding more than a few batches in memory.
"""

from __future__ import annotations

import queue
import threading
import weakref
from typing import Any

from . import digests

_BATCH = 1024 * 1024  # bytes of file data per hand-off
_DEPTH = 8  # batches queued at most (with 4 MiB pieces: 32 MiB held at most)
_POLL = 0.1  # seconds: how often a waiting side checks that the other is still there


class _Shared:
    """What the hashing thread and its :class:`Hasher` share (the thread holds no reference to
    the hasher itself, so that a hasher dropped unclosed, its save interrupted, ends it)."""

    def __init__(self) -> None:
        self.queue: queue.Queue[list[tuple[Any, bytes | memoryview]] | None] = queue.Queue(maxsize=_DEPTH)
        self.error: BaseException | None = None
        self.stopped = threading.Event()


def _run(shared: _Shared, owner: weakref.ref[Hasher]) -> None:
    try:
        while True:
            try:
                batch = shared.queue.get(timeout=_POLL)
            except queue.Empty:
                if owner() is None:
                    return  # dropped unclosed: an interrupt landed where close() or abort() could not run
                continue
            if batch is None:
                return
            for digest, piece in batch:
                digest.update(piece)
    except BaseException as exc:  # pragma: no cover - hashing does not fail on bytes
        shared.error = exc
    finally:
        shared.stopped.set()


class Hasher:
    """Hashes pieces of files on one background thread; :meth:`close` waits for all of them."""

    def __init__(self) -> None:
        self._batch: list[tuple[Any, bytes | memoryview]] = []
        self._size = 0
        self._shared = _Shared()
        self._thread = threading.Thread(
            target=_run, args=(self._shared, weakref.ref(self)), name="fcp-hash", daemon=True
        )
        self._thread.start()

    def new(self) -> Any:
        """A hash object (:data:`.digests.CURRENT`) to :meth:`update`; read it (``hexdigest()``)
        after :meth:`close`. Any hash object can be updated here."""
        return digests.new()

    def update(self, digest: Any, piece: bytes | memoryview) -> None:
        self._batch.append((digest, piece))
        self._size += len(piece)
        if self._size >= _BATCH:
            self._send()

    def _send(self) -> None:
        batch, self._batch, self._size = self._batch, [], 0
        shared = self._shared
        while True:
            if shared.error is not None:
                raise shared.error
            if shared.stopped.is_set():
                raise RuntimeError("the hashing thread has stopped")
            try:
                shared.queue.put(batch, timeout=_POLL)
                return
            except queue.Full:
                continue

    def close(self) -> None:
        """Hash what is left and wait for the thread; raises its error if it had one."""
        try:
            if self._batch:
                self._send()
        finally:
            self.abort()
        if self._shared.error is not None:
            raise self._shared.error

    def abort(self) -> None:
        """Stop the thread (what is queued is still hashed; nothing new is taken)."""
        shared = self._shared
        while not shared.stopped.is_set():
            try:
                shared.queue.put(None, timeout=_POLL)
                break
            except queue.Full:
                continue
        self._thread.join()


__all__ = ["Hasher"]
