"""The kit's download_to_file: the target appears whole or not at all."""

from __future__ import annotations

import io
import os
from typing import BinaryIO, cast

import pytest

from flyte_checkpoint.errors import CorruptCheckpointError, TransientError
from flyte_checkpoint.storage.blobstore import COPY_CHUNK
from flyte_checkpoint.storage.kit.files import download_to_file


class Failing(io.RawIOBase):
    """Gives ``data``, then raises ``error`` where a verifying reader would: at its end."""

    def __init__(self, data: bytes, error: Exception) -> None:
        self._data, self._error, self._pos = data, error, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if self._pos >= len(self._data):
            raise self._error
        n = min(len(buf), len(self._data) - self._pos)
        buf[:n] = self._data[self._pos : self._pos + n]
        self._pos += n
        return n


class ReadOnly:
    """A stream with ``read`` and no ``readinto``."""

    def __init__(self, data: bytes) -> None:
        self._f = io.BytesIO(data)

    def read(self, n: int = -1) -> bytes:
        return self._f.read(n)


def test_the_whole_object_lands_in_the_file_and_nothing_else_is_left(tmp_path):
    data = os.urandom(2 * COPY_CHUNK + 5)
    target = tmp_path / "ckpt"
    target.write_bytes(b"old")
    assert download_to_file(io.BytesIO(data), target) == len(data)
    assert target.read_bytes() == data and os.listdir(tmp_path) == ["ckpt"]
    assert (
        download_to_file(cast(BinaryIO, ReadOnly(data[:100])), target) == 100
        and target.read_bytes() == data[:100]
    )


@pytest.mark.parametrize("error", [TransientError("cut"), CorruptCheckpointError("checksum mismatch")])
def test_a_failure_at_any_point_leaves_the_target_as_it_was(tmp_path, error):
    target = tmp_path / "ckpt"
    target.write_bytes(b"previous")
    with pytest.raises(type(error)):
        download_to_file(Failing(os.urandom(COPY_CHUNK + 1), error), target)
    assert target.read_bytes() == b"previous" and os.listdir(tmp_path) == ["ckpt"]
    with pytest.raises(type(error)):
        download_to_file(Failing(b"", error), tmp_path / "new")
    assert os.listdir(tmp_path) == ["ckpt"]


def test_the_file_gets_the_usual_permissions(tmp_path):
    old = os.umask(0o027)
    try:
        download_to_file(io.BytesIO(b"x"), tmp_path / "f")
    finally:
        os.umask(old)
    assert (tmp_path / "f").stat().st_mode & 0o777 == 0o640
