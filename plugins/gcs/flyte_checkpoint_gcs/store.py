"""The GCS store: ``gs://bucket/name`` and ``gcs://bucket/name`` objects."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import requests

from flyte_checkpoint.errors import CheckpointError, CheckpointPermissionError, NotFoundError
from flyte_checkpoint.storage.blobstore import COPY_CHUNK, BlobStore, BlobWriter
from flyte_checkpoint.uri import redact

from . import errormap
from .config import GcsConfig
from .reader import GcsReader, ObjectInfo, fetch_range
from .transport import Transport
from .uris import GcsLocation, parse
from .writer import GcsWriter


class GcsStore(BlobStore):
    """Objects in Google Cloud Storage.

    One instance serves every thread of a process; the HTTP session and the SDK client
    are made on first use. Keyword arguments override the environment (see
    :meth:`GcsConfig.from_env` and the README); ``session`` replaces the authorized
    ``requests`` session the store would build (proxies, custom adapters, tests).
    """

    supports_ranges = True

    def __init__(
        self,
        *,
        endpoint: str | None = None,
        project: str | None = None,
        anonymous: bool | None = None,
        credentials: Any = None,
        chunk_size: int | None = None,
        read_range_size: int | None = None,
        read_concurrency: int | None = None,
        connect_timeout: float | None = None,
        read_timeout: float | None = None,
        retry_timeout: float | None = None,
        session: requests.Session | None = None,
        config: GcsConfig | None = None,
    ) -> None:
        overrides = dict(
            endpoint=endpoint,
            project=project,
            anonymous=anonymous,
            credentials=credentials,
            chunk_size=chunk_size,
            read_range_size=read_range_size,
            read_concurrency=read_concurrency,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retry_timeout=retry_timeout,
        )
        self.config = config or GcsConfig.from_env(**overrides)
        self._transport = Transport(self.config, session)

    @property
    def max_pooled_connections(self) -> int:
        """The most HTTP connections the store keeps open between calls (its session's pool)."""
        return self._transport.pool_size

    # -- BlobStore --------------------------------------------------------------------

    def open_read(self, uri: str) -> BinaryIO:
        info = self._info(uri, parse(uri))
        if info is None:
            raise NotFoundError(f"no checkpoint object at {redact(uri)}")
        return GcsReader(uri, info, self._transport)  # type: ignore[return-value]

    def open_write(self, uri: str) -> BlobWriter:
        return GcsWriter(uri, parse(uri), self._transport)

    def stat(self, uri: str) -> int | None:
        info = self._info(uri, parse(uri))
        return None if info is None else info.size

    def delete(self, uri: str) -> None:
        loc = parse(uri)
        try:
            blob = self._transport.client.bucket(loc.bucket).blob(loc.name)
            blob.delete(timeout=self.config.timeout, retry=self._transport.api_retry())
        except Exception as exc:
            if _is_not_found(exc):
                self._check_bucket(loc, uri)
                return
            errormap.reraise(exc, uri, "delete")

    def list(self, prefix: str) -> Iterator[str]:
        loc = parse(prefix, want_object=False)
        try:
            blobs = self._transport.client.list_blobs(
                loc.bucket,
                prefix=loc.name or None,
                fields="items(name),nextPageToken",
                timeout=self.config.timeout,
                retry=self._transport.api_retry(),
            )
            names = sorted(blob.name for blob in blobs)
        except Exception as exc:
            if _is_not_found(exc):
                raise errormap.missing_bucket(loc.bucket, prefix) from None
            errormap.reraise(exc, prefix, "list")
        for name in names:
            yield loc.uri(name)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        loc = parse(uri)
        if length <= 0:
            return b""
        # Unpinned and unchecked: the size is unknown here, so a short answer is the end.
        info = ObjectInfo(loc.bucket, loc.name, start + length, None, None, None)
        try:
            return fetch_range(self._transport, info, start, start + length, strict=False)
        except Exception as exc:
            if _is_not_found(exc):
                self._check_bucket(loc, uri)
                raise NotFoundError(f"no checkpoint object at {redact(uri)}") from None
            errormap.reraise(exc, uri, "read")

    def download_file(self, uri: str, path: str | os.PathLike[str]) -> None:
        """Copy the object into ``path`` through the parallel reader; ``path`` is replaced
        only once every byte has arrived and passed the checksum."""
        target = Path(path)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as dst, self.open_read(uri) as src:
                buf = bytearray(COPY_CHUNK)
                view = memoryview(buf)
                while n := src.readinto(view):  # type: ignore[attr-defined]
                    dst.write(view[:n])
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def close(self) -> None:
        self._transport.close()

    def __repr__(self) -> str:
        endpoint = self.config.endpoint or "storage.googleapis.com"
        return f"<GcsStore endpoint={endpoint} chunk_size={self.config.chunk_size}>"

    # -- helpers ------------------------------------------------------------------------

    def _info(self, uri: str, loc: GcsLocation) -> ObjectInfo | None:
        """The object's size, generation and checksums, or ``None`` if it does not exist."""
        try:
            bucket = self._transport.client.bucket(loc.bucket)
            blob = bucket.get_blob(loc.name, timeout=self.config.timeout, retry=self._transport.api_retry())
        except Exception as exc:
            if not _is_not_found(exc):
                errormap.reraise(exc, uri, "read")
            blob = None
        if blob is None:
            self._check_bucket(loc, uri)
            return None
        return ObjectInfo.from_blob(blob)

    def _check_bucket(self, loc: GcsLocation, uri: str) -> None:
        """Raise ContainerNotFoundError if the bucket is missing (after a 404 on an object).

        GCS answers 404 both for a missing object and a missing bucket; listing at most one
        name tells them apart and needs only the permission to list objects.
        """
        try:
            page = self._transport.client.list_blobs(
                loc.bucket,
                prefix=loc.name or None,
                max_results=1,
                fields="items(name)",
                timeout=self.config.timeout,
                retry=self._transport.api_retry(),
            )
            next(iter(page), None)
        except CheckpointError:
            raise
        except Exception as exc:
            if _is_not_found(exc):
                raise errormap.missing_bucket(loc.bucket, uri) from None
            if isinstance(errormap.map_error(exc, uri, "list"), CheckpointPermissionError):
                return  # may read objects but not list them: assume the bucket is there
            errormap.reraise(exc, uri, "read")


def _is_not_found(exc: BaseException) -> bool:
    if isinstance(exc, NotFoundError):
        return True
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status is None and "google.api_core.exceptions.GoogleAPICallError" in {
        f"{k.__module__}.{k.__name__}" for k in type(exc).__mro__
    }:
        status = getattr(exc, "code", None)
    return status == 404


def make_store() -> GcsStore:
    """The registry's factory: a store configured from the environment."""
    return GcsStore()
