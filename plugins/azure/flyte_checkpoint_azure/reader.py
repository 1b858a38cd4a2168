"""Streaming reads: the first range fetched at open, the rest prefetched concurrently, in order."""

from __future__ import annotations

import hashlib
import io
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from flyte_checkpoint.errors import CheckpointError, CorruptCheckpointError, TransientError
from flyte_checkpoint.uri import redact

#: ``fetch(offset, length)`` returns those bytes of the object (raises SDK errors).
Fetch = Callable[[int, int], bytes]
ErrorMapper = Callable[[BaseException, str], CheckpointError]


class AzureBlobReader(io.RawIOBase):
    """A read-only, forward-only binary stream over one blob.

    Ranges of ``chunk_size`` bytes after the first are fetched by up to ``concurrency``
    threads ahead of the reader (so memory stays below ``chunk_size * (concurrency + 1)``)
    and delivered in order. ``read(n)`` returns ``n`` bytes unless the object ends first.
    When the blob carries an MD5 and the stream is read to its end, the bytes are checked
    against it: a mismatch raises CorruptCheckpointError.
    """

    def __init__(
        self,
        uri: str,
        *,
        first: bytes,
        size: int,
        fetch: Fetch,
        chunk_size: int,
        concurrency: int,
        expected_md5: bytes | None,
        fail: ErrorMapper,
    ) -> None:
        super().__init__()
        self.uri = uri
        self.size = size
        self._fetch = fetch
        self._chunk = max(1, chunk_size)
        self._concurrency = max(1, concurrency)
        self._fail = fail
        self._expected_md5 = expected_md5
        self._md5 = hashlib.md5(usedforsecurity=False) if expected_md5 is not None else None
        self._pending: deque[tuple[int, Future[bytes]]] = deque()
        self._pool: ThreadPoolExecutor | None = None
        self._next_offset = len(first)
        self._received = 0
        self._pos = 0
        self._current = memoryview(b"")
        self._checked = False
        self._take(first, len(first))
        self._schedule()

    # -- io.RawIOBase ----------------------------------------------------------

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        """Fill ``buffer`` with the next bytes; fewer only at the end of the object."""
        self._check_open()
        out = memoryview(buffer).cast("B")
        filled = 0
        while filled < len(out):
            if not self._current and not self._advance():
                break
            n = min(len(out) - filled, len(self._current))
            out[filled : filled + n] = self._current[:n]
            self._current = self._current[n:]
            filled += n
        self._pos += filled
        return filled

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes (all that is left when ``size`` is negative or None)."""
        self._check_open()
        if size is None or size < 0:
            return self.readall()
        if len(self._current) >= size:
            data = self._current[:size].tobytes()
            self._current = self._current[size:]
            self._pos += size
            return data
        buf = bytearray(size)
        n = self.readinto(buf)
        del buf[n:]
        return bytes(buf)

    def readall(self) -> bytes:
        """Everything left, checked against the blob's MD5 if it has one."""
        return b"".join(self.chunks())

    def chunks(self) -> Iterator[bytes | memoryview]:
        """The rest of the object as it arrives, in order, without extra copies."""
        self._check_open()
        while self._current or self._advance():
            piece, self._current = self._current, memoryview(b"")
            self._pos += len(piece)
            yield piece

    def close(self) -> None:
        """Stop the prefetch (waiting for ranged GETs already running) and free the buffers."""
        if not self.closed:
            for _, fut in self._pending:
                fut.cancel()
            self._pending.clear()
            pool, self._pool = self._pool, None
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
            self._current = memoryview(b"")
        super().close()

    # -- internals -------------------------------------------------------------

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError(f"read from a closed reader of {redact(self.uri)}")

    def _schedule(self) -> None:
        while len(self._pending) < self._concurrency and self._next_offset < self.size:
            length = min(self._chunk, self.size - self._next_offset)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._concurrency, thread_name_prefix="fcp-azure-get")
            fut = self._pool.submit(self._fetch, self._next_offset, length)
            self._pending.append((length, fut))
            self._next_offset += length

    def _advance(self) -> bool:
        """Make the next range current; False (after the integrity check) at the end."""
        if not self._pending:
            self._finish()
            return False
        length, fut = self._pending.popleft()
        try:
            data = fut.result()
        except Exception as exc:
            raise self._fail(exc, "read") from exc
        self._take(data, length)
        self._schedule()
        return True

    def _take(self, data: bytes, expected: int) -> None:
        if len(data) != expected:
            raise TransientError(
                f"cannot read {redact(self.uri)}: a range came back with {len(data)} bytes"
                f" instead of {expected}; reading it again can succeed"
            )
        if self._md5 is not None and data:
            self._md5.update(data)
        self._received += len(data)
        self._current = memoryview(data)

    def _finish(self) -> None:
        if self._checked:
            return
        self._checked = True
        if self._received != self.size:
            raise TransientError(
                f"cannot read {redact(self.uri)}: got {self._received} of {self.size} bytes;"
                " reading it again can succeed"
            )
        if self._md5 is not None and self._md5.digest() != self._expected_md5:
            raise CorruptCheckpointError(
                f"{redact(self.uri)} is damaged: the MD5 of its {self.size} bytes does not match"
                " the MD5 stored with it. The object was altered or truncated after it was"
                " written; load an older checkpoint or save a new one"
            )
