"""Streaming reads: one GET for a small object, ranged GETs in parallel for a large one.

Every read is pinned to the generation seen when the object was opened, so a concurrent
overwrite can never mix two versions. The bytes are checked against the object's CRC32C
(or MD5) when the last one has been delivered.
"""

from __future__ import annotations

import base64
import hashlib
import io
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import google_crc32c

from flyte_checkpoint.errors import CorruptCheckpointError, TransientError
from flyte_checkpoint.uri import redact

from . import errormap
from .transport import HTTPStatusError, ShortReadError, Transport, is_transient


@dataclass(frozen=True)
class ObjectInfo:
    """What a read needs to know about the object: size, generation and checksums."""

    bucket: str
    name: str
    size: int
    generation: int | None
    crc32c: str | None
    md5: str | None

    @classmethod
    def from_blob(cls, blob: Any) -> ObjectInfo:
        return cls(
            blob.bucket.name, blob.name, int(blob.size or 0), blob.generation, blob.crc32c, blob.md5_hash
        )


class _Digest:
    """The checksum the server gave (CRC32C preferred, MD5 otherwise), computed as bytes pass."""

    def __init__(self, info: ObjectInfo) -> None:
        self.kind = "crc32c" if info.crc32c else "md5" if info.md5 else None
        self.expected = info.crc32c or info.md5
        self._crc = google_crc32c.Checksum() if self.kind == "crc32c" else None
        self._md5 = hashlib.md5(usedforsecurity=False) if self.kind == "md5" else None

    def update(self, data: bytes) -> None:
        if self._crc is not None:
            self._crc.update(data)
        elif self._md5 is not None:
            self._md5.update(data)

    def actual(self) -> str | None:
        raw = (
            self._crc.digest()
            if self._crc is not None
            else (self._md5.digest() if self._md5 is not None else None)
        )
        return None if raw is None else base64.b64encode(raw).decode("ascii")


def fetch_range(
    transport: Transport, info: ObjectInfo, start: int, stop: int, *, strict: bool = True
) -> bytes:
    """Bytes ``[start, stop)`` of the object (of generation ``info.generation`` if set).

    With ``strict`` exactly ``min(stop, info.size) - start`` bytes must arrive; without,
    a shorter answer is taken as the end of the object.

    Raises:
        HTTPStatusError: an unexpected answer (a 404: no such object or generation).
        ShortReadError: fewer bytes than asked for arrived (``strict`` only).
    """
    if stop <= start:
        return b""
    url = transport.media_url(info.bucket, info.name, info.generation)
    headers = {"Range": f"bytes={start}-{stop - 1}"}

    def once() -> bytes:
        response = transport.session.get(url, headers=headers, stream=True, timeout=transport.config.timeout)
        try:
            if response.status_code == 416:
                return b""
            if response.status_code not in (200, 206) or (response.status_code == 200 and start):
                raise HTTPStatusError(response, "206 Partial Content")
            # The stored bytes, never a transcoded form of them: sizes and checksums must match.
            body = response.raw.read(decode_content=False)[: stop - start]
        finally:
            response.close()
        want = min(stop, info.size) - start
        if strict and len(body) != want:
            raise ShortReadError(f"got {len(body)} of {want} bytes at offset {start}")
        return body

    return transport.call_with_retries(once, is_transient)


