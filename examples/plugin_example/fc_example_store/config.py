"""The folder store's settings, read from arguments, configure_store or the environment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flyte_checkpoint.storage.kit import COUNT, SIZE, TEXT, MiB, StoreConfig, setting


@dataclass(frozen=True, repr=False)
class FolderConfig(StoreConfig):
    """``FolderConfig.resolve(root=..., part_size=...)``; each setting is also
    ``FLYTE_CHECKPOINT_FOLDER_<SETTING>`` (``FLYTE_CHECKPOINT_FOLDER_ROOT``...)."""

    BACKEND: ClassVar[str] = "folder"

    root: str = setting(TEXT, "/tmp/folder-store", doc="The folder that holds every NAME folder.")
    part_size: int = setting(SIZE, 8 * MiB, doc="Bytes a writer holds before it writes them.", minimum=1)
    max_concurrency: int = setting(COUNT, 4, doc="Parts one writer writes at the same time.", minimum=1)
    read_range_size: int = setting(SIZE, 8 * MiB, doc="Bytes of one ranged read.", minimum=1)
    read_concurrency: int = setting(COUNT, 4, doc="Ranges one reader reads ahead.", minimum=1)
