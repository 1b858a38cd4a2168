"""Reads on the kit's RangedReader: ranges read ahead from the pool, from the file opened first
(a replace meanwhile never mixes two versions: the open file is the version read)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from flyte_checkpoint.storage.kit import RangedReader

from .errors import map_error

if TYPE_CHECKING:
    from .store import FolderStore


class FolderReader(RangedReader):
    """A stream of one object; closing it closes the file."""

    def __init__(self, store: FolderStore, uri: str, fd: int) -> None:
        self._fd = fd
        config = store.config

        def fetch(offset: int, view: memoryview) -> int:
            return os.preadv(fd, [view], offset)

        super().__init__(
            uri,
            size=os.fstat(fd).st_size,
            fetch=fetch,
            range_size=config.read_range_size,
            concurrency=config.read_concurrency,
            pool=store.pool,
            on_error=lambda exc: map_error(exc, uri, "read"),
        )

    def close(self) -> None:
        try:
            super().close()
        finally:
            fd, self._fd = self._fd, -1
            if fd >= 0:
                os.close(fd)