class GcsReader(io.RawIOBase):
    """A readable binary stream of one object generation (see the module docstring)."""

    def __init__(self, uri: str, info: ObjectInfo, transport: Transport) -> None:
        super().__init__()
        self.uri = uri
        self.info = info
        self._transport = transport
        cfg = transport.config
        self._range = cfg.read_range_size
        self._parallel = cfg.read_concurrency > 1 and info.size > self._range
        self._window = cfg.read_concurrency
        self._pos = 0  # bytes delivered to the caller
        self._chunk = memoryview(b"")
        self._next_start = 0  # first byte not yet requested (parallel mode)
        self._futures: deque[Future[bytes]] = deque()
        self._pool: ThreadPoolExecutor | None = None
        self._response: Any = None  # the streaming GET (single mode)
        self._digest = _Digest(info)
        self._verified = False
        self._error: Exception | None = None

    # -- io.RawIOBase ---------------------------------------------------------------

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        """Fill ``buffer`` with the next bytes; returns 0 only at the end of the object."""
        if self.closed:
            raise ValueError(f"read from a closed reader of {redact(self.uri)}")
        if self._error is not None:
            raise self._error
        out = memoryview(buffer).cast("B")
        filled = 0
        try:
            while filled < len(out) and self._pos < self.info.size:
                if not self._chunk:
                    data = self._next_chunk()
                    self._digest.update(data)
                    self._chunk = memoryview(data)
                n = min(len(out) - filled, len(self._chunk))
                out[filled : filled + n] = self._chunk[:n]
                self._chunk = self._chunk[n:]
                filled += n
                self._pos += n
            if self._pos >= self.info.size:
                self._verify()
        except Exception as exc:
            self._stop()
            if getattr(getattr(exc, "response", None), "status_code", None) == 404:
                self._error = TransientError(
                    f"{redact(self.uri)} was replaced or deleted while it was being read; retry the load"
                )
                raise self._error from None
            try:
                errormap.reraise(exc, self.uri, "read")
            except Exception as mapped:
                self._error = mapped  # a later read must not go on from a broken position
                raise
        return filled

    def readall(self) -> bytes:
        """The rest of the object, read in large pieces."""
        out = bytearray(max(self.info.size - self._pos, 0))
        view = memoryview(out)
        got = 0
        while got < len(out):
            n = self.readinto(view[got:])
            if n == 0:
                break
            got += n
        if not out:
            self.readinto(out)  # an empty object: still checked and finished
        return bytes(out) if got == len(out) else bytes(view[:got])

    def close(self) -> None:
        if not self.closed:
            self._stop()
        super().close()

    # -- sources -----------------------------------------------------------------------

    def _next_chunk(self) -> bytes:
        data = self._next_parallel() if self._parallel else self._next_streamed()
        if not data:
            raise ShortReadError(f"the object ended at {self._pos} of {self.info.size} bytes")
        return data

    def _next_streamed(self) -> bytes:
        """The next piece of one streaming GET, resumed with a ranged GET if it breaks."""
        for attempt in range(3):
            if self._response is None:
                self._response = self._open_stream(self._pos)
            try:
                data = self._response.raw.read(min(self._range, 8 * 1024 * 1024), decode_content=False)
            except Exception as exc:
                self._close_response()
                if not is_transient(exc) or attempt == 2:
                    raise
                continue
            if data:
                return data
            self._close_response()
            if attempt == 2:
                break
        return b""

    def _open_stream(self, start: int) -> Any:
        url = self._transport.media_url(self.info.bucket, self.info.name, self.info.generation)
        headers = {"Range": f"bytes={start}-"} if start else {}

        def once() -> Any:
            response = self._transport.session.get(
                url, headers=headers, stream=True, timeout=self._transport.config.timeout
            )
            if response.status_code not in (200, 206) or (start and response.status_code != 206):
                response.close()
                raise HTTPStatusError(response, "200 OK" if not start else "206 Partial Content")
            return response

        return self._transport.call_with_retries(once, is_transient)

    def _next_parallel(self) -> bytes:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self._window, thread_name_prefix="fcp-gcs-read")
        while len(self._futures) < self._window and self._next_start < self.info.size:
            start, stop = self._next_start, min(self._next_start + self._range, self.info.size)
            self._futures.append(self._pool.submit(fetch_range, self._transport, self.info, start, stop))
            self._next_start = stop
        if not self._futures:
            return b""
        return self._futures.popleft().result()

    # -- end ----------------------------------------------------------------------------

    def _verify(self) -> None:
        if self._verified:
            return
        self._verified = True
        self._stop()
        actual = self._digest.actual()
        if self._digest.kind and actual != self._digest.expected:
            if self._replaced():
                raise TransientError(
                    f"{redact(self.uri)} was replaced while it was being read; retry the load"
                )
            raise CorruptCheckpointError(
                f"the object at {redact(self.uri)} is damaged: its {self._digest.kind.upper()} is "
                f"{self._digest.expected} but the bytes read give {actual}. Retry the load; if it "
                "persists the stored checkpoint is corrupt"
            )

    def _replaced(self) -> bool:
        """Whether the object now has another generation than the one read (or is gone).

        Reads are pinned to one generation, so this only matters where pinning is not
        honoured (emulators, some proxies): a checksum mismatch then means an overwrite
        raced the read, which a retry fixes, not a damaged object.
        """
        try:
            blob = self._transport.client.bucket(self.info.bucket).get_blob(
                self.info.name, timeout=self._transport.config.timeout
            )
        except Exception:
            return False
        return blob is None or blob.generation != self.info.generation

    def _stop(self) -> None:
        for future in self._futures:
            future.cancel()
        self._futures.clear()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        self._close_response()

    def _close_response(self) -> None:
        response, self._response = self._response, None
        if response is not None:
            response.close()
