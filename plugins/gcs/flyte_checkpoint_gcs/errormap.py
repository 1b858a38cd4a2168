"""Translate Google SDK, ``requests`` and HTTP failures into flyte-checkpoint's errors.

Every message names the URI (redacted) and says what to do. Text taken from an SDK
exception is scrubbed of resumable-session ids, tokens and signatures first, and an
exception whose text needed scrubbing is not chained as the cause (so tracebacks do
not print it either).
"""

from __future__ import annotations

import http.client
import re
from typing import NoReturn

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

CREDENTIALS_HINT = (
    "set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, run "
    "'gcloud auth application-default login', or run on Google Cloud with a service account "
    "(for an emulator, set STORAGE_EMULATOR_HOST)"
)

_SECRETS = [
    (re.compile(r"(upload_id=)[^&\s'\"]+", re.I), r"\1<redacted>"),
    (re.compile(r"(access_token=)[^&\s'\"]+", re.I), r"\1<redacted>"),
    (re.compile(r"(X-Goog-(?:Signature|Credential)=)[^&\s'\"]+", re.I), r"\1<redacted>"),
    (re.compile(r"(Bearer\s+)[A-Za-z0-9._\-~+/=]+", re.I), r"\1<redacted>"),
    (re.compile(r"ya29\.[A-Za-z0-9._\-]+"), "<redacted-token>"),
    (
        re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
        "<redacted-key>",
    ),
]

_CHECKSUM_WORDS = re.compile(r"crc32c|md5|checksum|hash", re.I)
_TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}


def scrub(text: str) -> str:
    """Remove session ids, bearer tokens, signatures and private keys from ``text``."""
    for pattern, repl in _SECRETS:
        text = pattern.sub(repl, text)
    return text


def from_status(status: int, detail: str, uri: str, action: str) -> CheckpointError:
    """The error for an HTTP answer ``status`` to ``action`` on ``uri``.

    A 404 becomes :class:`NotFoundError`; callers that know it means a missing bucket
    turn it into :class:`ContainerNotFoundError` themselves.
    """
    where = redact(uri)
    detail = scrub(detail).strip()
    said = f" (HTTP {status}{': ' + detail if detail else ''})"
    if status in (401, 403):
        return CheckpointPermissionError(
            f"permission denied to {action} {where}{said}: check that the credentials in use "
            "(GOOGLE_APPLICATION_CREDENTIALS, gcloud application-default login or the VM's "
            "service account) may read and write objects in this bucket"
        )
    if status == 404:
        return NotFoundError(f"no checkpoint object at {where}{said}")
    if status in _TRANSIENT_STATUS:
        return TransientError(
            f"Google Cloud Storage could not {action} {where} for now{said}; it is worth retrying"
        )
    if status == 400 and _CHECKSUM_WORDS.search(detail):
        return CorruptCheckpointError(
            f"the data sent to {where} arrived damaged and Google Cloud Storage refused it{said};"
            " nothing was stored. Retry the save"
        )
    return StoreError(f"cannot {action} {where}{said}")


def missing_bucket(bucket: str, uri: str) -> ContainerNotFoundError:
    """The error for a bucket that does not exist."""
    return ContainerNotFoundError(
        f"the bucket {bucket!r} of {redact(uri)} does not exist: create it "
        f"(gcloud storage buckets create gs://{bucket}) or fix the URI"
    )


def map_error(exc: BaseException, uri: str, action: str) -> BaseException:
    """The flyte-checkpoint error for ``exc``, raised while trying to ``action`` ``uri``.

    Errors of the project's own pass through unchanged; anything unknown becomes
    :class:`StoreError`.
    """
    if isinstance(exc, CheckpointError):
        return exc
    where = redact(uri)
    text = scrub(f"{type(exc).__name__}: {exc}")
    status = _status_of(exc)
    if _is_checksum_failure(exc):
        return CorruptCheckpointError(
            f"the data of {where} failed its integrity check ({text}); it is damaged. "
            "Retry the operation; if it persists the stored object is corrupt"
        )
    if _is_credentials_missing(exc):
        return CheckpointPermissionError(
            f"no Google Cloud credentials found to {action} {where}: " + CREDENTIALS_HINT
        )
    if _is_refresh_failure(exc):
        if getattr(exc, "retryable", False):
            return TransientError(
                f"could not refresh the Google credentials to {action} {where} ({text}); it is worth retrying"
            )
        return CheckpointPermissionError(
            f"the Google credentials were refused while trying to {action} {where} ({text}): "
            + CREDENTIALS_HINT
        )
    if status is not None:
        return from_status(status, _detail_of(exc), uri, action)
    if _is_transient_network(exc):
        return TransientError(
            f"the connection to Google Cloud Storage failed while trying to {action} {where} "
            f"({text}); it is worth retrying. If it persists, check the network and the endpoint"
        )
    return StoreError(f"cannot {action} {where}: {text}")


def reraise(exc: BaseException, uri: str, action: str) -> NoReturn:
    """Raise :func:`map_error` of ``exc``, chained to ``exc`` unless that would leak a secret."""
    err = map_error(exc, uri, action)
    if err is exc:
        raise err
    if scrub(str(exc)) == str(exc):
        raise err from exc
    raise err from None


def _status_of(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    code = getattr(response, "status_code", None)
    if isinstance(code, int):
        return code
    code = getattr(exc, "code", None)  # google.api_core.exceptions.GoogleAPICallError
    if isinstance(code, int) and _is_api_core_error(exc):
        return code
    cause = getattr(exc, "cause", None)  # google.api_core RetryError: the last failure
    if isinstance(cause, BaseException) and cause is not exc:
        return _status_of(cause)
    return None


def _detail_of(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if response is not None and hasattr(response, "text"):
        try:
            body = response.json()
            message = body.get("error", {}).get("message")
            if message:
                return str(message)
        except Exception:
            pass
        try:
            return str(response.text)[:300]
        except Exception:
            return ""
    message = getattr(exc, "message", None)
    if isinstance(message, str):
        return message
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return _detail_of(cause)
    return ""


def _names(exc: BaseException) -> set[str]:
    return {f"{k.__module__}.{k.__name__}" for k in type(exc).__mro__}


def _is_api_core_error(exc: BaseException) -> bool:
    return "google.api_core.exceptions.GoogleAPICallError" in _names(exc)


def _is_checksum_failure(exc: BaseException) -> bool:
    return any(n.endswith(".DataCorruption") for n in _names(exc))


def _is_credentials_missing(exc: BaseException) -> bool:
    return "google.auth.exceptions.DefaultCredentialsError" in _names(exc)


def _is_refresh_failure(exc: BaseException) -> bool:
    return "google.auth.exceptions.RefreshError" in _names(exc)


def _is_transient_network(exc: BaseException) -> bool:
    if isinstance(exc, (ConnectionError, TimeoutError, http.client.IncompleteRead)):
        return True
    names = _names(exc)
    transient = (
        "requests.exceptions.ConnectionError",
        "requests.exceptions.Timeout",
        "requests.exceptions.ChunkedEncodingError",
        "urllib3.exceptions.ProtocolError",
        "urllib3.exceptions.TimeoutError",
        "urllib3.exceptions.IncompleteRead",
        "google.auth.exceptions.TransportError",
        "google.api_core.exceptions.RetryError",
    )
    return any(n in names for n in transient)
