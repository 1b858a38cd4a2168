"""Writes go to a hidden part file; the rename at commit makes the object appear whole."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from flyte_checkpoint.storage import BlobWriter

PART_MARK = ".part-"  # names of objects being written: list() leaves them out


class FolderWriter(BlobWriter):
    def __init__(self, uri: str, target: Path) -> None:
        super().__init__(uri)
        target.parent.mkdir(parents=True, exist_ok=True)
        self._target = target
        self._part = target.with_name(f"{PART_MARK}{uuid.uuid4().hex}-{target.name}")
        self._file = open(self._part, "wb")  # noqa: SIM115 - closed by _commit or _abort

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        self._file.write(data)  # written at once: nothing of the caller's buffer is kept

    def _commit(self) -> None:
        self._file.close()
        os.replace(self._part, self._target)

    def _abort(self) -> None:  # safe to repeat, and harmless after a commit
        self._file.close()
        self._part.unlink(missing_ok=True)
