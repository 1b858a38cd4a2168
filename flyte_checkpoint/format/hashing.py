"""SHA-256 of the files a folder save packs, on a thread of its own.

The packer's thread reads the files and feeds the compressors; hashing there too made it the
slowest stage of small-file saves. Here it hands each piece of file data (``bytes``, which
nobody changes afterwards) to one hashing thread, in batches so that small files cost one
queue hand-off per batch rather than per file; ``hashlib`` releases the GIL on pieces over
2 KiB, so the hashing runs beside the reading. One thread keeps each file's pieces in order.
The queue is bounded: the reader waits rather than holding more than a few batches in memory.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from typing import Any

_BATCH = 1024 * 1024  # bytes of file data per hand-off
_DEPTH = 8  # batches queued at most (with 4 MiB pieces: 32 MiB held at most)
_POLL = 0.1  # seconds: how often a waiting side checks that the other is still there


class Hasher:
    """Hashes pieces of files on one background thread; :meth:`close` waits for all of them."""

    def __init__(self) -> None:
        self._batch: list[tuple[Any, bytes]] = []
        self._size = 0
        self._queue: queue.Queue[list[tuple[Any, bytes]] | None] = queue.Queue(maxsize=_DEPTH)
        self._error: BaseException | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fcp-hash", daemon=True)
        self._thread.start()

    def new(self) -> Any:
        """A SHA-256 object to :meth:`update`; read it (``hexdigest()``) after :meth:`close`."""
        return hashlib.sha256()

    def update(self, digest: Any, piece: bytes) -> None:
        self._batch.append((digest, piece))
        self._size += len(piece)
        if self._size >= _BATCH:
            self._send()

    def _send(self) -> None:
        batch, self._batch, self._size = self._batch, [], 0
        while True:
            if self._error is not None:
                raise self._error
            if self._stopped.is_set():
                raise RuntimeError("the hashing thread has stopped")
            try:
                self._queue.put(batch, timeout=_POLL)
                return
            except queue.Full:
                continue

    def _run(self) -> None:
        try:
            while (batch := self._queue.get()) is not None:
                for digest, piece in batch:
                    digest.update(piece)
        except BaseException as exc:  # pragma: no cover - hashlib does not fail on bytes
            self._error = exc
        finally:
            self._stopped.set()

    def close(self) -> None:
        """Hash what is left and wait for the thread; raises its error if it had one."""
        if self._batch:
            self._send()
        self.abort()
        if self._error is not None:
            raise self._error

    def abort(self) -> None:
        """Stop the thread (what is queued is still hashed; nothing new is taken)."""
        while not self._stopped.is_set():
            try:
                self._queue.put(None, timeout=_POLL)
                break
            except queue.Full:
                continue
        self._thread.join()


__all__ = ["Hasher"]
