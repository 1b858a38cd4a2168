"""Reads: one metadata request, then ranges pinned to the generation it saw, in parallel, in order.

Each range is read by the SDK (``Blob.download_to_file`` with ``raw_download=True``: the bytes as
stored, never transcoded) straight into a buffer of ``read_range_size`` bytes, at most
``read_concurrency`` ranges in flight on the store's pool, so a reader holds at most
``read_range_size x (read_concurrency + 1)`` bytes. Pinning every range to one generation means a
concurrent overwrite can never mix two versions: the old generation's 404 is a TransientError, and
the retried load reads the new object whole. The stored checksum is verified when the last byte
has been delivered.
"""

from __future__ import annotations

import io
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flyte_checkpoint.errors import CheckpointError, CorruptCheckpointError, NotFoundError, TransientError
from flyte_checkpoint.storage.kit import Location
from flyte_checkpoint.uri import redact

from . import errors, integrity

if TYPE_CHECKING:
    from .store import GCSStore


@dataclass(frozen=True)
class ObjectInfo:
    """What a read needs to know about one stored object."""

    bucket: str
    name: str
    size: int
    generation: int | None
    checksum: tuple[str, str] | None  # (algorithm, stored value) to verify, or None

    @classmethod
    def from_blob(cls, blob: Any) -> ObjectInfo:
        return cls(
            blob.bucket.name, blob.name, int(blob.size or 0), blob.generation, integrity.for_read(blob)
        )


class _ViewSink:
    """The file object the SDK downloads into: fills ``view`` from its start, in order."""

    def __init__(self, view: memoryview) -> None:
        self.view = view
        self.filled = 0
        self.overflow = 0

    def write(self, data: bytes) -> int:
        n = min(len(data), len(self.view) - self.filled)
        self.view[self.filled : self.filled + n] = data[:n]
        self.filled += n
        self.overflow += len(data) - n
        return len(data)


def fetch(store: GCSStore, loc: Location, start: int, view: memoryview, generation: int | None = None) -> int:
    """Fill ``view`` with the object's bytes from ``start`` (of ``generation`` if given); returns
    the bytes written, fewer only at the end of the object (0 past it).

    Raises:
        whatever the SDK raises once its bounded retries are spent (a 404: no such object or
        generation); map it with :func:`errors.map_error`.
    """
    if not len(view):
        return 0
    blob = store.client.storage.bucket(loc.bucket).blob(loc.key, generation=generation)
    sink = _ViewSink(view)
    try:
        blob.download_to_file(
            sink,
            start=start,
            end=start + len(view) - 1,
            raw_download=True,
            checksum=None,
            retry=store.client.retry(),
            timeout=store.config.timeout,
        )
    except Exception as exc:
        if errors.status_of(exc) == 416:  # the range starts past the end
            return 0
        raise
    if sink.overflow:
        raise TransientError(
            f"the service sent {sink.overflow} bytes more than the range asked of {redact(loc.uri())};"
            " the read is retried"
        )
    return sink.filled


