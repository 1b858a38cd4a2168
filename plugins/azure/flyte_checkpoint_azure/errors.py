"""Azure SDK errors -> the rows of the fault table (``flyte_checkpoint.storage.kit.errors``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)

from flyte_checkpoint.errors import (
    CheckpointError,
    CheckpointPermissionError,
    ContainerNotFoundError,
    StoreError,
    TransientError,
)
from flyte_checkpoint.storage.kit.errors import chain, from_status, transport_failed
from flyte_checkpoint.storage.kit.errors import container_missing as kit_container_missing
from flyte_checkpoint.storage.kit.redaction import scrub_values
from flyte_checkpoint.uri import redact

from .uris import parse

if TYPE_CHECKING:
    from .config import AzureConfig

_LEASE_CODES = frozenset(
    {"LeaseIdMissing", "LeaseIdMismatch", "LeaseIdMismatchWithBlobOperation", "LeaseAlreadyPresent",
     "LeaseNotPresentWithBlobOperation", "LeaseLost"}
)  # fmt: skip
_NAME_CODES = frozenset({"InvalidResourceName", "OutOfRangeInput"})
#: What a 403 on Azure may mean, and what to check.
PERMISSION_HINT = (
    "check the credentials (AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_ACCOUNT_NAME with"
    " AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN, or an Azure AD identity with the"
    " 'Storage Blob Data Contributor' role); a SAS token needs read, write, delete and list"
    " permissions and an expiry in the future"
)


def error_code(exc: BaseException) -> str | None:
    """The service's error code (``"BlobNotFound"``), or ``None``."""
    code = getattr(exc, "error_code", None)
    code = getattr(code, "value", code)
    return str(code) if code else None


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of a service error, or ``None``."""
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def map_error(exc: BaseException, uri: str, action: str, *, config: AzureConfig) -> CheckpointError:
    """The error for ``exc``, raised while trying to ``action`` (a verb: "read") ``uri``.

    Returns (does not raise) NotFoundError, ContainerNotFoundError, CheckpointPermissionError,
    TransientError or StoreError, as the fault table says; the project's own errors pass
    unchanged. No message holds a key, SAS token or signature, and the SDK's exception is the
    ``__cause__`` unless its text held one.
    """
    if isinstance(exc, CheckpointError):
        return exc
    secrets = config.secrets()
    status, code = status_of(exc), error_code(exc)
    detail = _summary(exc, secrets)
    if isinstance(exc, ClientAuthenticationError) and status is None and _token_unreachable(exc):
        err: CheckpointError = transport_failed(exc, uri=uri, action=action, endpoint=config.endpoint_url)
    elif isinstance(exc, ClientAuthenticationError) and status is None:
        err = CheckpointPermissionError(
            f"permission denied to {action} {redact(uri)}: no Azure AD token could be obtained"
            f" ({detail}): {PERMISSION_HINT}"
        )
    elif isinstance(exc, _TRANSPORT) or (isinstance(exc, HttpResponseError) and status is None):
        err = transport_failed(exc, uri=uri, action=action, endpoint=config.endpoint_url)
    elif not isinstance(exc, HttpResponseError) or status is None:
        kind = "Azure SDK error" if isinstance(exc, AzureError) else type(exc).__name__
        err = StoreError(f"cannot {action} {redact(uri)}: {kind}: {detail}")
    elif status == 404 and code == "ContainerNotFound":
        err = container_missing(uri, action, config=config, detail=code)
    elif code == "InvalidBlockList":
        err = TransientError(
            f"cannot {action} {redact(uri)}: its uploaded blocks were discarded before the commit"
            f" (HTTP {status} {code}), most likely by another writer committing the same object;"
            " the save is retried"
        )
    elif code == "Md5Mismatch":
        err = TransientError(
            f"cannot {action} {redact(uri)}: the service received damaged bytes (their MD5 did not"
            f" match, HTTP {status} {code}); nothing was stored and the save is retried"
        )
    elif code in _LEASE_CODES:
        err = StoreError(
            f"cannot {action} {redact(uri)}: the object is locked by a lease (HTTP {status} {code});"
            " break the lease or wait until it expires"
        )
    elif status == 400 and code in _NAME_CODES:
        err = StoreError(
            f"cannot {action} {redact(uri)}: Azure rejected the name (HTTP {status} {code}: {detail})."
            " Container names are 3-63 lower-case letters, digits and single hyphens; blob names"
            " at most 1024 characters"
        )
    else:
        said = f"{code}: {detail}" if code else detail
        err = from_status(status, uri=uri, action=action, detail=said, permission_hint=PERMISSION_HINT)
    return chain(err, exc, secrets)


_TRANSPORT = (ServiceRequestError, ServiceResponseError, ConnectionError, TimeoutError)


def _token_unreachable(exc: ClientAuthenticationError) -> bool:
    """Whether no token came because the identity endpoint could not be reached (azure-identity
    raises ``ClientAuthenticationError`` with the transport error as its cause): a network fault,
    retried like any other, not a permission that was refused."""
    seen: BaseException | None = exc.__cause__ or exc.__context__
    for _ in range(8):  # a short chain; guards against cycles
        if seen is None:
            return False
        if isinstance(seen, _TRANSPORT):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _summary(exc: BaseException, secrets: tuple[str, ...]) -> str:
    """The first line of the SDK's message, scrubbed and shortened."""
    first = (str(exc).strip().splitlines() or [""])[0] or type(exc).__name__
    first = scrub_values(first, secrets)
    return first if len(first) <= 300 else first[:297] + "..."


def container_missing(
    uri: str, action: str, *, config: AzureConfig, detail: str = ""
) -> ContainerNotFoundError:
    """The error for the container of ``uri`` that does not exist (Azure said ``detail``), from
    any operation; it names the storage account, since Azure's containers live in one."""
    loc = parse(uri, want_key=False)
    account = loc.account or config.default_account
    return kit_container_missing(
        uri,
        action=action,
        kind="container",
        name=loc.bucket,
        where=f" in storage account {account!r}" if account else "",
        detail=detail,
        fix=f"create it (az storage container create --name {loc.bucket}), or fix the URI",
    )
