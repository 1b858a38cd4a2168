"""The Azure Blob Storage store: ``abfs://``, ``abfss://`` and ``az://`` URIs."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError

from flyte_checkpoint.errors import CheckpointError, NotFoundError, StoreError
from flyte_checkpoint.sources import open_source
from flyte_checkpoint.storage.blobstore import BlobStore, BlobWriter

from .clients import Clients
from .config import AzureConfig
from .error_map import error_code, map_error, status_of
from .locations import BlobLocation, parse, require_blob
from .reader import AzureBlobReader
from .settings import AzureSettings
from .writer import AzureBlobWriter

_SETTING_NAMES = frozenset(AzureSettings.__dataclass_fields__)


class AzureBlobStore(BlobStore):
    """Objects in Azure Blob Storage (block blobs).

    Configuration comes from the keyword arguments, then the environment: see
    :class:`~flyte_checkpoint_azure.config.AzureConfig` for credentials and accounts and
    :class:`~flyte_checkpoint_azure.settings.AzureSettings` for the tuning knobs (each a
    keyword argument here too). Nothing touches the network until a URI is used; one
    instance may be shared by every thread of a process.

    Raises (at construction):
        StoreError: an invalid setting or a malformed connection string.
    """

    supports_ranges = True

    def __init__(
        self,
        *,
        account_name: str | None = None,
        account_key: str | None = None,
        sas_token: str | None = None,
        connection_string: str | None = None,
        credential: Any = None,
        blob_endpoint: str | None = None,
        tenant_id: str | None = None,
        client_id: str | None = None,
        client_secret: str | None = None,
        environ: Mapping[str, str] | None = None,
        **settings: Any,
    ) -> None:
        unknown = set(settings) - _SETTING_NAMES
        if unknown:
            raise TypeError(f"AzureBlobStore got unknown arguments: {', '.join(sorted(unknown))}")
        self.settings = AzureSettings.from_env(environ, **settings)
        self.config = AzureConfig(
            account_name=account_name,
            account_key=account_key,
            sas_token=sas_token,
            connection_string=connection_string,
            credential=credential,
            blob_endpoint=blob_endpoint,
            tenant_id=tenant_id,
            client_id=client_id,
            client_secret=client_secret,
            environ=environ,
        )
        self._clients = Clients(self.config, self.settings)

    @property
    def max_pooled_connections(self) -> int:
        """The most HTTP connections the store keeps open between calls, per account endpoint."""
        return self._clients.pool_size

    # -- BlobStore -------------------------------------------------------------

    def open_read(self, uri: str) -> BinaryIO:
        loc = self._blob_location(uri)
        blob = self._clients.blob(loc, uri)
        chunk = self.settings.read_chunk_size
        try:
            first = blob.download_blob(offset=0, length=chunk)
            data = first.readall()
            props = first.properties
            size = _total_size(props.content_range, len(data))
        except HttpResponseError as exc:
            if status_of(exc) != 416:
                raise self._error(exc, uri, "read", loc) from exc
            data, props, size = b"", None, 0  # an empty blob has no byte 0
        except Exception as exc:
            raise self._error(exc, uri, "read", loc) from exc
        if props is None:
            props = self._call(lambda: blob.get_blob_properties(), uri, "read", loc)
            if props.size:
                return self.open_read(uri)  # replaced by a non-empty blob meanwhile
        etag = props.etag

        def fetch(offset: int, length: int) -> bytes:
            return blob.download_blob(
                offset=offset, length=length, etag=etag, match_condition=MatchConditions.IfNotModified
            ).readall()

        md5 = props.content_settings.content_md5 if self.settings.checksum else None
        return AzureBlobReader(  # type: ignore[return-value]
            uri,
            first=data,
            size=size,
            fetch=fetch,
            chunk_size=chunk,
            concurrency=self.settings.read_concurrency,
            expected_md5=bytes(md5) if md5 else None,
            fail=lambda exc, action: self._error(exc, uri, action, loc),
        )

    def open_write(self, uri: str) -> BlobWriter:
        loc = self._blob_location(uri)
        blob = self._clients.blob(loc, uri)
        return AzureBlobWriter(
            uri, blob, self.settings, lambda exc, action: self._error(exc, uri, action, loc)
        )

    def stat(self, uri: str) -> int | None:
        loc = self._blob_location(uri)
        blob = self._clients.blob(loc, uri)
        try:
            return blob.get_blob_properties().size
        except Exception as exc:
            err = self._error(exc, uri, "stat", loc)
            if type(err) is NotFoundError:
                return None
            raise err from exc

    def delete(self, uri: str) -> None:
        loc = self._blob_location(uri)
        blob = self._clients.blob(loc, uri)
        try:
            blob.delete_blob(delete_snapshots="include")
        except Exception as exc:
            err = self._error(exc, uri, "delete", loc)
            if type(err) is not NotFoundError:
                raise err from exc

    def list(self, prefix: str) -> Iterator[str]:
        loc = parse(prefix)
        container = self._clients.container(loc, prefix)
        try:
            names = [b.name for b in container.list_blobs(name_starts_with=loc.name or None)]
        except Exception as exc:
            raise self._error(exc, prefix, "list", loc) from exc
        yield from sorted(loc.uri_of(name) for name in names)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        loc = self._blob_location(uri)
        blob = self._clients.blob(loc, uri)
        try:
            return blob.download_blob(
                offset=start, length=length, max_concurrency=self.settings.read_concurrency
            ).readall()
        except HttpResponseError as exc:
            if status_of(exc) == 416 and error_code(exc) == "InvalidRange":
                return b""  # starts at or past the end
            raise self._error(exc, uri, "read", loc) from exc
        except Exception as exc:
            raise self._error(exc, uri, "read", loc) from exc

    def upload_file(self, path: str | os.PathLike[str], uri: str) -> None:
        """Upload a local file in blocks read straight from it; atomic like any write, and
        refused (``SourceChangedError``, nothing committed) if the file changes meanwhile."""
        block = self.settings.block_size
        with open_source(path) as src, self.open_write(uri) as dst:
            while data := src.read(block):
                dst.write(data)

    def download_file(self, uri: str, path: str | os.PathLike[str]) -> None:
        """Download into a temporary file beside ``path``, renamed over it when whole and checked."""
        target = Path(path)
        with self.open_read(uri) as src:
            tmp = target.parent / f".{target.name}.{uuid.uuid4().hex[:12]}.part"
            try:
                with open(tmp, "xb") as dst:  # the usual permissions (umask), unlike mkstemp
                    for piece in src.chunks():  # type: ignore[attr-defined]
                        dst.write(piece)
                os.replace(tmp, target)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise

    def close(self) -> None:
        self._clients.close()

    def __repr__(self) -> str:
        return f"<AzureBlobStore {self.config!r}>"

    # -- internals -------------------------------------------------------------

    def _blob_location(self, uri: str) -> BlobLocation:
        loc = parse(uri)
        require_blob(loc, uri)
        return loc

    def _error(self, exc: BaseException, uri: str, action: str, loc: BlobLocation) -> CheckpointError:
        account = loc.account or self.config.account_name
        return map_error(exc, uri, action, self.config.secrets(), account=account)

    def _call(self, fn: Any, uri: str, action: str, loc: BlobLocation) -> Any:
        try:
            return fn()
        except Exception as exc:
            raise self._error(exc, uri, action, loc) from exc


def _total_size(content_range: str | None, fallback: int) -> int:
    """The object's size from a ``Content-Range: bytes A-B/TOTAL`` header."""
    if content_range and "/" in content_range:
        total = content_range.rsplit("/", 1)[1].strip()
        if total.isdigit():
            return int(total)
    if content_range:
        raise StoreError(f"unexpected Content-Range from Azure: {content_range!r}")
    return fallback


def make_store() -> AzureBlobStore:
    """The registry's factory: a store configured from the environment."""
    return AzureBlobStore()
