"""The project's errors for what an FTP server answers (each reply code, at every request)."""

from __future__ import annotations

import ftplib

from flyte_checkpoint.errors import (
    CheckpointError,
    CheckpointPermissionError,
    ContainerNotFoundError,
    NotFoundError,
    StoreError,
    TransientError,
)
from flyte_checkpoint.storage.kit import container_missing as kit_container_missing
from flyte_checkpoint.storage.kit import transport_failed
from flyte_checkpoint.uri import redact

from .config import FtpConfig

#: Replies that say "try again": service closing (421), data connection failed or cut (425,
#: 426), file busy (450), local error in processing (451).
TRANSIENT_CODES = frozenset({"421", "425", "426", "450", "451"})
PERMISSION_HINT = "check FLYTE_CHECKPOINT_FTPSTORE_USER and _PASSWORD and the account's rights"


def reply_code(exc: BaseException) -> str:
    """The three-digit code of an ftplib error (``""`` when it carries none)."""
    text = str(exc.args[0]) if exc.args else ""
    return text[:3] if text[:3].isdigit() else ""


def is_absent(exc: BaseException) -> bool:
    """A 550 that says the path does not exist (pyftpdlib: the OS's ``No such file``, or
    ``Not a directory`` when a part of the path is a file), or pyftpdlib's ``501 No such
    directory`` to an ``MLSD`` of a missing folder."""
    text = str(exc).lower()
    code = reply_code(exc)
    if code == "501":
        return "no such directory" in text
    return code == "550" and ("no such file" in text or "not a directory" in text)


def map_error(exc: BaseException, uri: str, action: str, endpoint: str | None = None) -> CheckpointError:
    """The error for ``exc`` raised while trying to ``action`` ``uri``.

    Transport failures (resets, timeouts, an early end) and 4xx replies are TransientError;
    530 and a refused 550 are CheckpointPermissionError; a 550 for a missing path is
    NotFoundError (the caller decides whether the bucket is what is missing); anything else is
    StoreError.
    """
    if isinstance(exc, CheckpointError):
        return exc
    if not isinstance(exc, ftplib.Error):  # OSError, EOFError, socket timeouts
        return transport_failed(exc, uri=uri, action=action, endpoint=endpoint)
    code = reply_code(exc)
    reply = str(exc).strip()
    if code in TRANSIENT_CODES or isinstance(exc, ftplib.error_temp):
        return TransientError(f"cannot {action} {redact(uri)}: the server answered {reply!r}; retry later")
    if code in ("530", "532") or (code in ("550", "553") and "privilege" in reply.lower()):
        return CheckpointPermissionError(
            f"permission denied to {action} {redact(uri)} ({reply!r}): {PERMISSION_HINT}"
        )
    if is_absent(exc):
        return NotFoundError(f"no object at {redact(uri)}")
    return StoreError(f"cannot {action} {redact(uri)}: the server answered {reply!r}")


def container_missing(uri: str, action: str, *, config: FtpConfig) -> ContainerNotFoundError:
    """The error for the BUCKET folder of ``uri`` that the server does not have, from any
    operation (raised, never taken for a missing object), in the kit's sentence."""
    bucket = uri.partition("://")[2].partition("/")[0]
    return kit_container_missing(
        uri,
        action=action,
        kind="bucket",
        name=bucket,
        where=f" on the FTP server {config.endpoint}",
        fix=f"create the top-level folder /{bucket}, or fix the URI or the endpoint"
        " (FLYTE_CHECKPOINT_FTPSTORE_ENDPOINT)",
    )
