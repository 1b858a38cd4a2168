"""botocore's errors translated into flyte-checkpoint's vocabulary.

Every message names the (redacted) URI and the action, says what to do, and is scrubbed of
the configured credentials. botocore is imported lazily, inside :func:`map_error`, so that
this module can be imported without the SDK.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable

from flyte_checkpoint.errors import (
    CheckpointError,
    CheckpointPermissionError,
    ContainerNotFoundError,
    CorruptCheckpointError,
    NotFoundError,
    StoreError,
    TransientError,
)
from flyte_checkpoint.uri import redact

#: S3 error codes worth retrying (throttling, server trouble, a dropped request).
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
        # The body we sent did not match its checksum: damaged in transit, so send again.
        "BadDigest",
        "XAmzContentSHA256Mismatch",
        # The object changed between two ranged GETs of one read: read it again.
        "PreconditionFailed",
    }
)
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
BUCKET_MISSING_CODES = frozenset({"NoSuchBucket"})
KEY_MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret value replaced by ``<redacted>``."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "<redacted>")
    return text


def error_code(exc: BaseException | None) -> str | None:
    """The S3 error code of a botocore ``ClientError`` (or of the one a project error wraps)."""
    for candidate in (exc, getattr(exc, "__cause__", None)):
        response = getattr(candidate, "response", None)
        if isinstance(response, dict):
            return str((response.get("Error") or {}).get("Code") or "") or None
    return None


def map_error(
    exc: BaseException,
    uri: str,
    action: str,
    *,
    bucket: str | None = None,
    endpoint: str = "the S3 endpoint",
    secrets: Iterable[str] = (),
) -> CheckpointError:
    """The project error for an exception raised while doing ``action`` on ``uri``.

    ``action`` is a phrase such as ``"read"`` or ``"upload part 3 of"``. Errors that are
    already the project's own are returned unchanged. The original is chained by the caller
    (``raise map_error(...) from exc``).
    """
    if isinstance(exc, CheckpointError):
        return exc
    secrets = tuple(secrets)
    where = redact(uri)
    err = _map(exc, where, action, bucket, endpoint)
    err.args = (scrub(str(err), secrets),)
    return err


def _map(exc: BaseException, where: str, action: str, bucket: str | None, endpoint: str) -> CheckpointError:
    from botocore import exceptions as bx

    if isinstance(exc, bx.ClientError):
        return _map_client_error(exc, where, action, bucket)
    if isinstance(exc, (bx.NoCredentialsError, bx.PartialCredentialsError, bx.CredentialRetrievalError)):
        return CheckpointPermissionError(
            f"cannot {action} {where}: no usable AWS credentials ({type(exc).__name__}). Set"
            " AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or FLYTE_AWS_ACCESS_KEY_ID/"
            "FLYTE_AWS_SECRET_ACCESS_KEY, or run with an instance or pod role"
        )
    if isinstance(exc, bx.FlexibleChecksumError):
        return CorruptCheckpointError(f"{where} failed its checksum during {action}: {exc}")
    if isinstance(exc, (bx.ConnectTimeoutError, bx.EndpointConnectionError)):
        return TransientError(
            f"cannot {action} {where}: could not connect to {endpoint} ({type(exc).__name__});"
            " check the endpoint and the network (retried)"
        )
    if isinstance(
        exc,
        (
            bx.ReadTimeoutError,
            bx.ConnectionClosedError,
            bx.ResponseStreamingError,
            bx.IncompleteReadError,
            bx.HTTPClientError,
        ),
    ):
        return TransientError(
            f"cannot {action} {where}: the connection to {endpoint} failed mid-request"
            f" ({type(exc).__name__}); retried"
        )
    if isinstance(exc, bx.ProfileNotFound):
        return StoreError(f"cannot {action} {where}: {exc}. Check AWS_PROFILE or the profile argument")
    if isinstance(exc, bx.NoRegionError):
        return StoreError(
            f"cannot {action} {where}: no AWS region set. Set AWS_REGION or the region argument"
        )
    if isinstance(exc, (socket.timeout, TimeoutError, ConnectionError)):
        return TransientError(f"cannot {action} {where}: {type(exc).__name__}: {exc} (retried)")
    if _is_urllib3_transient(exc):
        return TransientError(
            f"cannot {action} {where}: the connection failed ({type(exc).__name__}); retried"
        )
    return StoreError(f"cannot {action} {where}: {type(exc).__name__}: {exc}")


def _is_urllib3_transient(exc: BaseException) -> bool:
    try:
        from urllib3 import exceptions as ux
    except ImportError:  # pragma: no cover - botocore depends on urllib3
        return False
    return isinstance(exc, (ux.ProtocolError, ux.ReadTimeoutError, ux.IncompleteRead, ux.NewConnectionError))


def _map_client_error(exc: BaseException, where: str, action: str, bucket: str | None) -> CheckpointError:
    response = getattr(exc, "response", None) or {}
    error = response.get("Error") or {}
    code = str(error.get("Code") or "")
    message = str(error.get("Message") or "").strip()
    status = int((response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)
    detail = f"S3 said {code or status}" + (f": {message}" if message else "")
    the_bucket = f"bucket {bucket!r}" if bucket else "the bucket"

    if code in BUCKET_MISSING_CODES:
        return ContainerNotFoundError(
            f"cannot {action} {where}: {the_bucket} does not exist ({detail}). Create it, or fix the"
            " bucket name in the URI or the endpoint (FLYTE_AWS_ENDPOINT / AWS_ENDPOINT_URL_S3)"
        )
    if code in KEY_MISSING_CODES or (status == 404 and not code):
        return NotFoundError(f"no checkpoint object at {where} ({detail})")
    if code == "NoSuchUpload":
        return StoreError(
            f"cannot {action} {where}: the multipart upload was aborted by someone else, for example"
            f" a lifecycle rule or another process ({detail}); save again"
        )
    if code == "EntityTooSmall":
        return StoreError(
            f"cannot {action} {where}: a part is smaller than the server accepts ({detail}); raise"
            " part_size / FLYTE_CHECKPOINT_S3_PART_SIZE (AWS S3 needs at least 5 MiB)"
        )
    if code == "InvalidRange":
        return StoreError(f"cannot {action} {where}: the byte range is outside the object ({detail})")
    if code in PERMISSION_CODES or status == 403:
        return CheckpointPermissionError(
            f"cannot {action} {where}: access denied ({detail}). Check that the credentials are"
            f" valid and allow this action on {the_bucket}; S3 also answers 403 for a missing"
            " object when s3:ListBucket is not granted"
        )
    if code in TRANSIENT_CODES or status == 429 or status >= 500:
        if code == "PreconditionFailed":
            return TransientError(f"{where} changed while it was being read ({detail}); read it again")
        return TransientError(f"cannot {action} {where}: {detail} (temporary; retried)")
    return StoreError(f"cannot {action} {where}: {detail}")
