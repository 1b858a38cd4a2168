"""Server-side range copies (incremental saves): ``Put Block From URL`` into the block list.

A copied block names its source's URL and range (``x-ms-source-range``) and version
(``x-ms-source-if-match`` with the ETag :meth:`AzureStore.copy_source` read), so the service
refuses it (412) once the source was replaced; the blocks, copied and written, are committed
by the writer's one ``Put Block List``. The service reads the source itself, so the source URL
must carry an authorization it accepts (:func:`source_access`): a read-only SAS signed with
the account key for a key credential, the configured SAS for a SAS credential, an Azure AD
bearer token (``x-ms-copy-source-authorization``) for a token credential, nothing for an
anonymous (public) container. Azure has no minimum block size; a copy shorter than
``min_copy`` is read back (a ranged GET with ``If-Match``) and sent with the written bytes,
because each block costs a request and counts against the blob's 50,000.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from azure.core import MatchConditions

from flyte_checkpoint.errors import CheckpointError, CheckpointPermissionError, NotFoundError, StoreError
from flyte_checkpoint.storage.blobstore import CopyLimits, CopySource, copy_source_changed
from flyte_checkpoint.storage.kit.errors import chain
from flyte_checkpoint.storage.kit.settings import MiB
from flyte_checkpoint.uri import redact

from .config import MAX_PART_SIZE, MAX_PARTS
from .errors import PERMISSION_HINT, error_code, status_of
from .uris import parse

if TYPE_CHECKING:
    from azure.storage.blob import BlobClient

    from .store import AzureStore

#: Azure's rules for blocks: no minimum, at most 4000 MiB copied by one request (service
#: versions since 2020-10-02; the SDK sends a newer one), at most 50,000 blocks a blob.
LIMITS = CopyLimits(min_part=0, max_copy=MAX_PART_SIZE, max_pieces=MAX_PARTS, min_copy=MiB // 16)
#: How long a SAS made for one copy request stays valid (the request needs seconds).
SAS_LIFETIME = datetime.timedelta(hours=1)
#: The OAuth scope of a bearer token for the storage service.
STORAGE_SCOPE = "https://storage.azure.com/.default"


def describe(store: AzureStore, uri: str) -> CopySource | None:
    """The blob's size and ETag (Get Blob Properties), or None if it is absent."""
    blob = store.client.blob(parse(uri))
    try:
        props = blob.get_blob_properties()
    except Exception as exc:
        err = store.map_error(exc, uri, "stat")
        if type(err) is NotFoundError:
            return None
        raise err from exc
    return CopySource(uri, int(props.size), str(props.etag))


def source_access(store: AzureStore, source: CopySource) -> tuple[str, dict[str, Any]]:
    """The URL the service reads ``source`` from, and the keyword arguments that authorize it,
    for the store's credential (see the module docstring)."""
    loc = parse(source.uri)
    url = store.client.blob(loc).url
    auth = store.config.auth
    key, sas, token = None, None, None
    if auth.kind == "key":
        key = auth.key
    elif auth.kind == "sas":
        sas = auth.sas
    elif auth.kind in ("credential", "service-principal", "default"):
        credential = store.client.credential_for(store.config.account_for(loc), loc)
        key = getattr(credential, "named_key", (None, None))[1]  # AzureNamedKeyCredential
        sas = getattr(credential, "signature", None)  # AzureSasCredential
        token = credential if key is None and sas is None and hasattr(credential, "get_token") else None
    if key:
        from azure.storage.blob import BlobSasPermissions, generate_blob_sas

        expiry = datetime.datetime.now(datetime.timezone.utc) + SAS_LIFETIME
        account = store.config.account_for(loc)
        sas = generate_blob_sas(
            account,
            loc.bucket,
            loc.key,
            account_key=key,
            permission=BlobSasPermissions(read=True),
            expiry=expiry,
        )
    if sas:
        return f"{url}?{sas.lstrip('?')}", {}
    if token is not None:
        return url, {"source_authorization": f"Bearer {token.get_token(STORAGE_SCOPE).token}"}
    return url, {}  # anonymous: the source's container must be public


def copy_block(
    store: AzureStore, blob: BlobClient, dest: str, block_id: str, source: CopySource, start: int, length: int
) -> None:
    """``Put Block From URL``: ``length`` bytes from ``start`` of ``source`` staged as block
    ``block_id`` of ``blob``, only while the source has the ETag ``source.version``."""
    try:
        url, auth = source_access(store, source)
    except Exception as exc:  # a token that could not be obtained
        raise store.map_error(exc, source.uri, "authorize a copy from")
    try:
        blob.stage_block_from_url(
            block_id,
            url,
            source_offset=start,
            source_length=length,
            headers={"x-ms-source-if-match": source.version},
            **auth,
        )
    except Exception as exc:
        # The SAS or token made for this request is a secret too: no message or cause shows it.
        made = (*_signatures(url), *auth.values())
        raise chain(_mapped(store, exc, source, dest), exc, (*store.config.secrets(), *made)) from None


def read_source(store: AzureStore, source: CopySource, start: int, length: int) -> bytes:
    """Bytes of ``source`` (a ranged GET with ``If-Match``)."""
    blob = store.client.blob(parse(source.uri))
    try:
        data = blob.download_blob(
            offset=start,
            length=length,
            etag=source.version,
            match_condition=MatchConditions.IfNotModified,
            max_concurrency=1,
        ).readall()
    except Exception as exc:
        if status_of(exc) == 412 or type(store.map_error(exc, source.uri, "read")) is NotFoundError:
            raise copy_source_changed(source, f"HTTP {status_of(exc)}") from exc
        raise store.map_error(exc, source.uri, "read")
    if len(data) != length:
        raise copy_source_changed(source, "it ended early")
    return data


def _signatures(url: str) -> list[str]:
    """A SAS's signature in ``url``, as sent (URL-encoded) and decoded."""
    raw = [v for k, _, v in (p.partition("=") for p in urlsplit(url).query.split("&")) if k == "sig"]
    return [*raw, *(unquote(v) for v in raw)]


def _mapped(store: AzureStore, exc: BaseException, source: CopySource, dest: str) -> BaseException:
    """A failed ``Put Block From URL`` as the project's error.

    412 (the source's ETag is no longer ``source.version``) and 404 on the source are
    CopySourceChangedError when the source did change; a source that is still the version
    copied from means the service could not read it (its URL or authorization): StoreError
    or CheckpointPermissionError saying so, never a retried "replaced".
    """
    if isinstance(exc, CheckpointError):
        return exc
    status, code = status_of(exc), error_code(exc)
    if status == 412 or (status == 404 and code in ("CannotVerifyCopySource", "BlobNotFound")):
        if describe(store, source.uri) != source:
            return copy_source_changed(source, f"Azure answered {status} {code}")
        return StoreError(
            f"cannot copy a range of {redact(source.uri)} into {redact(dest)}: the service could not"
            f" read the source (HTTP {status} {code}) although it is unchanged; its URL"
            f" {redact(store.client.blob(parse(source.uri)).url)} must be reachable from the service"
        )
    if code == "CannotVerifyCopySource" and status in (401, 403):
        return CheckpointPermissionError(
            f"cannot copy a range of {redact(source.uri)} into {redact(dest)}: the service was denied"
            f" reading the source (HTTP {status} {code}): the copy source is read with a SAS made from"
            f" the account key, the configured SAS token (it needs read permission) or an Azure AD"
            f" token; {PERMISSION_HINT}"
        )
    return store.map_error(exc, dest, "copy a block into")


__all__ = ["LIMITS", "copy_block", "describe", "read_source", "source_access"]
