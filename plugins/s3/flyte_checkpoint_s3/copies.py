"""Server-side range copies (incremental saves): ``UploadPartCopy`` into a multipart upload.

A copied part names its source range (``CopySourceRange``) and version (``CopySourceIfMatch``
with the ETag :meth:`S3Store.copy_source` read), so S3 refuses it (412) once the source was
replaced. Servers that ignore that header (moto) are covered too: before the completion the
writer checks with ``HEAD`` that every source still has its ETag, so the copied parts, all
done by then, came from that version. Every part but the last holds at least 5 MiB
(:data:`LIMITS`); the kit's ``PartWriter`` reads a few bytes of the source (a ranged GET with
``If-Match``) where a written part would be shorter.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from flyte_checkpoint.errors import CheckpointError, NotFoundError
from flyte_checkpoint.storage.blobstore import CopyLimits, CopySource, copy_source_changed

from .config import MAX_PART_SIZE, MAX_PARTS, MIN_PART_SIZE
from .errors import error_code
from .reader import fetch
from .uris import parse

if TYPE_CHECKING:
    from .store import S3Store

#: S3's rules for parts (:mod:`.config`): at least 5 MiB but the last, at most 5 GiB, at most
#: 10,000 of them.
LIMITS = CopyLimits(min_part=MIN_PART_SIZE, max_copy=MAX_PART_SIZE, max_pieces=MAX_PARTS)
#: Codes of an answer that says the source is no longer the version copied from.
_REPLACED = {"PreconditionFailed", "412", "NoSuchKey", "404"}


def describe(store: S3Store, uri: str) -> CopySource | None:
    """The object's size and ETag (``HEAD``), or None if it is absent."""
    loc = parse(uri)
    try:
        resp = store.call(lambda: store.client.get().head_object(Bucket=loc.bucket, Key=loc.key), uri, "stat")
    except NotFoundError:
        if store.stat(uri) is None:  # also raises ContainerNotFoundError for a missing bucket
            return None
        raise
    return CopySource(uri, int(resp["ContentLength"]), str(resp["ETag"]))


def copy_part(
    store: S3Store, dest: str, upload_id: str, number: int, source: CopySource, start: int, length: int
) -> dict[str, Any]:
    """``UploadPartCopy`` of ``length`` bytes from ``start`` of ``source`` as part ``number``;
    returns the answer's ``CopyPartResult``."""
    loc, src = parse(dest), parse(source.uri)
    args = {
        "Bucket": loc.bucket,
        "Key": loc.key,
        "UploadId": upload_id,
        "PartNumber": number,
        "CopySource": {"Bucket": src.bucket, "Key": src.key},
        "CopySourceRange": f"bytes={start}-{start + length - 1}",
        "CopySourceIfMatch": source.version,
    }
    try:
        resp = store.client.get().upload_part_copy(**args)
    except Exception as exc:
        raise _mapped(store, exc, source, dest, f"copy part {number} of")
    return dict(resp.get("CopyPartResult") or {})


def read_source(store: S3Store, source: CopySource, start: int, length: int) -> bytes:
    """Bytes of ``source`` (a ranged GET with ``If-Match``)."""
    buf = bytearray(length)
    try:
        got = fetch(store, parse(source.uri), source.uri, start, memoryview(buf), version=source.version)
    except CheckpointError as exc:
        if error_code(exc) in _REPLACED or isinstance(exc, NotFoundError):
            raise copy_source_changed(source) from exc
        raise
    if got != length:
        raise copy_source_changed(source, "it ended early")
    return bytes(buf)


def check_unchanged(store: S3Store, sources: dict[str, CopySource]) -> None:
    """Raise CopySourceChangedError unless every source still has its ETag (``HEAD``)."""
    for source in sources.values():
        now = describe(store, source.uri)
        if now != source:
            raise copy_source_changed(source)


def part_crc(result: dict[str, Any], name: str) -> int | None:
    """The part's CRC from a ``CopyPartResult`` (S3 gives it when the upload has a checksum
    algorithm), or None when the server gave none."""
    value = result.get(f"Checksum{name}")
    if not value:
        return None
    return int.from_bytes(base64.b64decode(value), "big")


def _mapped(store: S3Store, exc: BaseException, source: CopySource, dest: str, action: str) -> BaseException:
    if error_code(exc) in _REPLACED:
        return copy_source_changed(source, f"S3 answered {error_code(exc)}")
    return store.map_error(exc, dest, action)


__all__ = ["LIMITS", "check_unchanged", "copy_part", "describe", "part_crc", "read_source"]
