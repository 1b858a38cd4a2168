"""Azure SDK errors -> the core's error vocabulary, with messages that never hold a secret."""

from __future__ import annotations

from collections.abc import Iterable

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
    NotFoundError,
    StoreError,
    TransientError,
)
from flyte_checkpoint.uri import redact

from .locations import parse
from .redaction import scrub

#: HTTP statuses worth retrying: timeout, throttling, server errors.
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_LEASE_CODES = frozenset(
    {"LeaseIdMissing", "LeaseIdMismatch", "LeaseIdMismatchWithBlobOperation", "LeaseAlreadyPresent",
     "LeaseNotPresentWithBlobOperation", "LeaseLost"}
)  # fmt: skip
_NAME_CODES = frozenset({"InvalidResourceName", "OutOfRangeInput"})
_CREDENTIAL_HINT = (
    "Check the credentials (AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_ACCOUNT_NAME with"
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


def _summary(exc: BaseException, secrets: Iterable[str]) -> str:
    """The first line of the SDK's message, scrubbed and shortened."""
    message = getattr(exc, "reason", None) if isinstance(exc, HttpResponseError) else None
    first = (str(exc).strip().splitlines() or [""])[0] or (message or type(exc).__name__)
    first = scrub(first, secrets)
    return first if len(first) <= 300 else first[:297] + "..."


def map_error(
    exc: BaseException,
    uri: str,
    action: str,
    secrets: Iterable[str] = (),
    *,
    account: str | None = None,
) -> CheckpointError:
    """Translate an exception raised while doing ``action`` (a verb phrase: "read") on ``uri``.

    Returns (does not raise) one of NotFoundError, ContainerNotFoundError,
    CheckpointPermissionError, TransientError or StoreError; errors of the project's own
    pass through unchanged. No message holds a key, SAS token or signature.
    """
    if isinstance(exc, CheckpointError):
        return exc
    secrets = tuple(secrets)
    where = redact(uri)
    detail = _summary(exc, secrets)
    if isinstance(exc, (ServiceRequestError, ServiceResponseError, ConnectionError, TimeoutError)):
        return TransientError(
            f"cannot {action} {where}: the connection to Azure Blob Storage failed or timed out"
            f" ({type(exc).__name__}: {detail}); the operation can be retried"
        )
    status, code = status_of(exc), error_code(exc)
    if isinstance(exc, ClientAuthenticationError) and status is None:
        return CheckpointPermissionError(
            f"cannot {action} {where}: no Azure AD token could be obtained ({detail}). {_CREDENTIAL_HINT}."
        )
    if not isinstance(exc, HttpResponseError):
        kind = "Azure SDK error" if isinstance(exc, AzureError) else type(exc).__name__
        return StoreError(f"cannot {action} {where}: {kind}: {detail}")
    label = f"HTTP {status} {code}" if code else f"HTTP {status}"
    if status == 404 and code == "ContainerNotFound":
        return ContainerNotFoundError(_container_missing(uri, action, account))
    if status == 404:
        return NotFoundError(f"no checkpoint object at {where}")
    if status in (401, 403):
        return CheckpointPermissionError(
            f"cannot {action} {where}: Azure refused access ({label}). {_CREDENTIAL_HINT}."
        )
    if status == 412 and code == "ConditionNotMet":
        return TransientError(
            f"cannot {action} {where}: the object changed while it was being read ({label});"
            " reading it again gets the new version"
        )
    if code == "InvalidBlockList":
        return TransientError(
            f"cannot {action} {where}: its uploaded blocks were discarded before the commit"
            f" ({label}), most likely by another writer committing the same object; writing it"
            " again succeeds"
        )
    if code == "Md5Mismatch":
        return TransientError(
            f"cannot {action} {where}: the service received damaged bytes (their MD5 did not"
            f" match, {label}); sending them again can succeed"
        )
    if code in _LEASE_CODES:
        return StoreError(
            f"cannot {action} {where}: the object is locked by a lease ({label}); break the lease"
            " or wait until it expires"
        )
    if status == 400 and code in _NAME_CODES:
        return StoreError(
            f"cannot {action} {where}: Azure rejected the name ({label}: {detail}). Container names"
            " are 3-63 lower-case letters, digits and single hyphens; blob names at most 1024 characters"
        )
    if status is None or status in TRANSIENT_STATUS:
        return TransientError(
            f"cannot {action} {where}: Azure Blob Storage is busy or failed ({label}: {detail});"
            " the operation can be retried"
        )
    return StoreError(f"cannot {action} {where}: {label}: {detail}")


def _container_missing(uri: str, action: str, account: str | None) -> str:
    try:
        loc = parse(uri)
    except CheckpointError:
        return f"cannot {action} {redact(uri)}: its container does not exist"
    account = loc.account or account
    in_account = f" in storage account {account!r}" if account else ""
    return (
        f"cannot {action} {redact(uri)}: the container {loc.container!r} does not exist{in_account}."
        f" Create it (az storage container create --name {loc.container}) or fix the URI"
    )
