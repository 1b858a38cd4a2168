"""The errors every cloud backend raises for the same HTTP answers and transport failures.

A backend's ``errors.py`` recognises its SDK's exceptions and hands the status, or the broken
connection, to these functions, so a 403 or a 503 means the same on every cloud. The core's
retry policy retries exactly the :class:`~flyte_checkpoint.errors.TransientError` ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from ...errors import (
    CheckpointError,
    CheckpointPermissionError,
    ContainerNotFoundError,
    NotFoundError,
    StoreError,
    TransientError,
)
from ...uri import redact
from .redaction import scrub, scrub_values

#: Answers worth retrying: a timeout, throttling and the server errors that mean "not now".
#: (501 Not Implemented and 505 HTTP Version Not Supported will not change on a retry.)
E = TypeVar("E", bound=CheckpointError)

TRANSIENT_STATUS: frozenset[int] = frozenset({408, 429, 500, 502, 503, 504})


def from_status(
    status: int, *, uri: str, action: str, detail: str = "", permission_hint: str
) -> CheckpointError:
    """The error for the HTTP answer ``status`` to ``action`` (a verb: "read", "write", "list")
    on ``uri``; ``detail`` (the service's code or message) is scrubbed and quoted.

    401 and 403 are :class:`CheckpointPermissionError` ending with ``permission_hint`` (which
    credentials to check); 404 is :class:`NotFoundError` (a caller that knows the bucket is
    missing raises ContainerNotFoundError instead); 412 (the object changed under a pinned read)
    is :class:`~flyte_checkpoint.errors.ObjectReplacedError` and :data:`TRANSIENT_STATUS`
    :class:`TransientError` (both retried); anything else is
    :class:`StoreError`. Only a NotFoundError on the source object loads as "no checkpoint".
    """
    where = redact(uri)
    detail = scrub(detail).strip()
    said = f"HTTP {status}" + (f": {detail}" if detail else "")
    if status in (401, 403):
        return CheckpointPermissionError(f"permission denied to {action} {where} ({said}): {permission_hint}")
    if status == 404:
        return NotFoundError(f"no object at {where} ({said})")
    if status == 412:
        from ..pinned import replaced

        return replaced(uri, said)
    if status in TRANSIENT_STATUS:
        return TransientError(
            f"the service could not {action} {where} for now ({said}): it is busy or failing;"
            " the operation is retried, and if it keeps failing check the service's status"
        )
    return StoreError(f"cannot {action} {where} ({said})")


def transport_failed(exc: BaseException, *, uri: str, action: str, endpoint: str | None) -> TransientError:
    """The error for a connection that was refused, reset, timed out or ended early while trying
    to ``action`` ``uri`` through ``endpoint`` (``None``: the cloud's own).

    The exception's text is scrubbed into the message and ``exc`` becomes its ``__cause__``
    unless that text held a secret (see :func:`chain`).
    """
    text = f"{type(exc).__name__}: {exc}"
    through = redact(endpoint) if endpoint else "the service"
    err = TransientError(
        f"the connection to {through} failed while trying to {action} {redact(uri)} ({text});"
        " the operation is retried, and if it keeps failing check the network and endpoint_url"
    )
    return chain(err, exc, ())


def chain(err: E, cause: BaseException, secrets: Iterable[str]) -> E:
    """``err`` with its message scrubbed of ``secrets`` (a config's ``secrets()``) and of every
    registered pattern and URI credential, and ``cause`` as its ``__cause__`` unless the text of
    ``cause`` or of an exception chained to it held a secret. Then the cause is dropped and
    context suppressed, so no traceback prints it. Returns ``err`` (``raise chain(...)``).
    """
    values = tuple(secrets)
    err.args = tuple(scrub_values(a, values) if isinstance(a, str) else a for a in err.args)
    if _holds_secret(cause, values):
        err.__cause__ = None
        err.__suppress_context__ = True
    else:
        err.__cause__ = cause
    return err


def _holds_secret(exc: BaseException | None, values: tuple[str, ...], depth: int = 0) -> bool:
    if exc is None or depth > 8:  # a chain that deep is a loop or not worth reading
        return False
    for text in (str(exc), repr(exc.args)):
        if scrub_values(text, values) != text:
            return True
    return _holds_secret(exc.__cause__, values, depth + 1) or _holds_secret(
        exc.__context__, values, depth + 1
    )


def container_missing(
    uri: str, *, action: str, kind: str, name: str, fix: str, where: str = "", detail: str = ""
) -> ContainerNotFoundError:
    """The error for the bucket (``kind``: "bucket", or Azure's "container") ``name`` of ``uri``
    that does not exist, found while trying to ``action`` it, in the same words on every cloud:
    ``where`` places the bucket (" at http://minio:9000"), ``detail`` is what the service said,
    ``fix`` how to create it or what to correct. A caller raises it from every operation
    (never "no object": a load from a missing bucket must not look like no checkpoint yet).
    """
    said = f" ({scrub(detail).strip()})" if detail else ""
    return ContainerNotFoundError(
        f"cannot {action} {redact(uri)}: the {kind} {name!r} does not exist{where}{said}: {fix}"
    )


__all__ = ["TRANSIENT_STATUS", "chain", "container_missing", "from_status", "transport_failed"]
