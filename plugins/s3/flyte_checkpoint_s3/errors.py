"""botocore's exceptions onto the fault table every cloud shares (CONTRIBUTING.md), through the kit.

Every message names the (redacted) URI and the action, says what to do, and is scrubbed of
the configured credentials. botocore is imported inside :func:`map_error` only.
"""

from __future__ import annotations

import socket

from flyte_checkpoint.errors import (
    CheckpointError,
    CheckpointPermissionError,
    ConfigurationError,
    ContainerNotFoundError,
    CorruptCheckpointError,
    NotFoundError,
    StoreError,
    TransientError,
)
from flyte_checkpoint.storage.kit import TRANSIENT_STATUS, chain, from_status, transport_failed
from flyte_checkpoint.storage.kit.errors import container_missing as kit_container_missing
from flyte_checkpoint.uri import redact

from .config import S3Config

#: S3 codes that mean "not now": throttling, server trouble, a request cut short.
TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "ProvisionedThroughputExceededException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "EC2ThrottledException",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "InternalError",
        "ServiceUnavailable",
        "IncompleteBody",
        "OperationAborted",
    }
)
#: The body S3 received does not match the checksum sent with it: damaged in transit, nothing stored.
DAMAGED_CODES = frozenset({"BadDigest", "XAmzContentSHA256Mismatch", "InvalidDigest"})
PERMISSION_CODES = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "AccountProblem",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "TokenRefreshRequired",
        "InvalidToken",
        "InvalidSecurity",
        "UnauthorizedAccess",
        "403",
        "Forbidden",
    }
)
KEY_MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})

#: What a 403 on S3 may mean, and what to check.
PERMISSION_HINT = (
    "check that the credentials are valid and allow this action on the bucket; S3 also answers 403"
    " for a missing object when the credentials lack s3:ListBucket on the bucket"
)


def error_code(exc: BaseException | None) -> str | None:
    """The S3 error code of a botocore ``ClientError`` (or of the one a project error was chained from)."""
    for candidate in (exc, getattr(exc, "__cause__", None)):
        response = getattr(candidate, "response", None)
        if isinstance(response, dict):
            return str((response.get("Error") or {}).get("Code") or "") or None
    return None


def container_missing(uri: str, action: str, *, config: S3Config, detail: str = "") -> ContainerNotFoundError:
    """The error for the bucket of ``uri`` that does not exist (S3 said ``detail``), from any
    operation; it names the endpoint, since a wrong endpoint is the usual cause."""
    bucket = uri.partition("://")[2].partition("/")[0]
    return kit_container_missing(
        uri,
        action=action,
        kind="bucket",
        name=bucket,
        where=f" at {config.describe_endpoint()}",
        detail=detail,
        fix=f"create it (aws s3 mb s3://{bucket}), or fix the bucket name or the endpoint"
        " (endpoint_url, FLYTE_AWS_ENDPOINT, AWS_ENDPOINT_URL_S3)",
    )


def map_error(exc: BaseException, uri: str, action: str, *, config: S3Config) -> CheckpointError:
    """The project's error for ``exc``, raised while trying to ``action`` (a verb phrase: "read",
    "upload part 3 of") ``uri``, with ``exc`` as its cause unless its text held a secret.

    A :class:`CheckpointError` is returned unchanged. Raise the result as it is (``raise
    map_error(...)``, not ``from exc``): :func:`~flyte_checkpoint.storage.kit.chain` decides the
    cause.
    """
    if isinstance(exc, CheckpointError):
        return exc
    return chain(_map(exc, uri, action, config), exc, config.secrets())