class GCSReader(io.RawIOBase):
    """A readable binary stream of one object generation (see the module docstring)."""

    def __init__(self, store: GCSStore, loc: Location, uri: str, info: ObjectInfo) -> None:
        super().__init__()
        self._store, self._loc, self.uri, self.info = store, loc, uri, info
        cfg = store.config
        self._range = cfg.read_range_size
        self._concurrency = cfg.read_concurrency
        self._pos = 0  # bytes delivered to the caller
        self._next = 0  # the first byte not yet asked for
        self._current = memoryview(b"")
        self._pending: deque[tuple[int, int, Future[tuple[bytearray, int]]]] = deque()
        self._digest = integrity.digest(info.checksum[0]) if info.checksum and cfg.verify_checksums else None
        self._error: CheckpointError | None = None
        self._verified = False

    def readable(self) -> bool:
        return True

    @property
    def size(self) -> int:
        return self.info.size

    def tell(self) -> int:
        return self._pos

    def readinto(self, buffer: Any) -> int:
        """Fill ``buffer`` with the next bytes; returns 0 only at the end of the object.

        Raises:
            ValueError: the reader is closed.
            TransientError: a range came back short, or the object was replaced.
            CorruptCheckpointError: the bytes do not match the stored checksum.
        """
        if self.closed:
            raise ValueError(f"read from a closed reader of {redact(self.uri)}")
        if self._error is not None:
            raise self._error
        out = memoryview(buffer).cast("B")
        filled = 0
        try:
            while filled < len(out) and self._pos < self.info.size:
                if not self._current:
                    self._current = self._next_range()
                n = min(len(out) - filled, len(self._current))
                out[filled : filled + n] = self._current[:n]
                self._current = self._current[n:]
                filled += n
                self._pos += n
            if self._pos >= self.info.size:
                self._verify()
        except Exception as exc:
            self._stop()
            self._error = self._failure(exc)
            raise self._error
        return filled

    def readall(self) -> bytes:
        """The rest of the object."""
        out = bytearray(max(self.info.size - self._pos, 0))
        view = memoryview(out)
        got = 0
        while got < len(out):
            got += self.readinto(view[got:])
        if not out:
            self.readinto(out)  # an empty object is still verified
        return bytes(out)

    def close(self) -> None:
        if not self.closed:
            self._stop()
        super().close()

    # -- ranges ------------------------------------------------------------------------

    def _next_range(self) -> memoryview:
        while len(self._pending) < self._concurrency and self._next < self.info.size:
            start = self._next
            length = min(self._range, self.info.size - start)
            self._pending.append((start, length, self._store.pool.submit(self._fetch, start, length)))
            self._next = start + length
        start, length, future = self._pending.popleft()
        data, got = future.result()
        if got != length:
            raise TransientError(
                f"the read of {redact(self.uri)} got {got} of {length} bytes at offset {start}"
                " before the object's end; the read is retried"
            )
        view = memoryview(data)[:got]
        if self._digest is not None:
            self._digest.update(view)
        return view

    def _fetch(self, start: int, length: int) -> tuple[bytearray, int]:
        data = bytearray(length)
        return data, fetch(self._store, self._loc, start, memoryview(data), self.info.generation)

    # -- the end -------------------------------------------------------------------------

    def _verify(self) -> None:
        if self._verified:
            return
        self._verified = True
        self._stop()
        if self._digest is None or self.info.checksum is None:
            return
        algorithm, expected = self.info.checksum
        actual = self._digest.value()
        if actual == expected:
            return
        if self._replaced():
            raise TransientError(
                f"{redact(self.uri)} was replaced while it was being read; the load is retried"
            )
        raise CorruptCheckpointError(
            f"the object at {redact(self.uri)} is damaged: its stored {algorithm} is {expected} but"
            f" the bytes read give {actual}; restore an older checkpoint or save again"
        )

    def _replaced(self) -> bool:
        """Whether the object now has another generation (or is gone): where a server does not
        honour the pinned generation, a mismatch then means an overwrite raced the read."""
        try:
            blob = self._store.client.storage.bucket(self.info.bucket).get_blob(
                self.info.name, timeout=self._store.config.timeout, retry=None
            )
        except Exception:  # the mismatch is what gets reported
            return False
        return blob is None or blob.generation != self.info.generation

    def _failure(self, exc: Exception) -> CheckpointError:
        if isinstance(exc, CheckpointError):
            return exc
        err = errors.map_error(exc, self.uri, "read", config=self._store.config)
        if isinstance(err, NotFoundError):  # the pinned generation is gone
            return TransientError(
                f"{redact(self.uri)} was replaced or deleted while it was being read; the load is retried"
            )
        return err

    def _stop(self) -> None:
        for _start, _length, future in self._pending:
            future.cancel()
        self._pending.clear()
        self._current = memoryview(b"")
