"""Streaming reads: the first range at open, the rest on the kit's bounded read-ahead, pinned by ETag."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, BinaryIO

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError

from flyte_checkpoint.errors import NotFoundError, StoreError
from flyte_checkpoint.storage.kit.locations import Location
from flyte_checkpoint.storage.kit.reads import RangedReader
from flyte_checkpoint.storage.pinned import PinnedObject

from . import integrity
from .errors import status_of

if TYPE_CHECKING:
    from .store import AzureStore


class _Filler:
    """A write-only stream over ``view``: the SDK's ``readinto`` copies each answer into the
    reader's own buffer, so no downloaded range is kept twice."""

    def __init__(self, view: memoryview) -> None:
        self.view, self.filled = view, 0

    def write(self, data: bytes) -> int:
        n = min(len(data), len(self.view) - self.filled)
        self.view[self.filled : self.filled + n] = memoryview(data)[:n]
        self.filled += n
        return len(data)

    def seekable(self) -> bool:
        return False


def open_reader(store: AzureStore, loc: Location, uri: str, etag: str | None = None) -> RangedReader:
    """A stream of the blob at ``loc``, checked against its stored MD5 when read to the end.

    The first request brings the first ``read_range_size`` bytes with the size, the ETag and
    the stored MD5; every later range is conditional on that ETag, so an object replaced
    mid-read raises ObjectReplacedError (HTTP 412) instead of mixing two versions. With
    ``etag`` (a pin's), the first request is conditional on it too.

    Raises:
        NotFoundError, ContainerNotFoundError, CheckpointPermissionError, TransientError,
        StoreError: as the fault table maps the first request's failure.
    """
    config = store.config
    blob = store.client.blob(loc)
    pinned: dict[str, Any] = {"etag": etag, "match_condition": MatchConditions.IfNotModified} if etag else {}
    try:
        first = blob.download_blob(offset=0, length=config.read_range_size, max_concurrency=1, **pinned)
        props = first.properties
        size = _total_size(props.content_range, first.size)
        head = bytearray(first.size)
        if first.readinto(_Filler(memoryview(head))) != len(head):  # type: ignore[arg-type]
            raise StoreError(f"Azure answered {first.size} bytes of {uri} but sent fewer")
    except HttpResponseError as exc:
        if status_of(exc) != 416:
            raise store.map_error(exc, uri, "read")
        head, size, props = bytearray(), 0, None  # an empty blob has no byte 0
    except Exception as exc:
        raise store.map_error(exc, uri, "read")
    if props is None:
        props = store.call(lambda: blob.get_blob_properties(**pinned), uri, "read")
        if props.size:
            return open_reader(store, loc, uri, etag)  # replaced by a non-empty blob meanwhile
    version = props.etag

    def fetch_range(offset: int, view: memoryview) -> int:
        return fetch(store, loc, uri, offset, view, version)

    check = integrity.for_read(config, props, uri)
    return RangedReader(
        uri,
        size=size,
        fetch=fetch_range,
        range_size=config.read_range_size,
        concurrency=config.read_concurrency,
        pool=store.pool,
        head=memoryview(head),
        digest=check[0] if check else None,
        expected=check[1] if check else None,
        on_error=lambda exc: store.map_error(exc, uri, "read"),
    )


def fetch(
    store: AzureStore, loc: Location, uri: str, start: int, view: memoryview, version: str | None = None
) -> int:
    """Fill ``view`` with the blob's bytes from ``start`` (of ``version``, an ETag, if given:
    another is HTTP 412); returns the bytes written, fewer only at the end of the blob.

    Raises:
        the SDK's errors, as they come (the reader maps them with ``on_error``; ``uri`` is for
        the same signature as S3's and GCS's).
    """
    pinned: dict[str, Any] = (
        {"etag": version, "match_condition": MatchConditions.IfNotModified} if version else {}
    )
    downloader = store.client.blob(loc).download_blob(
        offset=start, length=len(view), max_concurrency=1, **pinned
    )
    return downloader.readinto(_Filler(view))  # type: ignore[arg-type]


def _total_size(content_range: str | None, fallback: int) -> int:
    """The object's size from a ``Content-Range: bytes A-B/TOTAL`` header."""
    if content_range and "/" in content_range:
        total = content_range.rsplit("/", 1)[1].strip()
        if total.isdigit():
            return int(total)
    if content_range:
        raise StoreError(f"unexpected Content-Range from Azure: {content_range!r}")
    return fallback


class AzurePinned(PinnedObject):
    """A version of a blob: its size and ETag (Get Blob Properties), every read conditional on
    that ETag (``If-Match``; 412 once it is replaced: ObjectReplacedError)."""

    def __init__(self, store: AzureStore, loc: Location, uri: str, size: int, etag: str) -> None:
        self.uri, self.size, self.version = uri, size, etag
        self._store, self._loc = store, loc

    def read_range(self, start: int, length: int) -> bytes:
        blob = self._store.client.blob(self._loc)
        if length <= 0 or start >= self.size:  # Azure answers 416 for a range past the end
            return b""
        length = min(length, self.size - start)
        return self._store.call(
            lambda: blob.download_blob(
                offset=start,
                length=length,
                etag=self.version,
                match_condition=MatchConditions.IfNotModified,
                max_concurrency=1,
            ).readall(),
            self.uri,
            "read",
        )

    def open_read(self) -> BinaryIO:
        return open_reader(self._store, self._loc, self.uri, self.version)  # type: ignore[return-value]

    def changed(self) -> bool:
        blob = self._store.client.blob(self._loc)
        try:
            props = self._store.call(blob.get_blob_properties, self.uri, "stat")
        except NotFoundError as exc:
            if type(exc) is NotFoundError:
                return True
            raise
        return props.etag != self.version
