"""Reads: one GET, whose body is the first range, then ranged GETs pinned by ETag, through the kit.

:func:`open_reader` sends a plain ``GET``: its answer tells the object's size, ETag and stored
checksum, and its body is the kit's :class:`~flyte_checkpoint.storage.kit.RangedReader`'s head,
read for the first ``read_range_size`` bytes and then closed. The rest comes in ranged ``GET``\\ s
from the store's pool (:func:`fetch`), each asked with ``If-Match: <ETag>``, so a read never
mixes two versions of an object: a change mid-read is S3's 412, a TransientError, and the
retried load reads the new object whole. The reader verifies the stored full-object checksum
over the bytes it delivers (:func:`~flyte_checkpoint_s3.integrity.for_read`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, BinaryIO

from flyte_checkpoint.errors import TransientError
from flyte_checkpoint.storage.kit import Location, RangedReader
from flyte_checkpoint.storage.pinned import PinnedObject
from flyte_checkpoint.uri import redact

from . import integrity
from .errors import error_code

if TYPE_CHECKING:
    from .store import S3Store

#: The most bytes one ``readinto`` of a body asks for: urllib3 reads them into a buffer of its
#: own before the copy into the reader's, so this bounds that extra buffer.
_SLICE = 1024 * 1024


def open_reader(store: S3Store, loc: Location, uri: str, etag: str | None = None) -> RangedReader:
    """A stream of the object at ``loc``: its first GET now (raising the project's errors, a
    :class:`~flyte_checkpoint.errors.NotFoundError` for an absent object), the rest as it is read.
    With ``etag`` (a pin's), the first GET too is of that version only (``If-Match``): another
    is :class:`~flyte_checkpoint.errors.ObjectReplacedError`."""
    args: dict[str, Any] = {"Bucket": loc.bucket, "Key": loc.key}
    if etag:
        args["IfMatch"] = etag
    resp = store.call(lambda: store.client.get().get_object(**args), uri, "read")
    etag = resp.get("ETag")
    check = integrity.for_read(store.config, resp, uri)

    def fetch_range(offset: int, view: memoryview) -> int:
        return fetch(store, loc, uri, offset, view, etag)

    return RangedReader(
        uri,
        size=int(resp["ContentLength"]),
        fetch=fetch_range,
        range_size=store.config.read_range_size,
        concurrency=store.config.read_concurrency,
        pool=store.pool,
        head=resp["Body"],
        digest=check[0] if check else None,
        expected=check[1] if check else None,
        on_error=lambda exc: store.map_error(exc, uri, "read"),
    )


class S3Pinned(PinnedObject):
    """A version of an S3 object: its size and ETag from a ``HEAD``, every read a ``GET`` with
    ``If-Match`` on that ETag (412 once it is replaced: ObjectReplacedError)."""

    def __init__(self, store: S3Store, loc: Location, uri: str, size: int, etag: str) -> None:
        self.uri, self.size, self.version = uri, size, etag
        self._store, self._loc = store, loc

    def read_range(self, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        data = bytearray(length)
        del data[fetch(self._store, self._loc, self.uri, start, memoryview(data), self.version) :]
        return bytes(data)

    def open_read(self) -> BinaryIO:
        return open_reader(self._store, self._loc, self.uri, self.version)  # type: ignore[return-value]

    def changed(self) -> bool:
        head = self._store._head(self.uri)
        return head is None or head.get("ETag") != self.version


def fetch(
    store: S3Store, loc: Location, uri: str, start: int, view: memoryview, version: str | None = None
) -> int:
    """Fill ``view`` with the object's bytes from ``start`` (of ``version``, an ETag, if given);
    returns the bytes written, fewer only at the end of the object (0 from its end on).

    Raises:
        the project's errors (:meth:`S3Store.call`): NotFoundError, a TransientError for a
        changed object (412) or a cut body, and so on.
    """
    if not len(view):
        return 0
    end = start + len(view) - 1
    args: dict[str, Any] = {"Bucket": loc.bucket, "Key": loc.key, "Range": f"bytes={start}-{end}"}
    if version:
        args["IfMatch"] = version

    def get() -> int:
        try:
            resp = store.client.get().get_object(**args)
        except Exception as exc:
            if error_code(exc) == "InvalidRange":  # starts at or after the end
                return 0
            raise
        return _fill(resp, view, uri)

    return store.call(get, uri, f"read bytes {start}-{end} of")


def _fill(resp: dict[str, Any], view: memoryview, uri: str) -> int:
    """Copy the answer's body into ``view``; the body is closed."""
    body = resp["Body"]
    try:
        sent = int(resp.get("ContentLength") or 0)
        if sent > len(view):
            raise TransientError(
                f"S3 sent {sent} bytes for a range of {len(view)} of {redact(uri)}; the read is retried"
            )
        filled = 0
        while filled < len(view):
            n = body.readinto(view[filled : filled + _SLICE])
            if not n:  # botocore checks the length the answer announced: a cut body raises
                break
            filled += n
        return filled
    finally:
        body.close()


__all__ = ["S3Pinned", "fetch", "open_reader"]
