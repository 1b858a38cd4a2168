"""Writes: one PUT for a small object, else a multipart upload with parts sent concurrently.

:class:`S3Writer` is the kit's :class:`~flyte_checkpoint.storage.kit.PartWriter` with S3's
protocol: ``CreateMultipartUpload`` before the first part, ``UploadPart`` from the store's pool
(at most ``max_concurrency`` in flight, so a writer holds at most
``part_size x (max_concurrency + 1)`` bytes), ``CompleteMultipartUpload`` at close, and
``AbortMultipartUpload`` on any failure, so no partial object and no orphaned parts remain.
Each part carries its CRC, computed in the thread that sends it; by default the parts' CRCs are
combined into the whole object's, which S3 stores as a ``FULL_OBJECT`` checksum
(``checksum_type=COMPOSITE`` stores S3's checksum of the parts' checksums instead).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from flyte_checkpoint.storage.blobstore import CopySource
from flyte_checkpoint.storage.kit import Location, PartWriter, scrub
from flyte_checkpoint.uri import redact

from . import copies, integrity
from .config import MAX_PART_SIZE, MAX_PARTS
from .errors import error_code

if TYPE_CHECKING:
    from .store import S3Store

log = logging.getLogger("flyte_checkpoint.s3")

#: Parts are ``part_size`` for the first this-many, then double every this-many after, so the
#: 10,000 parts hold more than S3's 5 TiB object limit.
DOUBLE_EVERY = 1000
#: Tries of ``AbortMultipartUpload`` before the upload is left to a lifecycle rule.
ABORT_TRIES = 3


class S3Writer(PartWriter):
    """A write of one object (see the module docstring); ``upload_id`` once multipart."""

    def __init__(self, store: S3Store, uri: str, loc: Location) -> None:
        config = store.config
        super().__init__(
            uri,
            part_size=config.part_size,
            max_concurrency=config.max_concurrency,
            pool=store.pool,
            double_every=DOUBLE_EVERY,
            max_parts=MAX_PARTS,
            max_part_size=MAX_PART_SIZE,
            copy_limits=copies.LIMITS,
        )
        self._store = store
        self._sources: dict[str, CopySource] = {}  # what parts were copied from, checked at the commit
        self._loc = loc
        self._crc = store.crc
        self._full_object = config.checksum_type == "FULL_OBJECT"
        #: The multipart upload's id, once it has begun.
        self.upload_id: str | None = None

    # -- PartWriter's hooks ------------------------------------------------------------

    def _put_whole(self, data: bytes | bytearray) -> None:
        args = self._args(Body=data)
        if self._crc is not None:
            args.update(integrity.request_args(self._crc, self._crc.compute(data)))
        resp = self._store.call(lambda: self._store.client.get().put_object(**args), self.uri, "write")
        self.committed_version = _etag(resp)

    def _start(self) -> None:
        args = self._args()
        if self._crc is not None:
            args.update(ChecksumAlgorithm=self._crc.name, ChecksumType=self._store.config.checksum_type)
        resp = self._store.call(
            lambda: self._store.client.get().create_multipart_upload(**args), self.uri, "start an upload to"
        )
        self.upload_id = resp["UploadId"]

    def _send_part(self, number: int, data: bytes | bytearray) -> tuple[dict[str, Any], int, int]:
        """Upload part ``number``; returns its entry of the completion, its CRC and its length."""
        args = self._args(UploadId=self.upload_id, PartNumber=number, Body=data)
        value = 0
        if self._crc is not None:
            value = self._crc.compute(data)
            args.update(integrity.request_args(self._crc, value))
        resp = self._store.call(
            lambda: self._store.client.get().upload_part(**args), self.uri, f"upload part {number} of"
        )
        part = {"PartNumber": number, "ETag": resp["ETag"]}
        if self._crc is not None:
            part[integrity.field(self._crc)] = self._crc.encode(value)
        return part, value, len(data)

    def _copy_part(
        self, number: int, source: CopySource, start: int, length: int
    ) -> tuple[dict[str, Any], int | None, int]:
        """``UploadPartCopy`` (see :mod:`.copies`); its entry of the completion, CRC (None when the
        server gave none) and length."""
        assert self.upload_id is not None
        self._sources.setdefault(source.uri, source)
        result = copies.copy_part(self._store, self.uri, self.upload_id, number, source, start, length)
        part = {"PartNumber": number, "ETag": result["ETag"]}
        value = copies.part_crc(result, self._crc.name) if self._crc is not None else None
        if self._crc is not None and value is not None:
            part[integrity.field(self._crc)] = self._crc.encode(value)
        return part, value, length

    def _read_source(self, source: CopySource, start: int, length: int) -> bytes:
        return copies.read_source(self._store, source, start, length)

    def _copied_crc32(self, result: tuple[dict[str, Any], int | None, int]) -> int | None:
        """S3's CRC-32 of a copied part: in its answer when the upload names CRC32 (the default
        ``checksum``), which checks the copy with nothing more on the wire (see :mod:`.copies`)."""
        return result[1] if self._crc is not None and self._crc.name == "CRC32" else None

    def _complete(self, results: list[Any], tail: memoryview | None) -> None:
        if self._sources:  # every copied part came from the version described (see .copies)
            copies.check_unchanged(self._store, self._sources)
        args = self._args(
            UploadId=self.upload_id, MultipartUpload={"Parts": [part for part, _, _ in results]}
        )
        if self._crc is not None:
            args["ChecksumType"] = self._store.config.checksum_type
            # A server that gives no CRC for a copied part: S3 keeps its own checksum, unchecked.
            if self._full_object and all(value is not None for _, value, _ in results):
                args[integrity.field(self._crc)] = self._crc.encode(self._whole(results))
        resp = self._store.call(
            lambda: self._store.client.get().complete_multipart_upload(**args),
            self.uri,
            "complete the upload of",
        )
        self.committed_version = _etag(resp)

    def _cancel(self) -> None:
        """Abort the upload, a few tries; if it still fails, log its id (a bucket lifecycle rule
        ``AbortIncompleteMultipartUpload`` then removes its parts) and return."""
        if self.upload_id is None:
            return
        args = self._args(UploadId=self.upload_id)
        last: BaseException | None = None
        for _ in range(ABORT_TRIES):
            try:
                self._store.call(
                    lambda: self._store.client.get().abort_multipart_upload(**args),
                    self.uri,
                    "abort the upload of",
                )
                return
            except Exception as exc:
                if error_code(exc) == "NoSuchUpload":
                    return
                last = exc
        log.warning(
            "could not abort the multipart upload %s of %s: %s; a bucket lifecycle rule"
            " (AbortIncompleteMultipartUpload) will remove its parts",
            self.upload_id,
            redact(self.uri),
            scrub(str(last)),
        )

    # -- helpers ------------------------------------------------------------------------

    def _args(self, **more: Any) -> dict[str, Any]:
        return {"Bucket": self._loc.bucket, "Key": self._loc.key, **more}

    def _whole(self, results: list[Any]) -> int:
        """The whole object's CRC, from the parts' (in part order) and their lengths."""
        assert self._crc is not None
        whole = 0
        for number, (_, value, size) in enumerate(results):
            whole = self._crc.combine(whole, value, size) if number else value
        return whole


def _etag(resp: Any) -> str | None:
    """The ETag of a commit's answer, as the listing gives it (None if it has none)."""
    etag = resp.get("ETag") if isinstance(resp, dict) else None
    return etag if isinstance(etag, str) else None
