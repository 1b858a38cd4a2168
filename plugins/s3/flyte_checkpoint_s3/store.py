"""The S3 store: ``s3://bucket/key`` and ``s3a://bucket/key`` through one shared boto3 client."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from flyte_checkpoint import cancellation
from flyte_checkpoint.errors import (
    CheckpointError,
    CheckpointPermissionError,
    ContainerNotFoundError,
    NotFoundError,
    StoreError,
)
from flyte_checkpoint.forksafe import PerProcess
from flyte_checkpoint.interrupts import finish
from flyte_checkpoint.sources import open_source
from flyte_checkpoint.storage.blobstore import BlobStore, BlobWriter
from flyte_checkpoint.uri import redact

from . import checksums
from .client import ClientProvider
from .config import S3Config
from .error_map import error_code, map_error
from .reader import S3Reader
from .upload import MultipartUpload, S3Writer, part_size_for
from .uris import parse

T = TypeVar("T")


class S3Store(BlobStore):
    """Objects in S3 (or an S3-compatible server).

    Settings come from keyword arguments (see :class:`~flyte_checkpoint_s3.config.S3Config`
    for their names), then environment variables, then defaults; or pass a whole ``config``.
    One instance serves every thread of a process: the client is built on first use and
    shared, and parts and ranges run in one bounded thread pool.

    Raises (on construction):
        ValueError: a setting is invalid (the message names it).
    """

    supports_ranges = True

    def __init__(self, config: S3Config | None = None, **settings: Any) -> None:
        if config is not None and settings:
            raise ValueError("pass either config or keyword settings, not both")
        self.config = config if config is not None else S3Config.from_env(**settings)
        #: The checksum asked of S3 on upload (None: no checksum).
        self.crc = checksums.get(self.config.checksum)
        self._clients = ClientProvider(self.config)
        # Per process: a forked child gets a pool with threads of its own (see forksafe).
        self._pool: PerProcess[ThreadPoolExecutor] = PerProcess(self._new_pool)

    # -- shared machinery --------------------------------------------------------

    @property
    def client(self) -> Any:
        """The boto3 S3 client (built, and boto3 imported, on first use)."""
        return self._clients.get()

    @property
    def max_pooled_connections(self) -> int:
        """The most HTTP connections the store keeps open between calls (its client's pool)."""
        return self.config.pool_connections

    @property
    def executor(self) -> ThreadPoolExecutor:
        """The pool that sends parts and fetches ranges (made on first use in each process)."""
        return self._pool.get()

    def _new_pool(self) -> ThreadPoolExecutor:
        workers = self.config.upload_concurrency + self.config.read_concurrency
        return ThreadPoolExecutor(workers, thread_name_prefix="flyte-checkpoint-s3")

    def map(self, exc: BaseException, uri: str, action: str, bucket: str | None = None) -> CheckpointError:
        """The project error for ``exc`` (see :func:`~flyte_checkpoint_s3.error_map.map_error`)."""
        return map_error(
            exc,
            uri,
            action,
            bucket=bucket,
            endpoint=self.config.describe_endpoint(),
            secrets=self.config.secrets,
        )

    def call(self, fn: Callable[[Any], T], uri: str, action: str, bucket: str | None = None) -> T:
        """``fn(client)``, with any error raised as the project's own."""
        try:
            return fn(self.client)
        except Exception as exc:
            raise self.map(exc, uri, action, bucket) from exc

    def error(self, message: str) -> StoreError:
        """A :class:`StoreError` with ``message`` (for failures the SDK does not raise)."""
        return StoreError(message)

    # -- the BlobStore contract -------------------------------------------------

    def open_read(self, uri: str) -> BinaryIO:
        loc = parse(uri)
        resp = self.call(lambda c: c.get_object(Bucket=loc.bucket, Key=loc.key), uri, "read", loc.bucket)
        return S3Reader(self, uri, loc.bucket, loc.key, resp)  # type: ignore[return-value]

    def open_write(self, uri: str) -> BlobWriter:
        loc = parse(uri)
        return S3Writer(self, uri, loc.bucket, loc.key)

    def stat(self, uri: str) -> int | None:
        loc = parse(uri)
        try:
            resp = self.call(lambda c: c.head_object(Bucket=loc.bucket, Key=loc.key), uri, "stat", loc.bucket)
        except ContainerNotFoundError:
            raise
        except NotFoundError:
            self._check_bucket(uri, loc.bucket)
            return None
        return int(resp["ContentLength"])

    def delete(self, uri: str) -> None:
        loc = parse(uri)
        try:
            self.call(lambda c: c.delete_object(Bucket=loc.bucket, Key=loc.key), uri, "delete", loc.bucket)
        except ContainerNotFoundError:
            raise
        except NotFoundError:
            pass

    def list(self, prefix: str) -> Iterator[str]:
        loc = parse(prefix, need_key=False)

        def keys(client: Any) -> list[str]:
            found: list[str] = []
            pages = client.get_paginator("list_objects_v2").paginate(Bucket=loc.bucket, Prefix=loc.key)
            for page in pages:
                found.extend(obj["Key"] for obj in page.get("Contents", ()))
            return found

        found = self.call(keys, prefix, "list", loc.bucket)
        for key in sorted(found):
            yield loc.uri(key)

    # -- fast paths ---------------------------------------------------------------

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        loc = parse(uri)
        if length <= 0:
            return b""
        try:
            return self.fetch_range(uri, loc.bucket, loc.key, start, length, None)
        except StoreError as exc:
            if error_code(exc) == "InvalidRange":  # starts at or after the end
                return b""
            raise

    def fetch_range(
        self, uri: str, bucket: str, key: str, start: int, length: int, etag: str | None
    ) -> bytes:
        """``length`` bytes from ``start`` (fewer at the end), of the version ``etag`` if given."""
        args: dict[str, Any] = {"Bucket": bucket, "Key": key, "Range": f"bytes={start}-{start + length - 1}"}
        if etag:
            args["IfMatch"] = etag

        def get(client: Any) -> bytes:
            body = client.get_object(**args)["Body"]
            try:
                return body.read()
            finally:
                body.close()

        return self.call(get, uri, f"read bytes {start}-{start + length - 1} of", bucket)

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
                self.put(uri, loc.bucket, loc.key, data)
                return
            upload = MultipartUpload(self, uri, loc.bucket, loc.key, self.executor)
            upload.start()
            try:
                offset, number = 0, 1
                while offset < size:
                    cancellation.check()  # a cancelled save stops sending parts
                    n = min(part_size_for(number, self.config.part_size), size - offset)
                    upload.submit(number, lambda off=offset, n=n: src.pread(n, off))
                    offset += n
                    number += 1
                upload.complete(check=lambda: (src.verify(), cancellation.check()))  # and never commits
            except BaseException:
                finish(upload.abort)
                raise

    def download_file(self, uri: str, path: str | os.PathLike[str]) -> None:
        """Download into ``path`` through a temporary file beside it, renamed when whole and verified."""
        target = Path(path)
        tmp = target.with_name(f".{target.name}.fcp-tmp-{uuid.uuid4().hex[:12]}")
        try:
            with self.open_read(uri) as src, open(tmp, "wb") as dst:
                while chunk := src.read(self.config.range_size):
                    dst.write(chunk)
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def put(self, uri: str, bucket: str, key: str, data: bytes | bytearray) -> None:
        """Store ``data`` in one PUT, with its checksum."""
        args: dict[str, Any] = {"Bucket": bucket, "Key": key, "Body": data}
        if self.crc is not None:
            args["ChecksumAlgorithm"] = self.crc.name
            args[self.crc.param] = self.crc.encode(self.crc.compute(data))
        self.call(lambda c: c.put_object(**args), uri, "write", bucket)

    def close(self) -> None:
        pool = self._pool.take()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self._clients.close()

    def __repr__(self) -> str:
        return (
            f"<S3Store endpoint={self.config.describe_endpoint()} region={self.config.region or 'default'}>"
        )

    # -- internals --------------------------------------------------------------

    def _check_bucket(self, uri: str, bucket: str) -> None:
        """Raise ContainerNotFoundError if ``bucket`` is missing (after a 404 on one of its keys)."""
        try:
            self.call(lambda c: c.head_bucket(Bucket=bucket), uri, "check the bucket of", bucket)
        except NotFoundError as exc:
            raise ContainerNotFoundError(
                f"the bucket {bucket!r} of {redact(uri)} does not exist at {self.config.describe_endpoint()}:"
                " create it, or fix the bucket name or the endpoint"
                " (FLYTE_AWS_ENDPOINT / AWS_ENDPOINT_URL_S3)"
            ) from exc
        except CheckpointPermissionError:
            pass  # not allowed to ask: the HEAD of the key said 404, so the key is what is missing


def make_store() -> S3Store:
    """The registry's factory: an :class:`S3Store` configured from the environment."""
    return S3Store()
