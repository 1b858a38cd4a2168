"""Reads: one metadata request, then ranges pinned to the generation it saw, through the kit.

:func:`open_reader` asks for the object's size, generation and stored checksum, and hands the
kit's :class:`~flyte_checkpoint.storage.kit.RangedReader` a ``fetch`` that reads one range with
the SDK (``Blob.download_to_file`` with ``raw_download=True``: the bytes as stored, never
transcoded) straight into the reader's buffer. Pinning every range to one generation means a
concurrent overwrite can never mix two versions: the old generation's 404 is an ObjectReplacedError,
and the retried load reads the new object whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, BinaryIO

from flyte_checkpoint.errors import CheckpointError, NotFoundError, TransientError
from flyte_checkpoint.storage.kit import Location, RangedReader
from flyte_checkpoint.storage.pinned import PinnedObject, replaced
from flyte_checkpoint.uri import redact

from . import errors, integrity

if TYPE_CHECKING:
    from .store import GCSStore


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


def fetch(
    store: GCSStore, loc: Location, uri: str, start: int, view: memoryview, version: int | None = None
) -> int:
    """Fill ``view`` with the object's bytes from ``start`` (of ``version``, a generation, if
    given); returns the bytes written, fewer only at the end of the object (0 past it).

    Raises:
        whatever the SDK raises once its bounded retries are spent (a 404: no such object or
        generation); map it with :func:`errors.map_error`.
    """
    if not len(view):
        return 0
    blob = store.client.storage.bucket(loc.bucket).blob(loc.key, generation=version)
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
            f"the service sent {sink.overflow} bytes more than the range asked of {redact(uri)};"
            " the read is retried"
        )
    return sink.filled


def open_reader(store: GCSStore, loc: Location, uri: str, blob: Any) -> RangedReader:
    """A reader of ``blob`` (the object's metadata, just fetched), pinned to its generation."""
    generation = blob.generation
    check = integrity.for_read(store.config, blob, uri)

    def fetch_range(offset: int, view: memoryview) -> int:
        return fetch(store, loc, uri, offset, view, generation)

    def on_error(exc: BaseException) -> CheckpointError:
        return _read_error(store, exc, uri)

    def on_mismatch() -> CheckpointError | None:
        # Where a server does not honour the pinned generation (gcp-storage-emulator ignores it),
        # a mismatch after the object changed means an overwrite raced the read.
        try:
            if _generation_now(store, loc) == generation:
                return None
        except Exception:  # the mismatch is what gets reported
            return None
        return replaced(uri, "a newer generation")

    return RangedReader(
        uri,
        size=int(blob.size or 0),
        fetch=fetch_range,
        range_size=store.config.read_range_size,
        concurrency=store.config.read_concurrency,
        pool=store.pool,
        digest=check[0] if check else None,
        expected=check[1] if check else None,
        on_error=on_error,
        on_mismatch=on_mismatch,
    )


def _read_error(store: GCSStore, exc: BaseException, uri: str) -> CheckpointError:
    """``exc`` of a read pinned to a generation as the project's error: a 404 is that generation
    gone (the object was replaced or deleted), an ObjectReplacedError."""
    err = store.map_error(exc, uri, "read")
    if type(err) is NotFoundError:
        return replaced(uri, "its generation is gone")
    return err


def _generation_now(store: GCSStore, loc: Location) -> int | None:
    """The object's generation now (None: absent)."""
    now = store.client.storage.bucket(loc.bucket).get_blob(
        loc.key, timeout=store.config.timeout, retry=store.client.retry()
    )
    return None if now is None else now.generation


class GCSPinned(PinnedObject):
    """A version of a GCS object: its metadata (size, generation), every read asked of that
    generation. GCS answers 404 once it is gone (ObjectReplacedError); gcp-storage-emulator
    ignores the generation of a media download and serves the object there now, so against it
    a read of a replaced object is caught by the checks after it (the core asks
    :meth:`changed` when a read fails, and a whole stream is checked against the stored CRC32C)."""

    def __init__(self, store: GCSStore, loc: Location, uri: str, blob: Any) -> None:
        self.uri, self.size, self.version = uri, int(blob.size or 0), str(blob.generation)
        self._store, self._loc, self._blob = store, loc, blob

    def read_range(self, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        data = bytearray(length)
        try:
            got = fetch(self._store, self._loc, self.uri, start, memoryview(data), self._blob.generation)
        except Exception as exc:
            raise _read_error(self._store, exc, self.uri) from exc
        del data[got:]
        return bytes(data)

    def open_read(self) -> BinaryIO:
        return open_reader(self._store, self._loc, self.uri, self._blob)  # type: ignore[return-value]

    def changed(self) -> bool:
        return _generation_now(self._store, self._loc) != self._blob.generation
