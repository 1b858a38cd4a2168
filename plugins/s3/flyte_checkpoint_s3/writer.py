"""Writes: one PUT for a small object, else a multipart upload with parts sent concurrently.

A :class:`MultipartUpload` holds at most ``max_concurrency`` parts in flight; submitting
another blocks until one finishes, so a writer's memory stays under
``part_size x (max_concurrency + 1)`` whatever the object's size. Each part carries its
checksum; by default the parts' checksums are combined into the whole object's, which S3
stores as a ``FULL_OBJECT`` checksum (``checksum_type="COMPOSITE"`` stores S3's checksum of
the parts' checksums instead). Nothing is visible before ``CompleteMultipartUpload``; any failure
aborts the upload so that no orphaned parts remain.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from flyte_checkpoint.errors import StoreError
from flyte_checkpoint.storage.blobstore import BlobWriter
from flyte_checkpoint.storage.kit import Location
from flyte_checkpoint.uri import redact

from .errors import error_code
from .integrity import Buffer, Crc

if TYPE_CHECKING:
    from .store import S3Store

log = logging.getLogger("flyte_checkpoint.s3")

#: S3 accepts at most this many parts in one upload.
MAX_PARTS = 10_000
#: and at most this many bytes in one part.
MAX_PART_SIZE = 5 * 1024**3
#: Parts are ``part_size`` for the first this-many, then double every this-many after.
PARTS_PER_SIZE_STEP = 1000


def part_size_for(number: int, base: int) -> int:
    """The size of part ``number`` (1-based): ``base``, doubled every 1000 parts, at most 5 GiB.

    With the default 8 MiB base the 10,000 parts S3 allows hold far more than its 5 TiB
    object limit, so a stream of unknown length never runs out of parts.
    """
    return min(base << ((number - 1) // PARTS_PER_SIZE_STEP), MAX_PART_SIZE)


class MultipartUpload:
    """One S3 multipart upload: parts in, concurrently; then complete or abort.

    Not thread-safe for its caller (one thread submits); its parts run in ``executor``.
    """

    def __init__(self, store: S3Store, uri: str, loc: Location) -> None:
        self._store = store
        self._uri = uri
        self._bucket = loc.bucket
        self._key = loc.key
        self._crc: Crc | None = store.crc
        self._full_object = store.config.checksum_type == "FULL_OBJECT"
        self._slots = threading.BoundedSemaphore(store.config.max_concurrency)
        self._futures: dict[int, Future[tuple[str, int, int]]] = {}
        self._lock = threading.Lock()
        self._in_flight = 0
        #: The most parts that were in flight at once (for tests of the bound).
        self.peak_in_flight = 0
        self.upload_id: str | None = None

    def start(self) -> None:
        """Create the upload on S3 (raises the project's errors)."""
        args: dict[str, Any] = {"Bucket": self._bucket, "Key": self._key}
        if self._crc is not None:
            args.update(ChecksumAlgorithm=self._crc.name, ChecksumType=self._store.config.checksum_type)
        resp = self._store.call(lambda c: c.create_multipart_upload(**args), self._uri, "start an upload to")
        self.upload_id = resp["UploadId"]

    def submit(self, number: int, load: Callable[[], Buffer]) -> None:
        """Upload part ``number`` whose bytes ``load()`` returns (called in a worker thread).

        Blocks while ``max_concurrency`` parts are in flight. Raises the first error of
        an earlier part, if any, so a failing upload stops early.
        """
        if number > MAX_PARTS:
            raise StoreError(
                f"{redact(self._uri)} needs more than {MAX_PARTS} parts: raise part_size"
                " (FLYTE_CHECKPOINT_S3_PART_SIZE)"
            )
        self.raise_failed()
        self._slots.acquire()
        with self._lock:
            self._in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
        try:
            future = self._store.pool.submit(self._send, number, load)
        except BaseException:
            self._release(None)
            raise
        future.add_done_callback(self._release)
        self._futures[number] = future

    def _release(self, _: object) -> None:
        with self._lock:
            self._in_flight -= 1
        self._slots.release()

    def _send(self, number: int, load: Callable[[], Buffer]) -> tuple[str, int, int]:
        data = load()
        args: dict[str, Any] = {
            "Bucket": self._bucket,
            "Key": self._key,
            "UploadId": self.upload_id,
            "PartNumber": number,
            "Body": data,
        }
        value = 0
        if self._crc is not None:
            value = self._crc.compute(data)
            args["ChecksumAlgorithm"] = self._crc.name
            args[self._crc.param] = self._crc.encode(value)
        resp = self._store.call(lambda c: c.upload_part(**args), self._uri, f"upload part {number} of")
        return resp["ETag"], value, len(data)

    def raise_failed(self) -> None:
        """Raise the error of the first part that failed, if any has."""
        for number in sorted(self._futures):
            future = self._futures[number]
            if future.done() and future.exception() is not None:
                raise future.exception()  # type: ignore[misc]

    def complete(self, check: Callable[[], None] | None = None) -> None:
        """Wait for every part, then commit the object (raises the first part's error).

        ``check``, if given, runs once every part is sent and before the commit; raising
        from it stops the commit.
        """
        parts = []
        whole = 0
        for number in sorted(self._futures):
            etag, value, size = self._futures[number].result()
            part: dict[str, Any] = {"PartNumber": number, "ETag": etag}
            if self._crc is not None:
                part[self._crc.param] = self._crc.encode(value)
                if self._full_object:
                    whole = self._crc.combine(whole, value, size) if number > 1 else value
            parts.append(part)
        if check is not None:
            check()
        args: dict[str, Any] = {
            "Bucket": self._bucket,
            "Key": self._key,
            "UploadId": self.upload_id,
            "MultipartUpload": {"Parts": parts},
        }
        if self._crc is not None:
            args["ChecksumType"] = self._store.config.checksum_type
            if self._full_object:
                args[self._crc.param] = self._crc.encode(whole)
        self._store.call(lambda c: c.complete_multipart_upload(**args), self._uri, "complete the upload of")

    def abort(self) -> None:
        """Cancel queued parts, wait for running ones, and abort the upload on S3.

        Tries the abort a few times; if it still fails, logs the upload id (a bucket
        lifecycle rule ``AbortIncompleteMultipartUpload`` then cleans it up) and returns.
        """
        for future in self._futures.values():
            future.cancel()
        for future in self._futures.values():
            if not future.cancelled():
                try:
                    future.exception()
                except BaseException:
                    pass
        if self.upload_id is None:
            return
        args = {"Bucket": self._bucket, "Key": self._key, "UploadId": self.upload_id}
        last: BaseException | None = None
        for _ in range(3):
            try:
                self._store.call(lambda c: c.abort_multipart_upload(**args), self._uri, "abort the upload of")
                return
            except Exception as exc:
                if error_code(exc) == "NoSuchUpload":
                    return
                last = exc
        log.warning(
            "could not abort the multipart upload %s of %s: %s; a bucket lifecycle rule"
            " (AbortIncompleteMultipartUpload) will remove its parts",
            self.upload_id,
            redact(self._uri),
            last,
        )


class S3Writer(BlobWriter):
    """Streams bytes into parts; see the module docstring for the guarantees.

    Parts after the first are filled in place in a buffer allocated at their final size and
    handed to the upload as they are, never regrown nor copied. The first grows by doubling
    from what has been written, so a small object costs its own size, not a whole part.
    """

    def __init__(self, store: S3Store, uri: str, loc: Location) -> None:
        super().__init__(uri)
        self._store = store
        self._loc = loc
        self._buf = bytearray()
        self._fill = 0
        self._upload: MultipartUpload | None = None
        self._next_part = 1

    @property
    def upload(self) -> MultipartUpload | None:
        """The multipart upload, once the object outgrew one part."""
        return self._upload

    def _write(self, data: Buffer) -> None:
        view = memoryview(data).cast("B")
        while view:
            if self._fill == self._part_size():
                # A full part is sent only when more bytes follow, so an object of at most
                # one part is always a single PUT.
                self._flush_part()
            if self._fill == len(self._buf):
                self._make_room(len(view))
            n = min(len(view), len(self._buf) - self._fill)
            self._buf[self._fill : self._fill + n] = view[:n]
            self._fill += n
            view = view[n:]

    def _part_size(self) -> int:
        return part_size_for(self._next_part, self._store.config.part_size)

    def _make_room(self, coming: int) -> None:
        """A bigger buffer for the part being filled: its whole size, or for the first part
        twice what it holds (at least what is ``coming``), keeping what it holds."""
        size = self._part_size()
        capacity = size if self._next_part > 1 else min(size, max(2 * self._fill, self._fill + coming))
        buf = bytearray(capacity)
        buf[: self._fill] = self._buf[: self._fill]
        self._buf = buf

    def _take(self) -> bytearray:
        """The filled part (a short last one is trimmed in place), leaving an empty buffer."""
        part, fill = self._buf, self._fill
        del part[fill:]
        self._buf, self._fill = bytearray(), 0
        return part

    def _flush_part(self) -> None:
        if self._upload is None:
            self._upload = MultipartUpload(self._store, self.uri, self._loc)
            self._upload.start()
        part = self._take()
        self._upload.submit(self._next_part, lambda: part)
        self._next_part += 1

    def _commit(self) -> None:
        if self._upload is None:
            self._store.put(self.uri, self._loc, self._take())
            return
        if self._fill:
            self._flush_part()
        self._upload.complete()

    def _abort(self) -> None:
        self._buf, self._fill = bytearray(), 0
        if self._upload is not None:
            self._upload.abort()
