"""The Azure Blob Storage store: ``abfs://``, ``abfss://`` and ``az://`` URIs."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO, TypeVar

from azure.core.exceptions import HttpResponseError
from azure.storage.blob import BlobPrefix

from flyte_checkpoint.errors import CheckpointError, ContainerNotFoundError, NotFoundError
from flyte_checkpoint.storage.blobstore import BlobStore, BlobWriter, CopySource, ObjectInfo, deletes_failed
from flyte_checkpoint.storage.kit.errors import from_status
from flyte_checkpoint.storage.kit.files import download_to_file
from flyte_checkpoint.storage.kit.locations import Location
from flyte_checkpoint.storage.kit.pools import StorePool

from . import copies
from .client import AzureClient
from .config import AzureConfig
from .errors import PERMISSION_HINT, error_code, map_error, status_of
from .reader import AzurePinned, open_reader
from .uris import parse
from .writer import AzureWriter

T = TypeVar("T")


#: Sub-requests one Blob Batch request takes (the service's limit).
DELETE_BATCH = 256


class AzureStore(BlobStore):
    """Objects in Azure Blob Storage (block blobs).

    Built from an :class:`~flyte_checkpoint_azure.config.AzureConfig`, or from its settings as
    keyword arguments (then the environment fills the rest). Nothing touches the network until
    a URI is used; one instance may be shared by every thread of a process. One pool of
    ``max_concurrency + read_concurrency`` threads serves all its readers and writers.

    Raises (at construction):
        ConfigurationError: an unknown or invalid setting, or a malformed connection string.
    """

    supports_ranges = True
    supports_list = True
    supports_list_details = True
    #: Reads of one version: ``If-Match`` with the ETag of the pin (:class:`.reader.AzurePinned`).
    supports_pinned_reads = True
    #: ``Put Block From URL`` (incremental saves), within Azure's block rules: :mod:`.copies`.
    copy_limits = copies.LIMITS
    #: ``Put Blob`` with ``If-None-Match: *`` (:meth:`write_bytes_if_absent`).
    creates_atomically = True

    def __init__(self, config: AzureConfig | None = None, **settings: Any) -> None:
        if config is not None and settings:
            raise TypeError("give AzureStore a config or settings, not both")
        self.config = config if config is not None else AzureConfig.resolve(**settings)
        #: Bytes a writer holds before it stages any (one block).
        self.part_size: int = self.config.part_size
        #: Bytes of one ranged read of a stream (the conformance suite reads around it).
        self.read_range_size: int = self.config.read_range_size
        #: The SDK's clients (:mod:`.client`), built on first use in each process:
        #: one service client per account and endpoint.
        self.client = AzureClient(self.config)
        self.pool = StorePool("azure", self.config.max_concurrency + self.config.read_concurrency)

    @property
    def max_pooled_connections(self) -> int:
        """The most HTTP connections the store keeps open between calls (its clients' pools)."""
        return self.config.max_connections

    def open_read(self, uri: str) -> BinaryIO:
        return open_reader(self, parse(uri), uri)  # type: ignore[return-value]

    def open_write(self, uri: str) -> BlobWriter:
        return AzureWriter(self, self.client.blob(parse(uri)), uri)

    def write_bytes_if_absent(self, uri: str, data: bytes) -> bool:
        """``Put Blob`` with ``If-None-Match: *`` (``overwrite=False``): refused (409
        ``BlobAlreadyExists``, or 412 for one of concurrent creates) when the blob exists, and
        then nothing is written and this returns False."""
        blob = self.client.blob(parse(uri))
        try:
            blob.upload_blob(bytes(data), length=len(data), overwrite=False, max_concurrency=1)
        except Exception as exc:
            status = status_of(exc)
            if status == 412 or (status == 409 and error_code(exc) == "BlobAlreadyExists"):
                return False
            raise self.map_error(exc, uri, "write") from exc
        return True

    def stat(self, uri: str) -> int | None:
        blob = self.client.blob(parse(uri))
        try:
            return blob.get_blob_properties().size
        except Exception as exc:
            err = self.map_error(exc, uri, "stat")
            if type(err) is NotFoundError:
                return None
            raise err from exc

    def pin(self, uri: str) -> AzurePinned | None:
        """The blob's size and ETag (Get Blob Properties); its reads are conditional on that ETag."""
        loc = parse(uri)
        blob = self.client.blob(loc)
        try:
            props = blob.get_blob_properties()
        except Exception as exc:
            err = self.map_error(exc, uri, "stat")
            if type(err) is NotFoundError:
                return None
            raise err from exc
        return AzurePinned(self, loc, uri, props.size, props.etag)

    def copy_source(self, uri: str) -> CopySource | None:
        """Size and ETag (Get Blob Properties); a copy of its ranges checks the ETag (:mod:`.copies`)."""
        return copies.describe(self, uri)

    def delete(self, uri: str) -> None:
        blob = self.client.blob(parse(uri))
        try:
            blob.delete_blob(delete_snapshots="include")
        except Exception as exc:
            err = self.map_error(exc, uri, "delete")
            if type(err) is not NotFoundError:
                raise err from exc

    def delete_many(self, uris: Iterable[str]) -> None:
        """Blob Batch (``Submit Batch``): 256 deletes a request per container. A blob the
        service did not delete is named in the error raised once every batch was sent; an absent
        one is no error."""
        groups: dict[tuple[str, str], list[tuple[str, Location]]] = {}
        for uri in dict.fromkeys(uris):
            loc = parse(uri)
            groups.setdefault((loc.netloc, loc.bucket), []).append((uri, loc))
        failures: list[tuple[str, BaseException]] = []
        for items in groups.values():
            container = self.client.container(items[0][1])
            for at in range(0, len(items), DELETE_BATCH):
                batch = items[at : at + DELETE_BATCH]
                try:
                    answers = list(
                        container.delete_blobs(
                            *[loc.key for _, loc in batch],
                            delete_snapshots="include",
                            raise_on_any_failure=False,
                        )
                    )
                except Exception as exc:
                    err = self.map_error(exc, batch[0][0], "delete")
                    if isinstance(err, ContainerNotFoundError):
                        raise err from exc
                    failures += [(uri, err) for uri, _ in batch]
                    continue
                for (uri, _), answer in zip(batch, answers, strict=True):
                    status = answer.status_code
                    code = answer.headers.get("x-ms-error-code") or ""
                    if status < 300 or (status == 404 and code != "ContainerNotFound"):
                        continue
                    if code == "ContainerNotFound":
                        self.delete(uri)  # raises ContainerNotFoundError, as a delete of it alone
                    failures.append(
                        (
                            uri,
                            from_status(
                                status, uri=uri, action="delete", detail=code, permission_hint=PERMISSION_HINT
                            ),
                        )
                    )
        if failures:
            raise deletes_failed(failures, sum(len(items) for items in groups.values()))

    def list(self, prefix: str) -> Iterator[str]:
        loc = parse(prefix, want_key=False)
        container = self.client.container(loc)
        try:
            names = [b.name for b in container.list_blobs(name_starts_with=loc.key or None)]
        except Exception as exc:
            raise self.map_error(exc, prefix, "list")
        yield from sorted(loc.uri(name) for name in names)

    def list_details(self, prefix: str, *, recursive: bool = True) -> Iterator[ObjectInfo]:
        """Sizes and modification times from the listing itself (no request per object);
        ``recursive=False`` lists one level with Azure's ``/`` delimiter, deeper blobs as folders."""
        loc = parse(prefix, want_key=False)
        container = self.client.container(loc)
        start = loc.key or None
        try:
            if recursive:
                found = [_info(loc, b) for b in container.list_blobs(name_starts_with=start)]
            else:
                found = [_info(loc, b) for b in container.walk_blobs(name_starts_with=start, delimiter="/")]
        except Exception as exc:
            raise self.map_error(exc, prefix, "list")
        yield from sorted(found, key=lambda info: info.uri)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        blob = self.client.blob(parse(uri))
        try:
            if length <= 0:
                blob.get_blob_properties()  # an absent object is NotFoundError, whatever the length
                return b""
            return blob.download_blob(offset=start, length=length, max_concurrency=1).readall()
        except HttpResponseError as exc:
            if status_of(exc) == 416 and error_code(exc) == "InvalidRange":
                return b""  # starts at or past the end
            raise self.map_error(exc, uri, "read")
        except Exception as exc:
            raise self.map_error(exc, uri, "read")

    def upload_file(self, path: str | os.PathLike[str], uri: str) -> None:
        """Upload a local file in blocks; atomic like any write, and refused
        (``SourceChangedError``, nothing committed) if the file changes meanwhile."""
        writer = self.open_write(uri)
        assert isinstance(writer, AzureWriter)
        writer.upload_file(path)

    def sharded_writes(self, uri: str) -> Any:
        """One object from many ranks: blocks staged by each rank, one block list committed by
        rank 0 (:mod:`flyte_checkpoint_azure.shards`)."""
        from .shards import AzureShardedWrites

        return AzureShardedWrites(self, uri)

    def download_file(self, uri: str, path: str | os.PathLike[str]) -> None:
        """Download into a temporary file beside ``path``, renamed over it when whole and checked."""
        with self.open_read(uri) as src:
            download_to_file(src, path)

    def close(self) -> None:
        self.pool.close()
        self.client.close()

    def __repr__(self) -> str:
        return f"<AzureStore account={self.config.default_account!r} credential {self.config.auth!r}>"

    # -- for the reader and writer -----------------------------------------------------------

    def map_error(self, exc: BaseException, uri: str, action: str) -> CheckpointError:
        """``exc`` as the fault table's error for ``action`` on ``uri``."""
        return map_error(exc, uri, action, config=self.config)

    def call(self, fn: Callable[[], T], uri: str, action: str) -> T:
        """``fn()`` (a request through a client of :attr:`client`), its failure raised as
        :meth:`map_error`."""
        try:
            return fn()
        except Exception as exc:
            raise self.map_error(exc, uri, action)


def _info(loc: Location, item: Any) -> ObjectInfo:
    if isinstance(item, BlobPrefix):
        return ObjectInfo(loc.uri(item.name), None, None, is_folder=True)
    etag = getattr(item, "etag", None)
    return ObjectInfo(
        loc.uri(item.name), item.size, item.last_modified, version=None if etag is None else str(etag)
    )


def make_store(**settings: Any) -> AzureStore:
    """The registry's factory: a store from ``settings`` and the environment."""
    return AzureStore(**settings)
