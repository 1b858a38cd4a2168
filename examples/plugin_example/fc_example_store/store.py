"""The store: ``folder://NAME/KEY`` is the file ``ROOT/NAME/KEY``; NAME, a folder that must
exist, plays the part of a cloud's bucket. Built on the kit as a cloud backend is."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from flyte_checkpoint.storage import BlobStore
from flyte_checkpoint.storage.kit import Location, StorePool

from .config import FolderConfig
from .errors import container_missing, map_error
from .reader import FolderReader
from .uris import parse
from .writer import PART_MARK, FolderWriter


class FolderStore(BlobStore):
    """``FolderStore(root=...)``, or ``FolderStore(config)``; settings as :class:`FolderConfig`.

    One instance serves every thread of a process; its pool (``flyte-checkpoint-folder-N``) writes
    parts and reads ranges, and a forked child builds its own.
    """

    supports_ranges = True

    def __init__(self, config: FolderConfig | None = None, **settings: Any) -> None:
        self.config = config if config is not None else FolderConfig.resolve(**settings)
        self.root = Path(self.config.root)
        self.part_size: int = self.config.part_size
        self.read_range_size: int = self.config.read_range_size
        self.pool = StorePool("folder", self.config.max_concurrency + self.config.read_concurrency)

    def _path(self, uri: str, action: str, *, want_key: bool = True) -> tuple[Location, Path]:
        """The URI's location and file; ContainerNotFoundError when its NAME folder is missing
        (found while trying to ``action`` the URI)."""
        loc = parse(uri, want_key=want_key)
        bucket = self.root / loc.bucket
        if not bucket.is_dir():
            raise container_missing(uri, action, config=self.config)
        return loc, bucket / loc.key

    def open_read(self, uri: str) -> BinaryIO:
        _, path = self._path(uri, "read")
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise map_error(exc, uri, "read") from exc
        return FolderReader(self, uri, fd)  # type: ignore[return-value]

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        _, path = self._path(uri, "read")
        try:
            with open(path, "rb") as f:
                return os.pread(f.fileno(), max(0, length), start)
        except OSError as exc:
            raise map_error(exc, uri, "read") from exc

    def open_write(self, uri: str) -> FolderWriter:
        _, path = self._path(uri, "write")
        return FolderWriter(self, uri, path)

    def upload_file(self, path: str | os.PathLike[str], uri: str) -> None:
        """A local file's parts read (``pread``) and written from the pool; refused
        (``SourceChangedError``, nothing committed) if the file changes meanwhile."""
        self.open_write(uri).upload_file(path)

    def stat(self, uri: str) -> int | None:
        _, path = self._path(uri, "stat")
        try:
            st = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise map_error(exc, uri, "stat") from exc
        return None if stat.S_ISDIR(st.st_mode) else st.st_size  # a folder is no object

    def delete(self, uri: str) -> None:
        _, path = self._path(uri, "delete")
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise map_error(exc, uri, "delete") from exc

    def list(self, prefix: str) -> Iterator[str]:
        loc, _ = self._path(prefix, "list", want_key=False)
        bucket = self.root / loc.bucket
        found = (p for p in bucket.rglob("*") if p.is_file() and not p.name.startswith(PART_MARK))
        keys = (p.relative_to(bucket).as_posix() for p in found)
        return iter(sorted(loc.uri(key) for key in keys if key.startswith(loc.key)))

    def close(self) -> None:
        self.pool.close()


def make_store(**settings: Any) -> FolderStore:
    """The registry's factory: ``settings`` are those given to ``configure_store`` for the URI."""
    return FolderStore(**settings)
