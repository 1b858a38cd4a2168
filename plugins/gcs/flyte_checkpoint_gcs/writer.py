"""Writes: one request for a small object, a resumable upload in ``part_size`` chunks otherwise.

A resumable session takes its chunks strictly in order, so they cannot be sent in parallel:
one chunk is on the wire (on the store's pool) while the caller fills the next, so a writer
holds at most three chunks. The object appears only when the final request is accepted, and
that request carries the whole object's checksum, so the server refuses damaged bytes; an abort
cancels the session, so nothing appears and nothing is left.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from flyte_checkpoint.errors import CheckpointError, TransientError
from flyte_checkpoint.storage.blobstore import BlobWriter
from flyte_checkpoint.storage.kit import Location, scrub
from flyte_checkpoint.uri import redact

from . import errors, integrity

if TYPE_CHECKING:
    from .store import GCSStore

log = logging.getLogger("flyte_checkpoint.gcs")

CONTENT_TYPE = "application/octet-stream"


class _Feed:
    """The part of the upload stream the server has not yet acknowledged.

    It is the ``stream`` ``ResumableUpload`` reads chunks from (``tell``/``read``/``seek`` in
    absolute offsets); bytes before the server's acknowledged offset are dropped.
    """

    def __init__(self) -> None:
        self._data = bytearray()
        self._base = 0
        self._pos = 0

    def append(self, chunk: bytearray) -> None:
        if not self._data:
            self._data = chunk  # taken over: no copy in the common case
        else:
            self._data += chunk

    def available(self) -> int:
        return self._base + len(self._data) - self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        start = self._pos - self._base
        end = len(self._data) if n is None or n < 0 else min(len(self._data), start + n)
        with memoryview(self._data) as view:
            out = bytes(view[start:end])  # one copy (slicing the bytearray would make two)
        self._pos += len(out)
        return out

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence != 0 or not self._base <= offset <= self._base + len(self._data):
            raise ValueError(f"cannot seek to {offset} outside the unacknowledged window")
        self._pos = offset
        return offset

    def acknowledge(self, offset: int) -> None:
        """The server holds every byte before ``offset``: drop them, resume from there."""
        drop = offset - self._base
        if drop > 0:
            del self._data[:drop]
            self._base = offset
        self.seek(offset)


class GCSWriter(BlobWriter):
    """A write of one object (see the module docstring)."""

    def __init__(self, store: GCSStore, loc: Location, uri: str) -> None:
        super().__init__(uri)
        self._store, self._loc = store, loc
        self._client = store.client
        self._config = store.config
        self._chunk_size = store.config.part_size
        self._buf = bytearray()
        self._algorithm = store.config.checksum
        self._digest = integrity.digest(self._algorithm)
        self._pending: Future[Any] | None = None
        self._upload: Any = None  # google.resumable_media.requests.ResumableUpload
        self._headers: dict[str, str] = {}
        self._feed = _Feed()

    # -- BlobWriter ---------------------------------------------------------------

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        try:
            if self._digest is not None:
                self._digest.update(data)
            view = memoryview(data)
            while view:
                room = self._chunk_size - len(self._buf)
                self._buf += view[:room]  # a copy: the caller may reuse its buffer
                view = view[room:]
                if len(self._buf) >= self._chunk_size:
                    chunk, self._buf = self._buf, bytearray()
                    self._ship(chunk, final=False)
        except Exception as exc:
            raise self._mapped(exc)

    def _commit(self) -> None:
        try:
            if self._upload is None and self._pending is None:
                result = self._single_request(bytes(self._buf))
            else:
                self._ship(self._buf, final=True)
                assert self._pending is not None
                result, self._pending = self._pending.result(), None
            self._buf = bytearray()
            self._verify(result)
        except Exception as exc:
            raise self._mapped(exc)

    def _abort(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.cancel()
            try:
                pending.result()
            except BaseException:  # the abort is what matters now
                pass
        self._buf = bytearray()
        self._feed = _Feed()
        upload = self._upload
        if upload is not None and upload.resumable_url and not upload.finished:
            self._cancel_session(upload.resumable_url)

    # -- sending --------------------------------------------------------------------

    def _ship(self, chunk: bytearray, final: bool) -> None:
        """Hand ``chunk`` to the pool once the previous one is on the server."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()  # the previous chunk's failure is raised here, in the caller's thread
        self._pending = self._store.pool.submit(self._send, chunk, final)

    def _send(self, chunk: bytearray, final: bool) -> dict[str, Any] | None:
        """In the pool: append ``chunk`` and send every whole chunk (and, if final, the rest)."""
        session = self._client.session
        if self._upload is None:
            self._initiate(session)
        upload = self._upload
        self._feed.append(chunk)
        response = None
        while not upload.finished:
            left = self._feed.available()
            if left < self._chunk_size and not final:
                break
            if left < self._chunk_size and self._digest is not None:
                # This request carries the last bytes and the total: the server checks the
                # whole object before it makes the object visible.
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
            self._feed.acknowledge(upload.bytes_uploaded)
        return response.json() if final and response is not None else None

    def _initiate(self, session: Any) -> None:
        from google.resumable_media.requests import ResumableUpload

        upload = ResumableUpload(
            self._client.upload_url(self._loc.bucket, "resumable"), self._chunk_size, headers=self._headers
        )
        upload._retry_strategy = self._client.upload_retry()
        try:
            upload.initiate(
                session,
                self._feed,
                {"name": self._loc.key},
                CONTENT_TYPE,
                stream_final=False,
                timeout=self._config.timeout,
            )
        except Exception as exc:
            if errors.status_of(exc) == 404:
                raise errors.missing_bucket(self._loc.bucket, self.uri) from None
            raise
        self._upload = upload

    def _single_request(self, data: bytes) -> dict[str, Any]:
        from google.resumable_media.requests import MultipartUpload

        upload = MultipartUpload(self._client.upload_url(self._loc.bucket, "multipart"))
        upload._retry_strategy = self._client.upload_retry()
        meta = {"name": self._loc.key}
        if self._digest is not None:  # the server refuses damaged bytes itself
            meta.update(integrity.metadata(self._algorithm, self._digest.value()))
        try:
            response = upload.transmit(
                self._client.session, data, meta, CONTENT_TYPE, timeout=self._config.timeout
            )
        except Exception as exc:
            if errors.status_of(exc) == 404:
                raise errors.missing_bucket(self._loc.bucket, self.uri) from None
            raise
        return dict(response.json())

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

    def _cancel_session(self, session_url: str) -> None:
        """Best effort: GCS answers 499 to a cancelled session (the emulator does not implement it)."""
        try:
            self._client.session.delete(session_url, timeout=self._config.timeout)
        except Exception as exc:
            log.debug(
                "cancelling the upload session of %s failed (it expires by itself): %s",
                redact(self.uri),
                scrub(str(exc)),
            )

    def _mapped(self, exc: Exception) -> CheckpointError:
        return errors.map_error(exc, self.uri, "write", config=self._config)
