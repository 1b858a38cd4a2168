"""The folder store's one setting, read from arguments, configure_store or the environment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flyte_checkpoint.storage.kit import TEXT, StoreConfig, setting


@dataclass(frozen=True, repr=False)
class FolderConfig(StoreConfig):
    """``FolderConfig.resolve(root=...)``; ``root`` is also ``FLYTE_CHECKPOINT_FOLDER_ROOT``."""

    BACKEND: ClassVar[str] = "folder"

    root: str = setting(TEXT, "/tmp/folder-store", doc="The folder that holds every NAME/KEY file.")
