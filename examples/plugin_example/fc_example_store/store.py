"""The store: five operations, errors in the project's vocabulary, atomic writes."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from flyte_checkpoint.errors import NotFoundError
from flyte_checkpoint.storage.blobstore import BlobStore, BlobWriter


class FolderStore(BlobStore):
    def __init__(self) -> None:
        self.root = Path(os.environ.get("FOLDER_STORE_ROOT", "/tmp/folder-store"))

    def _path(self, uri: str) -> Path:
        return self.root / uri.split("://", 1)[1]

    def open_read(self, uri):
        try:
            return open(self._path(uri), "rb")
        except FileNotFoundError:
            raise NotFoundError(f"no object at {uri}") from None

    def open_write(self, uri):
        return _Writer(uri, self._path(uri))

    def stat(self, uri):
        try:
            return self._path(uri).stat().st_size
        except FileNotFoundError:
            return None

    def delete(self, uri):
        self._path(uri).unlink(missing_ok=True)

    def list(self, prefix):
        base = self._path(prefix)
        top = base if base.is_dir() else base.parent
        found = [p for p in top.rglob("*") if p.is_file() and ".part-" not in p.name]
        uris = ("folder://" + str(p.relative_to(self.root)) for p in found)
        return iter(sorted(u for u in uris if u.startswith(prefix)))


class _Writer(BlobWriter):
    """Writes to a hidden part file; the rename in _commit makes the object appear whole."""

    def __init__(self, uri: str, target: Path) -> None:
        super().__init__(uri)
        target.parent.mkdir(parents=True, exist_ok=True)
        self._target = target
        self._part = target.with_name(f".part-{uuid.uuid4().hex}-{target.name}")
        self._file = open(self._part, "wb")  # noqa: SIM115

    def _write(self, data):
        self._file.write(data)

    def _commit(self):
        self._file.close()
        os.replace(self._part, self._target)

    def _abort(self):
        self._file.close()
        self._part.unlink(missing_ok=True)
