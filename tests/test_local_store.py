"""The local store's own behaviour: early write-back, and the umask read without a race."""

from __future__ import annotations

import hashlib
import os

from flyte_checkpoint.paths import current_umask
from flyte_checkpoint.storage.stores import local
from flyte_checkpoint.storage.stores.local import LocalStore


def test_large_writes_start_write_back_early_and_commit_whole(tmp_path, monkeypatch):
    calls = []
    real = local._quiet_datasync
    monkeypatch.setattr(local, "_quiet_datasync", lambda fd: (calls.append(fd), real(fd)))
    monkeypatch.setattr(local, "_FLUSH_EVERY", 4 * 1024 * 1024)
    chunk = os.urandom(1024 * 1024)
    target = tmp_path / "big"
    with LocalStore().open_write(str(target)) as w:
        for _ in range(20):
            w.write(chunk)
    assert calls, "no early write-back was started"
    assert hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(chunk * 20).digest()


def test_large_copies_start_write_back_early_too(tmp_path, monkeypatch):
    """On ext4 a copy is as many dirty pages as a write: an incremental save made of copies
    must not leave all of them to the commit's fsync."""
    calls = []
    real = local._quiet_datasync
    monkeypatch.setattr(local, "_quiet_datasync", lambda fd: (calls.append(fd), real(fd)))
    monkeypatch.setattr(local, "_FLUSH_EVERY", 4 * 1024 * 1024)
    data = os.urandom(12 * 1024 * 1024)
    store, old = LocalStore(), str(tmp_path / "old")
    store.write_bytes(old, data)
    source = store.copy_source(old)
    calls.clear()  # the old object's own writes started some
    target = tmp_path / "new"
    with store.open_write(str(target)) as w:
        w.write(b"x" * 100)  # under the threshold: only the copies can start the write-back
        for start in range(0, len(data), 1024 * 1024):
            w.copy(source, start, 1024 * 1024)
        assert calls, "no early write-back was started by the copies"
    assert target.read_bytes() == b"x" * 100 + data


def test_abort_during_write_back_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "_FLUSH_EVERY", 1024 * 1024)
    w = LocalStore().open_write(str(tmp_path / "gone"))
    for _ in range(8):
        w.write(os.urandom(512 * 1024))
    w.abort()
    assert list(tmp_path.iterdir()) == []


def test_umask_is_read_without_changing_it():
    old = os.umask(0o027)
    try:
        assert current_umask() == 0o027
        assert os.umask(0o027) == 0o027  # unchanged by the read
    finally:
        os.umask(old)


def test_committed_file_gets_the_umask_mode(tmp_path):
    old = os.umask(0o077)
    try:
        LocalStore().write_bytes(str(tmp_path / "m"), b"x")
    finally:
        os.umask(old)
    assert (tmp_path / "m").stat().st_mode & 0o777 == 0o600