def _map(exc: BaseException, uri: str, action: str, config: S3Config) -> CheckpointError:
    from botocore import exceptions as bx

    where = redact(uri)
    if isinstance(exc, bx.ClientError):
        return _map_client_error(exc, uri, action, config)
    if isinstance(exc, bx.CredentialRetrievalError):
        return TransientError(
            f"cannot {action} {where}: the AWS credential provider failed ({exc}); retried, and if it"
            " keeps failing check the container or instance role, or give keys"
        )
    if isinstance(exc, (bx.NoCredentialsError, bx.PartialCredentialsError)):
        return CheckpointPermissionError(
            f"cannot {action} {where}: no usable AWS credentials ({type(exc).__name__}). Set"
            " AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or FLYTE_AWS_ACCESS_KEY_ID/"
            "FLYTE_AWS_SECRET_ACCESS_KEY, run with an instance or pod role, or set"
            " FLYTE_CHECKPOINT_S3_ANONYMOUS=true for a public bucket"
        )
    if isinstance(exc, bx.FlexibleChecksumError):
        return CorruptCheckpointError(f"{where} failed its checksum while trying to {action} it: {exc}")
    if isinstance(exc, bx.ProfileNotFound):
        return ConfigurationError(
            f"cannot {action} {where}: {exc}: check AWS_PROFILE or the profile setting"
            f" ({config.sources.get('profile', 'default')})"
        )
    transport = (
        bx.ConnectTimeoutError,
        bx.EndpointConnectionError,
        bx.ReadTimeoutError,
        bx.ConnectionClosedError,
        bx.ResponseStreamingError,
        bx.IncompleteReadError,
        bx.HTTPClientError,
        socket.timeout,
        TimeoutError,
        ConnectionError,
    )
    if isinstance(exc, transport) or _is_urllib3_transient(exc):
        return transport_failed(exc, uri=uri, action=action, endpoint=config.describe_endpoint())
    return StoreError(f"cannot {action} {where}: {type(exc).__name__}: {exc}")


def _is_urllib3_transient(exc: BaseException) -> bool:
    from urllib3 import exceptions as ux

    return isinstance(exc, (ux.ProtocolError, ux.ReadTimeoutError, ux.IncompleteRead, ux.NewConnectionError))


def _map_client_error(exc: BaseException, uri: str, action: str, config: S3Config) -> CheckpointError:
    response = getattr(exc, "response", None) or {}
    error = response.get("Error") or {}
    code = str(error.get("Code") or "")
    message = str(error.get("Message") or "").strip()
    status = int((response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)
    named = (
        code if code and code != str(status) else ""
    )  # a HEAD's answer has no body: its "code" is the status
    detail = f"{named}: {message}" if named and message else named or message
    where = redact(uri)

    if code == "NoSuchBucket":
        return container_missing(uri, action, config=config, detail=detail)
    if code in KEY_MISSING_CODES or (status == 404 and not code):
        return NotFoundError(f"no object at {where} ({detail or 'HTTP 404'})")
    if code == "NoSuchUpload":
        return TransientError(
            f"cannot {action} {where}: its multipart upload was completed or aborted by someone else"
            f" (another save of this URI, a lifecycle rule) ({detail}); the save is retried"
        )
    if code == "EntityTooSmall":
        return StoreError(
            f"cannot {action} {where}: a part is smaller than the server accepts ({detail}); raise"
            " part_size (FLYTE_CHECKPOINT_S3_PART_SIZE): AWS S3 needs at least 5MiB"
        )
    if code in DAMAGED_CODES:
        return TransientError(
            f"the bytes sent to {action} {where} were damaged in transit ({detail}): S3 stored"
            " nothing; the operation is retried"
        )
    if code in PERMISSION_CODES or status in (401, 403):
        if status in (401, 403):
            return from_status(status, uri=uri, action=action, detail=detail, permission_hint=PERMISSION_HINT)
        return CheckpointPermissionError(
            f"permission denied to {action} {where} ({detail}): {PERMISSION_HINT}"
        )
    if code in TRANSIENT_CODES and status not in TRANSIENT_STATUS:  # sent with a 400
        return TransientError(f"S3 could not {action} {where} for now ({detail}); the operation is retried")
    return from_status(status, uri=uri, action=action, detail=detail, permission_hint=PERMISSION_HINT)


__all__ = ["PERMISSION_HINT", "container_missing", "error_code", "map_error"]
