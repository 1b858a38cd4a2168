"""The S3 store: ``s3://bucket/key`` and ``s3a://bucket/key`` through one shared boto3 client."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, TypeVar

from flyte_checkpoint import cancellation
from flyte_checkpoint.errors import (
    CheckpointError,
    CheckpointPermissionError,
    ConfigurationError,
    ContainerNotFoundError,
    NotFoundError,
    StoreError,
)
from flyte_checkpoint.interrupts import finish
from flyte_checkpoint.sources import open_source
from flyte_checkpoint.storage.blobstore import BlobStore, BlobWriter, ObjectInfo
from flyte_checkpoint.storage.kit import Location, StorePool, download_to_file

from . import integrity
from .client import S3Client
from .config import S3Config
from .errors import bucket_missing, error_code, map_error
from .reader import open_reader
from .uris import parse
from .writer import MultipartUpload, S3Writer, part_size_for

T = TypeVar("T")


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

    def __init__(self, config: S3Config | None = None, **settings: Any) -> None:
        if config is not None and settings:
            raise ConfigurationError("pass either config or keyword settings to S3Store, not both")
        self.config = config if config is not None else S3Config.resolve(**settings)
        #: The checksum sent with every write (None: no checksum).
        self.crc = integrity.get(self.config.checksum)
        self._client = S3Client(self.config)
        #: Sends parts and fetches ranges; rebuilt in a forked child.
        self.pool = StorePool("s3", self.config.max_concurrency + self.config.read_concurrency)

    @property
    def client(self) -> Any:
        """The boto3 S3 client (built, and boto3 imported, on first use)."""
        return self._client.get()

    @property
    def max_pooled_connections(self) -> int:
        """The most HTTP connections the store keeps open between calls (its client's pool)."""
        return self.config.max_connections

    def map(self, exc: BaseException, uri: str, action: str) -> CheckpointError:
        """The project error for ``exc`` (see :func:`~flyte_checkpoint_s3.errors.map_error`)."""
        return map_error(exc, uri, action, config=self.config)

    def call(self, fn: Callable[[Any], T], uri: str, action: str) -> T:
        """``fn(client)``, with any error raised as the project's own."""
        try:
            return fn(self.client)
        except Exception as exc:
            raise self.map(exc, uri, action)

    # -- the BlobStore contract -------------------------------------------------

    def open_read(self, uri: str) -> BinaryIO:
        return open_reader(self, parse(uri), uri)  # type: ignore[return-value]

    def open_write(self, uri: str) -> BlobWriter:
        return S3Writer(self, uri, parse(uri))

    def stat(self, uri: str) -> int | None:
        loc = parse(uri)
        try:
            resp = self.call(lambda c: c.head_object(Bucket=loc.bucket, Key=loc.key), uri, "stat")
        except ContainerNotFoundError:
            raise
        except NotFoundError:
            self._check_bucket(uri, loc.bucket)
            return None
        return int(resp["ContentLength"])

    def delete(self, uri: str) -> None:
        loc = parse(uri)
        try:
            self.call(lambda c: c.delete_object(Bucket=loc.bucket, Key=loc.key), uri, "delete")
        except ContainerNotFoundError:
            raise
        except NotFoundError:
            pass

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

        def entries(client: Any) -> list[ObjectInfo]:
            found: list[ObjectInfo] = []
            for page in client.get_paginator("list_objects_v2").paginate(**args):
                for obj in page.get("Contents", ()):
                    found.append(ObjectInfo(loc.uri(obj["Key"]), int(obj["Size"]), obj.get("LastModified")))
                for common in page.get("CommonPrefixes", ()):
                    found.append(ObjectInfo(loc.uri(common["Prefix"]), None, is_folder=True))
            return found

        yield from sorted(self.call(entries, prefix, "list"), key=lambda info: info.uri)

    # -- fast paths ---------------------------------------------------------------

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        loc = parse(uri)
        if length <= 0:
            return b""
        try:
            return self.fetch_range(uri, loc, start, length, None)
        except StoreError as exc:
            if error_code(exc) == "InvalidRange":  # starts at or after the end
                return b""
            raise

    def fetch_range(self, uri: str, loc: Location, start: int, length: int, etag: str | None) -> bytes:
        """``length`` bytes from ``start`` (fewer at the end), of the version ``etag`` if given."""
        end = start + length - 1
        args: dict[str, Any] = {"Bucket": loc.bucket, "Key": loc.key, "Range": f"bytes={start}-{end}"}
        if etag:
            args["IfMatch"] = etag

        def get(client: Any) -> bytes:
            body = client.get_object(**args)["Body"]
            try:
                return body.read()
            finally:
                body.close()

        return self.call(get, uri, f"read bytes {start}-{end} of")

    def upload_file(self, path: str | os.PathLike[str], uri: str) -> None:
        """Upload a local file: one PUT up to one part, else its parts read and sent concurrently.

        A file that changes meanwhile raises ``SourceChangedError`` before anything is committed.
        """
        loc = parse(uri)
        with open_source(path) as src:
            size = src.size
            if size <= self.config.part_size:
                data = src.read()
                cancellation.check()
                self.put(uri, loc, data)
                return
            upload = MultipartUpload(self, uri, loc)

            def before_commit() -> None:  # a changed file or a cancelled save never commits
                src.verify()
                cancellation.check()

            upload.start()
            try:
                offset, number = 0, 1
                while offset < size:
                    cancellation.check()  # a cancelled save stops sending parts
                    n = min(part_size_for(number, self.config.part_size), size - offset)
                    upload.submit(number, functools.partial(src.pread, n, offset))
                    offset += n
                    number += 1
                upload.complete(check=before_commit)
            except BaseException:
                finish(upload.abort)
                raise

    def download_file(self, uri: str, path: str | os.PathLike[str]) -> None:
        """Download into ``path`` through a temporary file beside it, renamed when whole and verified."""
        with self.open_read(uri) as src:
            download_to_file(src, path)

    def put(self, uri: str, loc: Location, data: bytes | bytearray) -> None:
        """Store ``data`` in one PUT, with its checksum."""
        args: dict[str, Any] = {"Bucket": loc.bucket, "Key": loc.key, "Body": data}
        if self.crc is not None:
            args["ChecksumAlgorithm"] = self.crc.name
            args[self.crc.param] = self.crc.encode(self.crc.compute(data))
        self.call(lambda c: c.put_object(**args), uri, "write")

    def close(self) -> None:
        self.pool.close()
        self._client.close()

    def __repr__(self) -> str:
        return (
            f"<S3Store endpoint={self.config.describe_endpoint()} region={self.config.region or 'default'}>"
        )

    # -- internals --------------------------------------------------------------

    def _check_bucket(self, uri: str, bucket: str) -> None:
        """Raise ContainerNotFoundError if ``bucket`` is missing (after a 404 on one of its keys)."""
        try:
            self.call(lambda c: c.head_bucket(Bucket=bucket), uri, "check the bucket of")
        except NotFoundError as exc:
            raise bucket_missing(uri, "stat", self.config, "HeadBucket: 404") from exc
        except CheckpointPermissionError:
            pass  # not allowed to ask: the HEAD of the key said 404, so the key is what is missing


def make_store(**settings: Any) -> S3Store:
    """The registry's factory: an :class:`S3Store` from ``settings`` and the environment."""
    return S3Store(**settings)
