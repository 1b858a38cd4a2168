"""The project's errors for what the file system says (a cloud backend maps its SDK's here)."""

from __future__ import annotations

from flyte_checkpoint.errors import (
    CheckpointError,
    CheckpointPermissionError,
    ContainerNotFoundError,
    NotFoundError,
    StoreError,
)
from flyte_checkpoint.storage.kit import container_missing as kit_container_missing
from flyte_checkpoint.uri import redact

from .config import FolderConfig


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


def container_missing(uri: str, action: str, *, config: FolderConfig) -> ContainerNotFoundError:
    """The error for the NAME folder of ``uri`` that does not exist, from any operation (raised,
    never taken for a missing object), in the kit's sentence, as the cloud plugins say it."""
    name = uri.partition("://")[2].partition("/")[0]
    return kit_container_missing(
        uri,
        action=action,
        kind="bucket",
        name=name,
        where=f" under {config.root}",
        fix=f"create it (mkdir {config.root}/{name}), or fix the URI or the store's root"
        " (root, FLYTE_CHECKPOINT_FOLDER_ROOT)",
    )
