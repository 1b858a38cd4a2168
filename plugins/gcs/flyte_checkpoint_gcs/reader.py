"""Reads: one metadata request, then ranges pinned to the generation it saw, through the kit.

:func:`open_reader` asks for the object's size, generation and stored checksum, and hands the
kit's :class:`~flyte_checkpoint.storage.kit.RangedReader` a ``fetch`` that reads one range with
the SDK (``Blob.download_to_file`` with ``raw_download=True``: the bytes as stored, never
transcoded) straight into the reader's buffer. Pinning every range to one generation means a
concurrent overwrite can never mix two versions: the old generation's 404 is a TransientError,
and the retried load reads the new object whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flyte_checkpoint.errors import CheckpointError, NotFoundError, TransientError
from flyte_checkpoint.storage.kit import Location, RangedReader
from flyte_checkpoint.storage.kit.checksums import digest
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


def open_reader(store: GCSStore, loc: Location, uri: str, blob: Any) -> RangedReader:
    """A reader of ``blob`` (the object's metadata, just fetched), pinned to its generation."""
    generation = blob.generation
    stored = integrity.for_read(blob) if store.config.verify_checksums else None

    def fetch_range(offset: int, view: memoryview) -> int:
        return fetch(store, loc, offset, view, generation)

    def on_error(exc: BaseException) -> CheckpointError:
        err = errors.map_error(exc, uri, "read", config=store.config)
        if isinstance(err, NotFoundError):  # the pinned generation is gone
            return TransientError(
                f"{redact(uri)} was replaced or deleted while it was being read; the load is retried"
            )
        return err

    def on_mismatch() -> CheckpointError | None:
        # Where a server does not honour the pinned generation, a mismatch after the object
        # changed means an overwrite raced the read, which a retry fixes.
        try:
            now = store.client.storage.bucket(loc.bucket).get_blob(loc.key, timeout=store.config.timeout)
        except Exception:  # the mismatch is what gets reported
            return None
        if now is None or now.generation != generation:
            return TransientError(f"{redact(uri)} was replaced while it was being read; the load is retried")
        return None

    return RangedReader(
        uri,
        size=int(blob.size or 0),
        fetch=fetch_range,
        range_size=store.config.read_range_size,
        concurrency=store.config.read_concurrency,
        pool=store.pool,
        digest=digest(stored[0]) if stored else None,
        expected=stored[1] if stored else None,
        on_error=on_error,
        on_mismatch=on_mismatch,
    )
