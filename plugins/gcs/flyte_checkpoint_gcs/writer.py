"""Streaming writes: one request for a small object, a resumable upload in chunks otherwise.

GCS resumable uploads take their chunks strictly in order, so the chunks cannot be sent
in parallel; instead one chunk is on the wire (in a worker thread) while the caller fills
the next. Memory stays under four chunks (usually three) whatever the object's size. The object
appears only when the final chunk is accepted; an abort cancels the session, so nothing
appears and nothing is left to clean up.
"""

from __future__ import annotations

import base64
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import google_crc32c

from flyte_checkpoint.errors import CorruptCheckpointError, StoreError
from flyte_checkpoint.storage.blobstore import BlobWriter
from flyte_checkpoint.uri import redact

from . import errormap
from .transport import Transport
from .uris import GcsLocation

log = logging.getLogger("flyte_checkpoint.gcs")

CONTENT_TYPE = "application/octet-stream"


def crc32c_b64(checksum: google_crc32c.Checksum) -> str:
    """The checksum as GCS spells it: base64 of the big-endian 4 bytes."""
    return base64.b64encode(checksum.digest()).decode("ascii")


class _Feed:
    """The window of the upload stream that is not yet acknowledged by the server.

    It is the ``stream`` that ``ResumableUpload`` reads chunks from: ``tell``/``read``/
    ``seek`` in absolute offsets. Bytes before the server's acknowledged offset are dropped.
    """

    def __init__(self) -> None:
        self._data = bytearray()
        self._base = 0
        self._pos = 0

    def append(self, chunk: bytearray) -> None:
        if not self._data:
            self._data = chunk  # take it over: no copy in the common case
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


