"""The GCS store: objects at ``gs://BUCKET/NAME`` and ``gcs://BUCKET/NAME``."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any, BinaryIO, TypeVar

from flyte_checkpoint.errors import (
    CheckpointError,
    CheckpointPermissionError,
    ConfigurationError,
    ContainerNotFoundError,
    NotFoundError,
    StoreError,
)
from flyte_checkpoint.storage.blobstore import BlobStore, BlobWriter, ObjectInfo, deletes_failed
from flyte_checkpoint.storage.kit import Location, StorePool, download_to_file, from_status
from flyte_checkpoint.uri import redact

from . import copies, errors
from .client import GCSClient
from .config import GCSConfig
from .reader import GCSPinned, fetch, open_reader
from .uris import parse
from .writer import GCSWriter

T = TypeVar("T")


#: Calls one JSON API batch request takes (GCS's limit).
DELETE_BATCH = 100


class GCSStore(BlobStore):
    """Objects in Google Cloud Storage.

    One instance serves every thread of a process: the SDK client is built on first use and
    the store's pool (``max_concurrency + read_concurrency`` threads, named
    ``flyte-checkpoint-gcs-N``) is shared by its readers and writers. Settings come from
    ``config``, or else from keyword arguments and the environment (:class:`GCSConfig`).

    Raises:
        ConfigurationError: a setting is invalid (at construction, naming where it came from).
    """

    supports_ranges = True
    #: Reads of one generation (:class:`.reader.GCSPinned`).
    supports_pinned_reads = True
    #: None: GCS copies only whole objects on the server (:mod:`.copies` says why).
    copy_limits = copies.LIMITS
    supports_list = True
    supports_list_details = True

    def __init__(self, config: GCSConfig | None = None, **settings: Any) -> None:
        if config is not None and settings:
            raise ConfigurationError(
                f"GCSStore takes a config or settings, not both (got config and {', '.join(settings)})"
            )
        self.config = config if config is not None else GCSConfig.resolve(**settings)
        #: Bytes a writer holds before it sends any (one resumable chunk).
        self.part_size: int = self.config.part_size
        #: Bytes of one ranged read of a stream (the conformance suite reads around it).
        self.read_range_size: int = self.config.read_range_size
        #: The SDK's clients (:mod:`.client`), built on first use in each process:
        #: its authorized session and storage client.
        self.client = GCSClient(self.config)
        self.pool = StorePool("gcs", self.config.max_concurrency + self.config.read_concurrency)

    @property
    def max_pooled_connections(self) -> int:
        """The most HTTP connections the store keeps open between calls."""
        return self.config.max_connections

    # -- BlobStore --------------------------------------------------------------------

    def open_read(self, uri: str) -> BinaryIO:
        loc = parse(uri)
        blob = self._blob(loc, uri)
        if blob is None:
            raise NotFoundError(f"no checkpoint object at {redact(uri)}")
        return open_reader(self, loc, uri, blob)  # type: ignore[return-value]

    def open_write(self, uri: str) -> BlobWriter:
        return GCSWriter(self, parse(uri), uri)

    def stat(self, uri: str) -> int | None:
        blob = self._blob(parse(uri), uri)
        return None if blob is None else int(blob.size or 0)

    def pin(self, uri: str) -> GCSPinned | None:
        """The object's metadata (size, generation); its reads ask for that generation."""
        loc = parse(uri)
        blob = self._blob(loc, uri)
        return None if blob is None else GCSPinned(self, loc, uri, blob)

    def delete(self, uri: str) -> None:
        loc = parse(uri)

        def delete() -> None:
            blob = self.client.storage.bucket(loc.bucket).blob(loc.key)
            blob.delete(timeout=self.config.timeout, retry=self.client.retry())

        try:
            self.call(delete, uri, "delete")
        except ContainerNotFoundError:
            raise
        except NotFoundError:
            self._check_bucket(loc, uri)

    def delete_many(self, uris: Iterable[str]) -> None:
        """A JSON API batch (``/batch/storage/v1``): 100 deletes a request per bucket. An object
        the service did not delete (its sub-response's status) is named in the error raised
        once every batch was sent; an absent one is no error. A missing bucket raises
        ContainerNotFoundError, as ``delete`` does."""
        groups: dict[str, list[tuple[str, Location]]] = {}
        for uri in dict.fromkeys(uris):
            loc = parse(uri)
            groups.setdefault(loc.bucket, []).append((uri, loc))
        failures: list[tuple[str, BaseException]] = []
        for bucket, items in groups.items():
            checked = False
            for at in range(0, len(items), DELETE_BATCH):
                batch = items[at : at + DELETE_BATCH]
                try:
                    answers = self.call(partial(self._batch_delete, bucket, batch), batch[0][0], "delete")
                except Exception as exc:
                    failures += [(uri, exc) for uri, _ in batch]
                    continue
                for (uri, loc), status in zip(batch, answers, strict=True):
                    if status == 404 and not checked:
                        self._check_bucket(loc, uri)  # a missing bucket raises (once a bucket)
                        checked = True
                    elif status != 404 and not 200 <= status < 300:
                        failures.append(
                            (
                                uri,
                                from_status(
                                    status, uri=uri, action="delete", permission_hint=errors.PERMISSION_HINT
                                ),
                            )
                        )
        if failures:
            raise deletes_failed(failures, sum(len(items) for items in groups.values()))

    def _batch_delete(self, bucket: str, items: list[tuple[str, Location]]) -> list[int]:
        """One batch request deleting ``items``' objects; the status of each sub-request."""
        client = self.client.storage
        target = client.bucket(bucket)
        batch = client.batch(raise_exception=False)
        with batch:
            for _, loc in items:
                target.delete_blob(loc.key, timeout=self.config.timeout, retry=None)
        answers = getattr(batch, "_responses", None)  # what finish() returned (the SDK keeps it)
        if not isinstance(answers, list) or len(answers) != len(items):
            raise StoreError(f"the GCS SDK's batch answered {len(answers or ())} of {len(items)} deletes")
        return [int(answer.status_code) for answer in answers]

    def copy_object(self, src: str, dst: str) -> int | None:
        """The whole object copied on the server by ``objects.rewrite`` (as many calls as the
        server asks for), from the source's generation found first (a source replaced meanwhile
        fails the precondition: nothing is written). Checkpoint generations use it."""
        sloc, dloc = parse(src), parse(dst)
        source = self._blob(sloc, src)
        if source is None:
            return None

        def rewrite() -> None:
            target = self.client.storage.bucket(dloc.bucket).blob(dloc.key)
            options = dict(
                if_source_generation_match=source.generation,
                timeout=self.config.timeout,
                retry=self.client.retry(),
            )
            token, _, _ = target.rewrite(source, **options)
            while token is not None:
                token, _, _ = target.rewrite(source, token=token, **options)

        self.call(rewrite, dst, "write")
        return int(source.size or 0)

    def list(self, prefix: str) -> Iterator[str]:
        return (info.uri for info in self.list_details(prefix))

    def list_details(self, prefix: str, *, recursive: bool = True) -> Iterator[ObjectInfo]:
        """Sizes and modification times (``updated``) from the listing itself, no request per
        object; ``recursive=False`` lists one level with GCS's ``/`` delimiter, its prefixes as
        folders. The listing is complete (every page) before the first entry is yielded."""
        loc = parse(prefix, want_key=False)
        try:
            pages = self.client.storage.list_blobs(
                loc.bucket,
                prefix=loc.key or None,
                delimiter=None if recursive else "/",
                fields="items(name,size,updated,generation),prefixes,nextPageToken",
                timeout=self.config.timeout,
                retry=self.client.retry(),
            )
            found = [
                ObjectInfo(
                    loc.uri(b.name),
                    int(b.size or 0),
                    b.updated,
                    version=None if b.generation is None else str(b.generation),
                )
                for b in pages
            ]
            found += [ObjectInfo(loc.uri(name), None, None, is_folder=True) for name in pages.prefixes]
        except Exception as exc:
            if errors.status_of(exc) == 404:
                raise errors.container_missing(prefix, "list", config=self.config) from None
            raise self.map_error(exc, prefix, "list")
        yield from sorted(found, key=lambda info: info.uri)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        loc = parse(uri)
        if length <= 0:
            return b""
        data = bytearray(length)
        try:
            got = fetch(self, loc, uri, start, memoryview(data))
        except Exception as exc:
            if errors.status_of(exc) != 404:
                raise self.map_error(exc, uri, "read")
            self._check_bucket(loc, uri)
            raise NotFoundError(f"no checkpoint object at {redact(uri)}") from None
        del data[got:]
        return bytes(data)

    def upload_file(self, path: str | os.PathLike[str], uri: str) -> None:
        """Upload a local file through the writer: one request up to one chunk, else its chunks
        in order, each read (``pread``) by the pool thread that sends it; atomic like any write,
        and refused (``SourceChangedError``, nothing committed) if the file changes meanwhile."""
        GCSWriter(self, parse(uri), uri).upload_file(path)

    def sharded_writes(self, uri: str) -> Any:
        """One object from many ranks: a temporary object per rank, composed by the committing
        rank (:mod:`flyte_checkpoint_gcs.shards`)."""
        from .shards import GCSShardedWrites

        return GCSShardedWrites(self, uri)

    def download_file(self, uri: str, path: str | os.PathLike[str]) -> None:
        """Copy the object into ``path`` through the parallel reader; ``path`` is replaced only
        once every byte has arrived and passed the checksum."""
        with self.open_read(uri) as src:
            download_to_file(src, path)

    def close(self) -> None:
        self.pool.close()
        self.client.close()

    def __repr__(self) -> str:
        return f"<GCSStore endpoint={self.client.endpoint} part_size={self.part_size}>"

    # -- helpers ------------------------------------------------------------------------

    def _blob(self, loc: Location, uri: str) -> Any:
        """The object's metadata (size, generation, checksums), or ``None`` if it does not exist."""
        try:
            bucket = self.client.storage.bucket(loc.bucket)
            blob = bucket.get_blob(loc.key, timeout=self.config.timeout, retry=self.client.retry())
        except Exception as exc:
            if errors.status_of(exc) != 404:
                raise self.map_error(exc, uri, "read")
            blob = None
        if blob is None:
            self._check_bucket(loc, uri)
            return None
        return blob

    def _check_bucket(self, loc: Location, uri: str) -> None:
        """After a 404 on an object: raise ContainerNotFoundError if the bucket is missing.

        GCS answers 404 alike for a missing object and a missing bucket; listing at most one
        name tells them apart and needs only the permission to list objects.
        """
        try:
            page = self.client.storage.list_blobs(
                loc.bucket,
                prefix=loc.key or None,
                max_results=1,
                fields="items(name)",
                timeout=self.config.timeout,
                retry=self.client.retry(),
            )
            next(iter(page), None)
        except Exception as exc:
            if errors.status_of(exc) == 404:
                raise errors.container_missing(uri, "stat", config=self.config) from None
            err = self.map_error(exc, uri, "list")
            if isinstance(err, CheckpointPermissionError):
                return  # may read objects but not list them: the bucket is taken to exist
            raise err

    def map_error(self, exc: BaseException, uri: str, action: str) -> CheckpointError:
        """``exc`` as the project's error for ``action`` on ``uri`` (:func:`.errors.map_error`)."""
        return errors.map_error(exc, uri, action, config=self.config)

    def call(self, fn: Callable[[], T], uri: str, action: str) -> T:
        """``fn()`` (a request through :attr:`client`), its failure raised as :meth:`map_error`."""
        try:
            return fn()
        except Exception as exc:
            raise self.map_error(exc, uri, action)


def make_store(**settings: Any) -> GCSStore:
    """The registry's factory: a store from ``settings`` (``configure_store``) and the environment."""
    return GCSStore(**settings)
