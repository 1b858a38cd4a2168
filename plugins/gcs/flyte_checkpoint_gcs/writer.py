"""Writes: one request for a small object, a resumable upload in ``part_size`` chunks otherwise.

:class:`GCSWriter` is the kit's :class:`~flyte_checkpoint.storage.kit.PartWriter` with
``ordered=True``: a resumable session takes its chunks strictly in order, so one chunk is on the
wire (from the store's pool) while the caller fills the next, and the object's last bytes go up
with the final request. The object appears only when that request is accepted, and it carries
the whole object's checksum, so the server refuses damaged bytes; an abort cancels the session,
so nothing appears and nothing is left.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from flyte_checkpoint.errors import CheckpointError, TransientError
from flyte_checkpoint.storage.kit import Location, PartWriter, scrub
from flyte_checkpoint.uri import redact

from . import errors, integrity
from .config import MAX_PARTS

if TYPE_CHECKING:
    from .store import GCSStore

log = logging.getLogger("flyte_checkpoint.gcs")

CONTENT_TYPE = "application/octet-stream"
#: A resumable session numbers no chunks and takes any count of them: the chunk size never grows.
DOUBLE_EVERY = MAX_PARTS


class _Unacknowledged:
    """The bytes of the upload the server has not acknowledged yet, in absolute offsets: the
    stream ``ResumableUpload`` reads its chunks from (``tell``/``read``/``seek``).

    GCS may persist only part of a chunk (a 308 whose ``Range`` ends before the chunk did):
    :meth:`acknowledge` then keeps the rest, which goes out again at the front of the next
    chunk. A part is kept without a copy; only such a rest is copied, once, with the next part.
    """

    def __init__(self) -> None:
        self._view = memoryview(b"")
        self._base = 0  # the offset of the window's first byte
        self._pos = 0

    def add(self, data: bytes | bytearray | memoryview) -> None:
        if not self._view:
            self._view = memoryview(data).cast("B")
        else:
            joined = bytearray(self._view)
            joined += data
            self._view = memoryview(joined)

    def available(self) -> int:
        """Bytes from the current position to the end of the window."""
        return self._base + len(self._view) - self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> memoryview | bytes:
        """A view of the next ``n`` bytes (no copy: they stay as they are until acknowledged);
        ``b""`` at the end, so an empty final request goes with ``Content-Length: 0``."""
        start = self._pos - self._base
        end = len(self._view) if n is None or n < 0 else min(len(self._view), start + n)
        self._pos = self._base + end
        return self._view[start:end] if end > start else b""

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence != 0 or not self._base <= offset <= self._base + len(self._view):
            raise ValueError(f"cannot seek to {offset} outside the unacknowledged window")
        self._pos = offset
        return offset

    def acknowledge(self, offset: int) -> None:
        """The server holds every byte before ``offset``: drop them; the next chunk starts there."""
        drop = offset - self._base
        if drop > 0:
            self._view = self._view[drop:]
            self._base = offset
        self.seek(offset)


class GCSWriter(PartWriter):
    """A write of one object (see the module docstring).

    The running checksum is updated as each part is sent (in order: the parts of a resumable
    session go one at a time), so a file sent with ``upload_file`` gets it too.
    """

    def __init__(self, store: GCSStore, loc: Location, uri: str) -> None:
        config = store.config
        super().__init__(
            uri,
            part_size=config.part_size,
            max_concurrency=1,
            pool=store.pool,
            double_every=DOUBLE_EVERY,
            max_parts=MAX_PARTS,
            max_part_size=config.part_size,
            ordered=True,
        )
        self._loc = loc
        self._client = store.client
        self._config = config
        self._algorithm = config.checksum
        self._digest = integrity.for_write(config)
        self._upload: Any = None  # google.resumable_media.requests.ResumableUpload
        self._headers: dict[str, str] = {}
        self._window = _Unacknowledged()
        #: The committed object's generation (set by the commit).
        self.generation: int | None = None

    # -- PartWriter's hooks ------------------------------------------------------------

    def _put_whole(self, data: bytes | bytearray) -> None:
        from google.resumable_media.requests import MultipartUpload

        try:
            self._checksum(data)
            upload = MultipartUpload(self._client.upload_url(self._loc.bucket, "multipart"))
            upload._retry_strategy = self._client.upload_retry()
            meta = {"name": self._loc.key}
            if self._digest is not None:  # the server refuses damaged bytes itself
                meta.update(integrity.metadata(self._algorithm, self._digest.value()))
            response = upload.transmit(
                self._client.session, bytes(data), meta, CONTENT_TYPE, timeout=self._config.timeout
            )
            self._verify(dict(response.json()))
        except Exception as exc:
            raise self._mapped(exc)

    def _start(self) -> None:
        from google.resumable_media.requests import ResumableUpload

        upload = ResumableUpload(
            self._client.upload_url(self._loc.bucket, "resumable"), self.part_size, headers=self._headers
        )
        upload._retry_strategy = self._client.upload_retry()
        self._upload = upload
        try:
            upload.initiate(
                self._client.session,
                self._window,
                {"name": self._loc.key},
                CONTENT_TYPE,
                stream_final=False,
                timeout=self._config.timeout,
            )
        except Exception as exc:
            raise self._mapped(exc)

    def _send_part(self, number: int, data: bytes | bytearray) -> None:
        try:
            self._checksum(data)
            self._window.add(data)
            self._transmit(final=False)
        except Exception as exc:
            raise self._mapped(exc)

    def _complete(self, results: list[Any], tail: memoryview | None) -> None:
        try:
            if tail is not None:
                self._checksum(tail)
                self._window.add(tail)
            self._verify(self._transmit(final=True))
        except Exception as exc:
            raise self._mapped(exc)

    def _cancel(self) -> None:
        """Best effort: GCS answers 499 to a cancelled session (the emulator does not implement it)."""
        upload = self._upload
        self._window = _Unacknowledged()
        if upload is None or not upload.resumable_url or upload.finished:
            return
        try:
            self._client.session.delete(upload.resumable_url, timeout=self._config.timeout)
        except Exception as exc:
            log.debug(
                "cancelling the upload session of %s failed (it expires by itself): %s",
                redact(self.uri),
                scrub(str(exc)),
            )

    # -- the resumable session ---------------------------------------------------------

    def _transmit(self, *, final: bool) -> dict[str, Any] | None:
        """Send every whole chunk of the window (and, if ``final``, the rest, ending the upload);
        after each answer resume from the offset the server acknowledged, so bytes it did not
        persist are sent again. Returns the server's description of the object when final."""
        upload, session = self._upload, self._client.session
        response = None
        while not upload.finished and (final or self._window.available() >= self.part_size):
            if final and self._digest is not None and self._window.available() < self.part_size:
                # The last request carries the whole object's checksum: the server checks it
                # before the object becomes visible.
                self._headers.update(integrity.hash_header(self._algorithm, self._digest.value()))
            try:
                response = upload.transmit_next_chunk(session, timeout=self._config.timeout)
            except Exception as exc:
                if upload.invalid and errors.status_of(exc) in (404, 410):
                    raise TransientError(
                        f"the upload session of {redact(self.uri)} ended before the upload did (HTTP"
                        f" {errors.status_of(exc)}: it expired or another writer finished it); the"
                        " save is retried"
                    ) from None
                raise
            self._window.acknowledge(upload.bytes_uploaded)
        return dict(response.json()) if final and response is not None else None

    def _checksum(self, data: bytes | bytearray | memoryview) -> None:
        if self._digest is not None:
            self._digest.update(data)

    def _verify(self, result: dict[str, Any] | None) -> None:
        """Check the server's description of the stored object against what was written; a
        mismatch (damage the server did not catch) removes that generation and is transient."""
        if result is None:
            raise TransientError(
                f"the upload to {redact(self.uri)} ended without the server's description of the"
                " object; the save is retried"
            )
        size = result.get("size")
        local = self._digest.value() if self._digest is not None else None
        remote = integrity.stored(result, self._algorithm) if self._digest is not None else None
        if (remote is not None and remote != local) or (size is not None and int(size) != self.bytes_written):
            self._remove_damaged(result.get("generation"))
            raise TransientError(
                f"the object stored at {redact(self.uri)} does not match what was written"
                f" ({self._algorithm} {remote}, {size} bytes on the server; {local}, {self.bytes_written}"
                " bytes sent): the bytes were damaged in transit. That object was removed; the save"
                " is retried"
            )
        if result.get("generation") is not None:
            self.generation = int(result["generation"])
            self.committed_version = str(self.generation)  # the listing's version of the object

    def _remove_damaged(self, generation: Any) -> None:
        try:
            blob = self._client.storage.bucket(self._loc.bucket).blob(self._loc.key)
            blob.delete(
                if_generation_match=int(generation) if generation else None,
                timeout=self._config.timeout,
                retry=self._client.retry(),
            )
        except Exception as exc:  # the error that follows matters more
            log.warning("could not remove the damaged object %s: %s", redact(self.uri), scrub(str(exc)))

    def _mapped(self, exc: Exception) -> CheckpointError:
        """The project's error for ``exc``; a 404 when starting an upload means the bucket is missing."""
        if errors.status_of(exc) == 404 and (self._upload is None or not self._upload.resumable_url):
            return errors.container_missing(self.uri, "write", config=self._config)
        return errors.map_error(exc, self.uri, "write", config=self._config)