class GcsWriter(BlobWriter):
    """A write of one object; see the module docstring for how it is sent."""

    def __init__(self, uri: str, loc: GcsLocation, transport: Transport) -> None:
        super().__init__(uri)
        self._loc = loc
        self._transport = transport
        self._chunk_size = transport.config.chunk_size
        self._buf = bytearray()
        self._crc = google_crc32c.Checksum()
        self._pool: ThreadPoolExecutor | None = None
        self._pending: Future[Any] | None = None
        self._upload: Any = None  # google.resumable_media.requests.ResumableUpload
        self._headers: dict[str, str] = {}
        self._feed = _Feed()

    # -- BlobWriter ---------------------------------------------------------------

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        try:
            # google_crc32c's C code takes only ``bytes``.
            self._crc.update(data if isinstance(data, bytes) else bytes(data))
            view = memoryview(data)
            while view:
                room = self._chunk_size - len(self._buf)
                self._buf += view[:room]
                view = view[room:]
                if len(self._buf) >= self._chunk_size:
                    chunk, self._buf = self._buf, bytearray()
                    self._ship(chunk, final=False)
        except Exception as exc:
            errormap.reraise(exc, self.uri, "upload to")

    def _commit(self) -> None:
        try:
            if self._upload is None and self._pending is None:
                result = self._single_request(bytes(self._buf))
            else:
                self._ship(self._buf, final=True)
                assert self._pending is not None
                result = self._pending.result()
                self._pending = None
            self._buf = bytearray()
            self._verify(result)
        except Exception as exc:
            errormap.reraise(exc, self.uri, "upload to")
        finally:
            self._shutdown_pool()

    def _abort(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.cancel()
            try:
                pending.result()
            except BaseException:
                pass
        self._shutdown_pool()
        self._buf = bytearray()
        self._feed = _Feed()
        upload = self._upload
        if upload is not None and upload.resumable_url and not upload.finished:
            self._cancel_session(upload.resumable_url)

    # -- sending --------------------------------------------------------------------

    def _ship(self, chunk: bytearray, final: bool) -> None:
        """Hand ``chunk`` to the worker once the previous one is on the server."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()  # raises the worker's failure here, in the caller's thread
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fcp-gcs-upload")
        self._pending = self._pool.submit(self._send, chunk, final)

    def _send(self, chunk: bytearray, final: bool) -> dict[str, Any] | None:
        """Worker: append ``chunk`` and send every whole chunk (and, if final, the rest)."""
        session = self._transport.session
        timeout = self._transport.config.timeout
        if self._upload is None:
            self._initiate(session, timeout)
        upload = self._upload
        self._feed.append(chunk)
        response = None
        while not upload.finished:
            left = self._feed.available()
            if not final and left < self._chunk_size:
                break
            if final and left < self._chunk_size:
                # This request carries the last bytes and the total: let the server check
                # the whole object's CRC32C before it makes the object visible.
                self._headers["X-Goog-Hash"] = f"crc32c={crc32c_b64(self._crc)}"
            response = upload.transmit_next_chunk(session, timeout=timeout)
            self._feed.acknowledge(upload.bytes_uploaded)
        return response.json() if final and response is not None else None

    def _initiate(self, session: Any, timeout: tuple[float, float]) -> None:
        from google.resumable_media.requests import ResumableUpload

        upload = ResumableUpload(
            self._transport.upload_url(self._loc.bucket, "resumable"),
            self._chunk_size,
            headers=self._headers,
        )
        # The library's default keeps retrying for ten minutes; the core retries whole saves.
        upload._retry_strategy = self._transport.media_retry_strategy()
        try:
            upload.initiate(
                session,
                self._feed,
                {"name": self._loc.name},
                CONTENT_TYPE,
                stream_final=False,
                timeout=timeout,
            )
        except Exception as exc:
            if getattr(getattr(exc, "response", None), "status_code", None) == 404:
                raise errormap.missing_bucket(self._loc.bucket, self.uri) from None
            raise
        self._upload = upload

    def _single_request(self, data: bytes) -> dict[str, Any]:
        from google.resumable_media.requests import MultipartUpload

        upload = MultipartUpload(self._transport.upload_url(self._loc.bucket, "multipart"))
        upload._retry_strategy = self._transport.media_retry_strategy()
        # With the checksum in the metadata the server refuses damaged bytes itself.
        metadata = {"name": self._loc.name, "crc32c": crc32c_b64(self._crc)}
        try:
            response = upload.transmit(
                self._transport.session, data, metadata, CONTENT_TYPE, timeout=self._transport.config.timeout
            )
        except Exception as exc:
            if getattr(getattr(exc, "response", None), "status_code", None) == 404:
                raise errormap.missing_bucket(self._loc.bucket, self.uri) from None
            raise
        return response.json()

    def _verify(self, result: dict[str, Any] | None) -> None:
        """Check that the stored object is what was written; remove it if not."""
        if result is None:
            raise StoreError(
                f"the upload to {redact(self.uri)} ended without the server's "
                "description of the object; retry the save"
            )
        local = crc32c_b64(self._crc)
        remote = result.get("crc32c")
        size = result.get("size")
        if (remote is not None and remote != local) or (size is not None and int(size) != self.bytes_written):
            self._remove_damaged(result.get("generation"))
            raise CorruptCheckpointError(
                f"the object stored at {redact(self.uri)} does not match what was written "
                f"(CRC32C {remote}, {size} bytes on the server; {local}, {self.bytes_written} bytes "
                "sent); the damaged object was removed. Retry the save"
            )

    def _remove_damaged(self, generation: Any) -> None:
        try:
            blob = self._transport.client.bucket(self._loc.bucket).blob(self._loc.name)
            blob.delete(
                if_generation_match=int(generation) if generation else None,
                timeout=self._transport.config.timeout,
            )
        except Exception as exc:  # the corruption error that follows matters more
            log.warning(
                "could not remove the damaged object %s: %s", redact(self.uri), errormap.scrub(str(exc))
            )

    def _cancel_session(self, session_url: str) -> None:
        """Best effort: GCS answers 499 to a cancelled session; emulators may not support it."""
        try:
            self._transport.session.delete(session_url, timeout=self._transport.config.timeout)
        except Exception as exc:
            log.debug(
                "cancelling the upload session of %s failed (it expires by itself): %s",
                redact(self.uri),
                errormap.scrub(str(exc)),
            )

    def _shutdown_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
