"""The project's errors for what the file system says (a cloud backend maps its SDK's here)."""

from __future__ import annotations

from flyte_checkpoint.errors import (
    CheckpointError,
    CheckpointPermissionError,
    ContainerNotFoundError,
    NotFoundError,
    StoreError,
)
from flyte_checkpoint.storage.kit import Location
from flyte_checkpoint.uri import redact


def map_error(exc: BaseException, uri: str, action: str) -> CheckpointError:
    """The error for ``exc`` while trying to ``action`` ``uri``: a missing file is NotFoundError
    (only that one loads as "no checkpoint"), a refused one CheckpointPermissionError."""
    if isinstance(exc, FileNotFoundError):
        return NotFoundError(f"no object at {redact(uri)}")
    if isinstance(exc, PermissionError):
        return CheckpointPermissionError(
            f"permission denied to {action} {redact(uri)}: check the rights on the store's root folder"
        )
    return StoreError(f"cannot {action} {redact(uri)}: {exc}")


def missing_bucket(loc: Location, uri: str) -> ContainerNotFoundError:
    """A NAME folder that does not exist: raised, never taken for a missing object."""
    return ContainerNotFoundError(
        f"the bucket {loc.bucket!r} of {redact(uri)} does not exist: create the folder NAME under the"
        " store's root (FLYTE_CHECKPOINT_FOLDER_ROOT), or fix the URI"
    )
