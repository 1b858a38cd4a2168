"""The S3 store: ``s3://bucket/key`` and ``s3a://bucket/key`` through one shared boto3 client."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO, TypeVar

from flyte_checkpoint.errors import (
    CheckpointError,
    CheckpointPermissionError,
    ConfigurationError,
    ContainerNotFoundError,
    NotFoundError,
)
from flyte_checkpoint.storage.blobstore import BlobStore, BlobWriter, CopySource, ObjectInfo, deletes_failed
from flyte_checkpoint.storage.kit import StorePool, download_to_file

from . import copies, integrity
from .client import S3Client
from .config import S3Config
from .errors import KEY_MISSING_CODES, container_missing, error_code, map_error
from .reader import S3Pinned, fetch, open_reader
from .uris import parse
from .writer import S3Writer

T = TypeVar("T")
#: What S3 answers a conditional create of a key that exists, or that another create is making.
_CREATE_REFUSED = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}


class S3Store(BlobStore):
    """Objects in S3 (or an S3-compatible server).

    Settings come from keyword arguments (the names of :class:`~flyte_checkpoint_s3.config.S3Config`),
    then environment variables, then defaults; or pass a whole ``config``. One instance serves
    every thread of a process: the client is built on first use and shared, and parts and
    ranges run in one bounded thread pool (``flyte-checkpoint-s3-N``).

    Raises (on construction):
        ConfigurationError: a setting is invalid (the message names it and where it came from).
    """

    supports_ranges = True
    supports_list = True
    supports_list_details = True
    #: Reads of one version: ``If-Match`` with the ETag the pin's ``HEAD`` gave (:class:`.reader.S3Pinned`).
    supports_pinned_reads = True
    #: ``UploadPartCopy`` (incremental saves), within S3's part rules: :mod:`.copies`.
    copy_limits = copies.LIMITS
    #: ``If-None-Match: *`` on ``PutObject`` (:meth:`write_bytes_if_absent`).
    creates_atomically = True

    def __init__(self, config: S3Config | None = None, **settings: Any) -> None:
        if config is not None and settings:
            raise ConfigurationError("pass either config or keyword settings to S3Store, not both")
        self.config = config if config is not None else S3Config.resolve(**settings)
        #: Bytes a writer holds before it sends any (one part).
        self.part_size: int = self.config.part_size
        #: Bytes of one ranged read of a stream (the conformance suite reads around it).
        self.read_range_size: int = self.config.read_range_size
        #: The CRC sent with every write (None: no checksum).
        self.crc = integrity.for_write(self.config)
        #: The SDK's clients (:mod:`.client`), built on first use in each process:
        #: ``client.get()`` is the boto3 client.
        self.client = S3Client(self.config)
        #: Sends parts and fetches ranges; rebuilt in a forked child.
        self.pool = StorePool("s3", self.config.max_concurrency + self.config.read_concurrency)

    @property
    def max_pooled_connections(self) -> int:
        """The most HTTP connections the store keeps open between calls (its client's pool)."""
        return self.config.max_connections

    def map_error(self, exc: BaseException, uri: str, action: str) -> CheckpointError:
        """``exc`` as the project's error for ``action`` on ``uri`` (:func:`.errors.map_error`)."""
        return map_error(exc, uri, action, config=self.config)

    def call(self, fn: Callable[[], T], uri: str, action: str) -> T:
        """``fn()`` (a request through ``client.get()``), its failure raised as :meth:`map_error`."""
        try:
            return fn()
        except Exception as exc:
            raise self.map_error(exc, uri, action)

    # -- the BlobStore contract -------------------------------------------------

    def open_read(self, uri: str) -> BinaryIO:
        return open_reader(self, parse(uri), uri)  # type: ignore[return-value]

    def open_write(self, uri: str) -> BlobWriter:
        return S3Writer(self, uri, parse(uri))

    def stat(self, uri: str) -> int | None:
        resp = self._head(uri)
        return None if resp is None else int(resp["ContentLength"])

    def _head(self, uri: str) -> dict[str, Any] | None:
        """The object's ``HEAD`` answer (``ContentLength``, ``ETag``...), or ``None`` if it is absent.

        Raises:
            ContainerNotFoundError: the bucket is missing; and the project's other errors.
        """
        loc = parse(uri)
        try:
            return self.call(
                lambda: self.client.get().head_object(Bucket=loc.bucket, Key=loc.key), uri, "stat"
            )
        except ContainerNotFoundError:
            raise
        except NotFoundError:
            self._check_bucket(uri, loc.bucket)
            return None

    def pin(self, uri: str) -> S3Pinned | None:
        """The object's size and ETag (``HEAD``); its reads send ``If-Match`` with that ETag."""
        resp = self._head(uri)
        if resp is None:
            return None
        return S3Pinned(self, parse(uri), uri, int(resp["ContentLength"]), resp["ETag"])

    def copy_source(self, uri: str) -> CopySource | None:
        """Size and ETag (``HEAD``); a copy of its ranges checks the ETag (:mod:`.copies`)."""
        return copies.describe(self, uri)

    def write_bytes_if_absent(self, uri: str, data: bytes) -> bool:
        """``PutObject`` with ``If-None-Match: *``: S3 refuses it (412 ``PreconditionFailed``)
        when the key exists, and all but one of concurrent creates of a key (412, or 409
        ``ConditionalRequestConflict``): nothing is written then, and this returns False. A
        server that ignores the header (some S3-compatible ones) writes anyway."""
        loc = parse(uri)
        args: dict[str, Any] = {"Bucket": loc.bucket, "Key": loc.key, "Body": data, "IfNoneMatch": "*"}
        if self.crc is not None:
            args.update(integrity.request_args(self.crc, self.crc.compute(data)))
        try:
            self.client.get().put_object(**args)
        except Exception as exc:
            if error_code(exc) in _CREATE_REFUSED:
                return False
            raise self.map_error(exc, uri, "write") from exc
        return True

    def delete(self, uri: str) -> None:
        loc = parse(uri)
        try:
            self.call(lambda: self.client.get().delete_object(Bucket=loc.bucket, Key=loc.key), uri, "delete")
        except ContainerNotFoundError:
            raise
        except NotFoundError:
            pass

    def delete_many(self, uris: Iterable[str]) -> None:
        """``DeleteObjects``: 1,000 keys a request (per bucket). A key S3 could not delete is
        named in the error raised once every request was sent; an absent key is not an error."""
        by_bucket: dict[str, dict[str, str]] = {}
        for uri in dict.fromkeys(uris):
            loc = parse(uri)
            by_bucket.setdefault(loc.bucket, {})[loc.key] = uri
        failures: list[tuple[str, BaseException]] = []
        total = sum(len(keys) for keys in by_bucket.values())
        for bucket, keys in by_bucket.items():
            names = list(keys)
            for at in range(0, len(names), DELETE_BATCH):
                batch = names[at : at + DELETE_BATCH]
                where = keys[batch[0]]
                request = {"Objects": [{"Key": key} for key in batch], "Quiet": True}
                try:
                    resp = self.call(
                        lambda b=bucket, r=request: self.client.get().delete_objects(Bucket=b, Delete=r),  # type: ignore[misc]
                        where,
                        "delete",
                    )
                except ContainerNotFoundError:
                    raise
                except Exception as exc:
                    failures += [(keys[key], exc) for key in batch]
                    continue
                for error in resp.get("Errors", ()):
                    key = error.get("Key", "")
                    if error.get("Code") in KEY_MISSING_CODES or key not in keys:
                        continue
                    failures.append((keys[key], self.map_error(_client_error(error), keys[key], "delete")))
        if failures:
            raise deletes_failed(failures, total)

    def list(self, prefix: str) -> Iterator[str]:
        for info in self.list_details(prefix):
            yield info.uri

    def list_details(self, prefix: str, *, recursive: bool = True) -> Iterator[ObjectInfo]:
        """Sizes and modification times from ``ListObjectsV2`` itself (no ``HEAD`` per object);
        ``recursive=False`` lists with ``Delimiter="/"``, whose common prefixes are the folders."""
        loc = parse(prefix, want_key=False)
        args: dict[str, Any] = {"Bucket": loc.bucket, "Prefix": loc.key}
        if not recursive:
            args["Delimiter"] = "/"

        def entries() -> list[ObjectInfo]:
            found: list[ObjectInfo] = []
            for page in self.client.get().get_paginator("list_objects_v2").paginate(**args):
                for obj in page.get("Contents", ()):
                    etag = obj.get("ETag")
                    found.append(
                        ObjectInfo(
                            loc.uri(obj["Key"]),
                            int(obj["Size"]),
                            obj.get("LastModified"),
                            version=None if etag is None else str(etag),
                        )
                    )
                for common in page.get("CommonPrefixes", ()):
                    found.append(ObjectInfo(loc.uri(common["Prefix"]), None, is_folder=True))
            return found

        yield from sorted(self.call(entries, prefix, "list"), key=lambda info: info.uri)

    # -- fast paths ---------------------------------------------------------------

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        loc = parse(uri)
        if length <= 0:
            return b""
        data = bytearray(length)
        del data[fetch(self, loc, uri, start, memoryview(data)) :]
        return bytes(data)

    def upload_file(self, path: str | os.PathLike[str], uri: str) -> None:
        """Upload a local file: one PUT up to one part, else its parts read (``pread``) and sent
        concurrently; atomic like any write, and refused (``SourceChangedError``, nothing
        committed) if the file changes meanwhile."""
        S3Writer(self, uri, parse(uri)).upload_file(path)

    def sharded_writes(self, uri: str) -> Any:
        """One object from many ranks: one multipart upload, a range of part numbers per rank
        (:mod:`flyte_checkpoint_s3.shards`)."""
        from .shards import S3ShardedWrites

        return S3ShardedWrites(self, uri)

    def download_file(self, uri: str, path: str | os.PathLike[str]) -> None:
        """Download into ``path`` through a temporary file beside it, renamed when whole and verified."""
        with self.open_read(uri) as src:
            download_to_file(src, path)

    def close(self) -> None:
        self.pool.close()
        self.client.close()

    def __repr__(self) -> str:
        return (
            f"<S3Store endpoint={self.config.describe_endpoint()} region={self.config.region or 'default'}"
            f" part_size={self.part_size}>"
        )

    # -- internals --------------------------------------------------------------

    def _check_bucket(self, uri: str, bucket: str) -> None:
        """Raise ContainerNotFoundError if ``bucket`` is missing (after a 404 on one of its keys)."""
        try:
            self.call(lambda: self.client.get().head_bucket(Bucket=bucket), uri, "check the bucket of")
        except NotFoundError as exc:
            raise container_missing(uri, "stat", config=self.config, detail="HeadBucket: 404") from exc
        except CheckpointPermissionError:
            pass  # not allowed to ask: the HEAD of the key said 404, so the key is what is missing


#: Keys one ``DeleteObjects`` request takes (S3's limit).
DELETE_BATCH = 1000


def _client_error(error: dict[str, Any]) -> BaseException:
    """A key's entry in ``DeleteObjects``'s ``Errors`` as the ``ClientError`` a request for that
    key alone would have raised (mapped to the project's errors as any other)."""
    from botocore.exceptions import ClientError

    detail = {"Code": error.get("Code", ""), "Message": error.get("Message", "")}
    return ClientError({"Error": detail}, "DeleteObjects")


def make_store(**settings: Any) -> S3Store:
    """The registry's factory: an :class:`S3Store` from ``settings`` and the environment."""
    return S3Store(**settings)
