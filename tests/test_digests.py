"""The content hash of the index (format/digests.py): BLAKE3 written, SHA-256 still read."""

from __future__ import annotations

import hashlib
import os
import sys
import threading

import pytest
from blake3 import blake3

from flyte_checkpoint.format import digests


def test_a_file_is_hashed_across_reads_with_the_algorithm_asked(tmp_path):
    data = os.urandom(3 * digests._CHUNK + 12345)  # several reads into the thread's buffer
    path = tmp_path / "f"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert digests.of_file(fd, len(data)) == blake3(data).hexdigest()
        assert digests.of_file(fd, len(data), "sha256") == hashlib.sha256(data).hexdigest()
        assert digests.of_file(fd, 1000) == blake3(data[:1000]).hexdigest()
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0  # read by offset: the descriptor's own stays
        assert digests.of_file(fd, len(data) + 1) is None  # the file ends early
        stop = threading.Event()
        stop.set()
        assert digests.of_file(fd, len(data), stop=stop) is None
    finally:
        os.close(fd)
    assert digests.of_bytes(data[:99]) == blake3(data[:99]).digest()
    assert digests.of_bytes(data[:99], "sha256") == hashlib.sha256(data[:99]).digest()
    with pytest.raises(ValueError, match="unknown content hash 'md5'"):
        digests.new("md5")


def test_blake3_is_imported_on_first_use_not_with_the_library():
    import subprocess

    code = "import flyte_checkpoint, sys; print('blake3' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
