"""The store: five operations on files under the configured root, errors in the project's vocabulary."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from flyte_checkpoint.errors import NotFoundError
from flyte_checkpoint.storage import BlobStore
from flyte_checkpoint.uri import redact

from .config import FolderConfig
from .uris import parse
from .writer import PART_MARK, FolderWriter


class FolderStore(BlobStore):
    """``FolderStore(root=...)``, or ``FolderStore(config)``; settings as :class:`FolderConfig`."""

    part_size = 0  # each write goes to the part file as it comes

    def __init__(self, config: FolderConfig | None = None, **settings: Any) -> None:
        self.config = config if config is not None else FolderConfig.resolve(**settings)
        self.root = Path(self.config.root)

    def _path(self, uri: str, *, want_key: bool = True) -> Path:
        loc = parse(uri, want_key=want_key)
        return self.root / loc.bucket / loc.key

    def open_read(self, uri: str) -> BinaryIO:
        try:
            return open(self._path(uri), "rb")
        except FileNotFoundError:
            raise NotFoundError(f"no object at {redact(uri)}") from None

    def open_write(self, uri: str) -> FolderWriter:
        return FolderWriter(uri, self._path(uri))

    def stat(self, uri: str) -> int | None:
        try:
            return self._path(uri).stat().st_size
        except FileNotFoundError:
            return None

    def delete(self, uri: str) -> None:
        self._path(uri).unlink(missing_ok=True)

    def list(self, prefix: str) -> Iterator[str]:
        loc = parse(prefix, want_key=False)
        bucket = self.root / loc.bucket
        found = (p for p in bucket.rglob("*") if p.is_file() and not p.name.startswith(PART_MARK))
        keys = (p.relative_to(bucket).as_posix() for p in found)
        return iter(sorted(loc.uri(key) for key in keys if key.startswith(loc.key)))


def make_store(**settings: Any) -> FolderStore:
    """The registry's factory: ``settings`` are those given to ``configure_store`` for the URI."""
    return FolderStore(**settings)
