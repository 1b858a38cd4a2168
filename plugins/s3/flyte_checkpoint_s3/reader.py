"""Streaming reads: one GET for a small object; for a large one, that GET's first range plus
concurrent ranged GETs of the rest, a bounded window ahead, delivered in order.

The first GET returns the object's size, ETag and stored checksum. Later ranges are asked
with ``If-Match: <ETag>`` so a read never mixes two versions of an object (a change
mid-read is a :class:`~flyte_checkpoint.errors.TransientError`: read again). The bytes
delivered are checksummed in order and compared with the stored full-object checksum at
the end (a mismatch is :class:`~flyte_checkpoint.errors.CorruptCheckpointError`); composite
(per-part) checksums and algorithms not computable here are not verified.
"""

from __future__ import annotations

import io
import logging
from collections import deque
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from flyte_checkpoint.errors import CorruptCheckpointError, TransientError
from flyte_checkpoint.storage.kit import Location
from flyte_checkpoint.uri import redact

from . import integrity
from .integrity import Crc

if TYPE_CHECKING:
    from .store import S3Store

log = logging.getLogger("flyte_checkpoint.s3")


def open_reader(store: S3Store, loc: Location, uri: str) -> S3Reader:
    """A stream of the object at ``loc``: its first GET now (raising the project's errors, a
    :class:`~flyte_checkpoint.errors.NotFoundError` for an absent object), the rest as it is read."""
    resp = store.call(lambda c: c.get_object(Bucket=loc.bucket, Key=loc.key), uri, "read")
    return S3Reader(store, uri, loc, resp)


class S3Reader(io.RawIOBase):
    """A readable, non-seekable binary stream of one S3 object (see the module docstring)."""

    def __init__(self, store: S3Store, uri: str, loc: Location, response: dict[str, Any]) -> None:
        super().__init__()
        self._store = store
        self._uri = uri
        self._loc = loc
        self._size = int(response["ContentLength"])
        self._etag = response.get("ETag")
        self._body = response["Body"]
        self._range_size = store.config.read_range_size
        self._window = store.config.read_concurrency
        self._pos = 0
        # Bytes taken from the first GET's body; the rest comes in ranges.
        self._body_end = min(self._size, self._range_size)
        self._next_offset = self._body_end
        self._body_open = True
        self._pending: deque[tuple[int, int, Future[bytes]]] = deque()
        self._chunk = memoryview(b"")
        self._crc: Crc | None = None
        self._crc_value = 0
        self._expected: tuple[str, str] | None = None
        if store.config.verify_checksums:
            self._expected = integrity.expected_checksum(response)
            if self._expected is not None:
                self._crc = integrity.find(self._expected[0])
                if self._crc is None:
                    log.debug(
                        "%s: %s checksum not computable here (install awscrt); not verified",
                        redact(uri),
                        self._expected[0],
                    )
        self._fill_window()

    @property
    def size(self) -> int:
        """The object's size in bytes."""
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._pos

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        data = self._take(len(view))
        n = len(data)
        view[:n] = data
        return n

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            return self.readall()
        return bytes(self._take(size))

    def readall(self) -> bytes:
        parts: list[bytes] = []
        while True:
            data = self._take(max(self._size - self._pos, 1))
            if not data:
                return b"".join(parts)
            parts.append(bytes(data))

    def close(self) -> None:
        if not self.closed:
            for _, _, future in self._pending:
                future.cancel()
            self._pending.clear()
            self._chunk = memoryview(b"")
            self._body.close()
        super().close()

    # -- internals -------------------------------------------------------------

    def _take(self, limit: int) -> bytes | memoryview:
        """Up to ``limit`` next bytes (empty only at the end of the object)."""
        if self.closed:
            raise ValueError(f"read of a closed reader for {redact(self._uri)}")
        if limit <= 0 or self._pos >= self._size:
            return b""
        if self._pos < self._body_end:
            data: bytes | memoryview = self._read_body(min(limit, self._body_end - self._pos))
            if self._pos + len(data) == self._body_end < self._size:
                # The rest comes from ranged GETs: drop this connection (it would go on sending
                # the whole object) and give its slot of the window to one more range.
                self._body.close()
                self._body_open = False
                self._fill_window()
        else:
            if not self._chunk:
                self._chunk = memoryview(self._next_range())
            data = self._chunk[:limit]
            self._chunk = self._chunk[len(data) :]
        self._pos += len(data)
        if self._crc is not None:
            self._crc_value = self._crc.compute(data, self._crc_value)
        if self._pos >= self._size:
            self._finish()
        return data

    def _read_body(self, n: int) -> bytes:
        try:
            data = self._body.read(n)
        except Exception as exc:
            raise self._store.map(exc, self._uri, "read")
        if not data:
            raise TransientError(
                f"the connection ended after {self._pos} of {self._size} bytes of {redact(self._uri)};"
                " read again"
            )
        return data

    def _next_range(self) -> bytes:
        start, end, future = self._pending.popleft()
        try:
            data = future.result()
        finally:
            self._fill_window()
        if len(data) != end - start:
            raise TransientError(
                f"a ranged GET of {redact(self._uri)} returned {len(data)} bytes instead of"
                f" {end - start}; read again"
            )
        return data

    def _fill_window(self) -> None:
        # The first GET's body counts as one of the window while it is being read.
        limit = self._window - (1 if self._body_open else 0)
        while len(self._pending) < limit and self._next_offset < self._size:
            start = self._next_offset
            end = min(start + self._range_size, self._size)
            future = self._store.pool.submit(
                self._store.fetch_range, self._uri, self._loc, start, end - start, self._etag
            )
            self._pending.append((start, end, future))
            self._next_offset = end

    def _finish(self) -> None:
        if self._crc is None or self._expected is None:
            return
        name, text = self._expected
        got = self._crc.encode(self._crc_value & ((1 << self._crc.width) - 1))
        if got != text:
            raise CorruptCheckpointError(
                f"{redact(self._uri)} is damaged: S3 stores the {name} checksum {text} but the"
                f" {self._size} bytes read give {got}. Load it again; if this repeats, the stored"
                " checkpoint is corrupt: delete it or save a new one"
            )
