"""Google SDK, ``requests`` and HTTP failures onto the project's errors (CONTRIBUTING's fault table).

HTTP answers go through :func:`flyte_checkpoint.storage.kit.from_status`, broken connections
through :func:`~flyte_checkpoint.storage.kit.transport_failed`, so a 403 or a reset means the
same here as on every cloud. Messages are scrubbed of GCS's secrets (:mod:`.redaction`); an SDK
exception whose text held one is not chained as the cause.
"""

from __future__ import annotations

import http.client
import re
from typing import TYPE_CHECKING

from flyte_checkpoint.errors import (
    CheckpointError,
    CheckpointPermissionError,
    ContainerNotFoundError,
    CorruptCheckpointError,
    StoreError,
    TransientError,
)
from flyte_checkpoint.storage.kit import TRANSIENT_STATUS, chain, from_status, scrub, transport_failed
from flyte_checkpoint.storage.kit.errors import container_missing as kit_container_missing
from flyte_checkpoint.uri import redact

from . import redaction

if TYPE_CHECKING:
    from .config import GCSConfig

redaction.install()  # before any message is scrubbed

#: What a 403 on GCS may mean, and what to check.
PERMISSION_HINT = (
    "check that the credentials in use (GOOGLE_APPLICATION_CREDENTIALS, gcloud auth"
    " application-default login, or the VM's service account) may read and write objects in"
    " this bucket (for an emulator, set STORAGE_EMULATOR_HOST)"
)

_CHECKSUM_WORDS = re.compile(r"crc32c|md5|checksum|hash", re.I)

#: Exceptions (by qualified class name, so that no SDK is imported here) of a connection that
#: was refused, reset, timed out or ended early.
_NETWORK = frozenset(
    {
        "requests.exceptions.ConnectionError",
        "requests.exceptions.Timeout",
        "requests.exceptions.ChunkedEncodingError",
        "urllib3.exceptions.ProtocolError",
        "urllib3.exceptions.TimeoutError",
        "urllib3.exceptions.IncompleteRead",
        "urllib3.exceptions.PoolError",
        "google.auth.exceptions.TransportError",
    }
)


def map_error(exc: BaseException, uri: str, action: str, *, config: GCSConfig | None) -> CheckpointError:
    """The project's error for ``exc``, raised while trying to ``action`` (a verb) ``uri``.

    A project error passes through unchanged. A 404 is a NotFoundError: a caller that knows the
    bucket is missing raises :func:`container_missing` instead. Anything unknown is a StoreError.
    """
    if isinstance(exc, CheckpointError):
        return exc
    where = redact(uri)
    text = scrub(f"{type(exc).__name__}: {exc}")
    names = _names(exc)
    status = status_of(exc)
    err: CheckpointError
    if any(n.endswith(".DataCorruption") for n in names):
        err = CorruptCheckpointError(
            f"the data of {where} does not match its stored checksum ({text}): the stored object"
            " is damaged; restore an older checkpoint or save again"
        )
    elif "google.auth.exceptions.DefaultCredentialsError" in names:
        err = CheckpointPermissionError(
            f"no Google Cloud credentials found to {action} {where}: set"
            " GOOGLE_APPLICATION_CREDENTIALS to a key file, run 'gcloud auth application-default"
            " login', run on Google Cloud with a service account, or set STORAGE_EMULATOR_HOST"
            " for an emulator"
        )
    elif "google.auth.exceptions.RefreshError" in names and getattr(exc, "retryable", False):
        err = TransientError(
            f"the Google credentials could not be refreshed to {action} {where} ({text}); the"
            " operation is retried"
        )
    elif "google.auth.exceptions.RefreshError" in names:
        err = CheckpointPermissionError(
            f"the Google credentials were refused while trying to {action} {where} ({text}): "
            + PERMISSION_HINT
        )
    elif status == 400 and _CHECKSUM_WORDS.search(detail_of(exc)):
        err = TransientError(
            f"the bytes sent to {where} arrived damaged and Google Cloud Storage refused them"
            f" (HTTP 400: {scrub(detail_of(exc))}); nothing was stored, and the save is retried"
        )
    elif status is not None:
        err = from_status(
            status, uri=uri, action=action, detail=detail_of(exc), permission_hint=PERMISSION_HINT
        )
    elif _is_network(exc):
        endpoint = config.endpoint_url if config is not None else None
        err = transport_failed(exc, uri=uri, action=action, endpoint=endpoint)
    else:
        err = StoreError(f"cannot {action} {where}: {text}")
    return chain(err, exc, config.secrets() if config is not None else ())


def is_transient(exc: BaseException) -> bool:
    """Whether the SDK may retry ``exc`` within one request: a transient status or a broken
    connection (the transient rows of the fault table). The predicate of :mod:`.client`'s retries."""
    status = status_of(exc)
    if status is not None:
        return status in TRANSIENT_STATUS
    return _is_network(exc)


def container_missing(
    uri: str, action: str, *, config: GCSConfig | None, detail: str = ""
) -> ContainerNotFoundError:
    """The error for the bucket of ``uri`` that does not exist, from any operation (GCS answers
    404 alike for a missing object and a missing bucket: the caller has told them apart)."""
    bucket = uri.partition("://")[2].partition("/")[0]
    return kit_container_missing(
        uri,
        action=action,
        kind="bucket",
        name=bucket,
        detail=detail,
        fix=f"create it (gcloud storage buckets create gs://{bucket}), or fix the URI",
    )


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an SDK exception carries (an api_core error's ``code``, an
    ``InvalidResponse``'s response; a RetryError's last cause), else ``None``."""
    code = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(code, int):
        return code
    if "google.api_core.exceptions.GoogleAPICallError" in _names(exc):
        code = getattr(exc, "code", None)
        if isinstance(code, int):
            return code
    cause = getattr(exc, "cause", None)  # google.api_core RetryError
    if isinstance(cause, BaseException) and cause is not exc:
        return status_of(cause)
    return None


def detail_of(exc: BaseException) -> str:
    """What the service said: the JSON error message, else the body's start, else the SDK's."""
    response = getattr(exc, "response", None)
    if response is not None and hasattr(response, "text"):
        try:
            message = response.json().get("error", {}).get("message")
            if message:
                return str(message)
        except Exception:  # not JSON: the text below
            pass
        try:
            return str(response.text)[:300]
        except Exception:
            return ""
    message = getattr(exc, "message", None)
    if isinstance(message, str):
        return message
    cause = getattr(exc, "cause", None)
    return detail_of(cause) if isinstance(cause, BaseException) and cause is not exc else ""


def _names(exc: BaseException) -> set[str]:
    return {f"{k.__module__}.{k.__name__}" for k in type(exc).__mro__}


def _is_network(exc: BaseException) -> bool:
    if isinstance(exc, (ConnectionError, TimeoutError, http.client.IncompleteRead)):
        return True
    if _names(exc) & _NETWORK:
        return True
    cause = getattr(exc, "cause", None)  # a RetryError whose time ran out on a broken connection
    return isinstance(cause, BaseException) and cause is not exc and _is_network(cause)
