"""Writes on the kit's PartWriter: parts written into a hidden file, renamed over the object at
the commit, so the object appears whole; an abort removes the hidden file."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flyte_checkpoint.storage.kit import PartWriter

from .errors import map_error

if TYPE_CHECKING:
    from .store import FolderStore

PART_MARK = ".part-"  # names of objects being written: list() leaves them out
#: The part size never grows: a file takes any number of parts.
UNBOUNDED = 2**62


class FolderWriter(PartWriter):
    """One object's write. The kit buffers parts and runs ``_send_part`` from the store's pool
    (at most ``max_concurrency`` at once); an object of at most one part goes in one
    ``_put_whole`` at the commit."""

    def __init__(self, store: FolderStore, uri: str, target: Path) -> None:
        config = store.config
        super().__init__(
            uri,
            part_size=config.part_size,
            max_concurrency=config.max_concurrency,
            pool=store.pool,
            double_every=UNBOUNDED,
            max_parts=UNBOUNDED,
            max_part_size=config.part_size,
        )
        self._target = target
        self._hidden = target.with_name(f"{PART_MARK}{uuid.uuid4().hex}-{target.name}")
        self._fd: int | None = None

    # -- the kit's hooks ---------------------------------------------------------------

    def _put_whole(self, data: bytes | bytearray) -> None:
        try:
            self._start()
            self._send_part(1, data)
            self._complete([], None)
        except BaseException:
            self._cancel()  # the kit cancels only what _start began for a multipart write
            raise

    def _start(self) -> None:
        try:
            self._target.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self._hidden, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as exc:
            raise map_error(exc, self.uri, "write") from exc

    def _send_part(self, number: int, data: bytes | bytearray) -> Any:
        assert self._fd is not None
        try:
            os.pwrite(self._fd, data, (number - 1) * self.part_size)  # parts have one size
        except OSError as exc:
            raise map_error(exc, self.uri, "write") from exc
        return len(data)

    def _complete(self, results: list[Any], tail: memoryview | None) -> None:
        assert self._fd is not None
        try:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
            os.replace(self._hidden, self._target)  # the commit: atomic on POSIX
        except OSError as exc:
            raise map_error(exc, self.uri, "write") from exc

    def _cancel(self) -> None:  # safe to repeat, and harmless after a commit
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
        self._hidden.unlink(missing_ok=True)
