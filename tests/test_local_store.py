"""The local store's own behaviour: early write-back, replaced objects freed after the commit,
and the umask read without a race."""

from __future__ import annotations

import hashlib
import os
import threading

import pytest

from flyte_checkpoint.paths import current_umask
from flyte_checkpoint.storage.stores import local
from flyte_checkpoint.storage.stores.local import LocalStore


@pytest.fixture(autouse=True)
def _nothing_left_held():
    """After each test: no replaced object still held (a stale descriptor number in
    ``local._held`` would be closed by the next forked child, whatever it then was)."""
    yield
    local.wait_for_freeing()
    assert local._held == set()


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


def _held_by_us(name: str) -> list[int]:
    """Our descriptors of a file called ``name`` that is no longer in any folder."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.endswith(f"/{name} (deleted)"):
            out.append(int(fd))
    return out


def _save_twice_holding(tmp_path, monkeypatch):
    """Save b"first", then b"second" over it, with the replaced file's close held back until
    the returned event is set; also returns the object's path and, for each replaced file,
    the name of the thread that closes it and the file's link count then."""
    monkeypatch.setattr(local, "_FREE_BEHIND", 1)
    entered, let_go, seen = threading.Event(), threading.Event(), []
    real = local._release

    def held_release(fd):
        seen.append((threading.current_thread().name, os.fstat(fd).st_nlink))
        entered.set()
        let_go.wait(60)  # the test sets it; the timeout only ends a failing run
        real(fd)

    monkeypatch.setattr(local, "_release", held_release)
    target = tmp_path / "obj"
    store = LocalStore()
    store.write_bytes(str(target), b"first")
    assert not seen, "nothing was replaced by the first save"
    store.write_bytes(str(target), b"second")  # returns while the old file is still held
    assert entered.wait(60)
    return target, seen, let_go


def test_a_replaced_large_object_is_freed_after_the_commit_returns(tmp_path, monkeypatch):
    """The rename of a commit does not wait for the replaced object's space to be freed: a
    thread closes the last descriptor of it after the save has returned."""
    target, seen, let_go = _save_twice_holding(tmp_path, monkeypatch)
    assert target.read_bytes() == b"second"
    assert seen == [(local.FREEING_THREAD, 0)]  # off the committing thread, and out of the folder
    assert len(_held_by_us("obj")) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["obj"]
    let_go.set()
    local.wait_for_freeing()
    assert _held_by_us("obj") == []


def test_small_replaced_objects_are_freed_at_once(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(local, "_release", calls.append)
    store, target = LocalStore(), str(tmp_path / "obj")
    store.write_bytes(target, b"a" * 1000)
    store.write_bytes(target, b"b" * 1000)
    assert calls == []
    assert _held_by_us("obj") == []


def test_a_failed_rename_lets_the_held_object_go(tmp_path, monkeypatch):
    """The rename fails (a folder is where the object goes): the error says so, and the
    descriptor held of the file that was to be replaced is closed all the same."""
    monkeypatch.setattr(local, "_FREE_BEHIND", 1)
    released = []
    real = local._release
    monkeypatch.setattr(local, "_release", lambda fd: (released.append(fd), real(fd)))
    target = tmp_path / "obj"
    target.write_bytes(b"old")

    def no_rename(new, old):
        raise PermissionError(13, "denied")

    monkeypatch.setattr(local.os, "replace", no_rename)
    with pytest.raises(PermissionError, match="permission denied to write"):
        LocalStore().write_bytes(str(target), b"new")
    local.wait_for_freeing()
    assert len(released) == 1
    assert target.read_bytes() == b"old"


def test_where_no_thread_can_start_the_replaced_object_is_freed_at_once(tmp_path, monkeypatch):
    """At interpreter exit (a background save drained by atexit) no thread starts: the save
    still succeeds, and frees the replaced object itself."""
    monkeypatch.setattr(local, "_FREE_BEHIND", 1)
    real = local._release
    released = []
    monkeypatch.setattr(local, "_release", lambda fd: (released.append(threading.current_thread()), real(fd)))

    def no_thread(self):
        raise RuntimeError("can't create new thread at interpreter shutdown")

    target = tmp_path / "obj"
    target.write_bytes(b"old")
    monkeypatch.setattr(threading.Thread, "start", no_thread)
    LocalStore().write_bytes(str(target), b"new")
    assert target.read_bytes() == b"new"
    assert released == [threading.current_thread()]
    assert _held_by_us("obj") == []


def test_a_symbolic_link_replaced_is_not_held(tmp_path, monkeypatch):
    """The rename replaces the link, not the file it points to: nothing to free behind."""
    monkeypatch.setattr(local, "_FREE_BEHIND", 1)
    calls = []
    monkeypatch.setattr(local, "_release", calls.append)
    (tmp_path / "elsewhere").write_bytes(b"x" * 100)
    (tmp_path / "obj").symlink_to(tmp_path / "elsewhere")
    LocalStore().write_bytes(str(tmp_path / "obj"), b"new")
    assert calls == []
    assert (tmp_path / "obj").read_bytes() == b"new" and not (tmp_path / "obj").is_symlink()
    assert (tmp_path / "elsewhere").read_bytes() == b"x" * 100


def test_nothing_is_held_where_an_open_file_cannot_be_renamed_over(tmp_path, monkeypatch):
    """On Windows a rename over an open file fails: there the replaced object is not held."""
    monkeypatch.setattr(local, "_FREE_BEHIND", 1)
    monkeypatch.setattr(local, "_CAN_HOLD", False)
    calls = []
    monkeypatch.setattr(local, "_release", calls.append)
    store, target = LocalStore(), str(tmp_path / "obj")
    store.write_bytes(target, b"old")
    store.write_bytes(target, b"new")
    assert calls == [] and _held_by_us("obj") == []


def test_a_child_forked_while_an_object_is_held_does_not_keep_it(tmp_path, monkeypatch):
    """A data-loader worker forked just after a save must not keep the replaced object's disk
    space for its whole life: the child closes what the parent still held."""
    _, _, let_go = _save_twice_holding(tmp_path, monkeypatch)
    try:
        assert len(_held_by_us("obj")) == 1
        pid = os.fork()
        if pid == 0:  # the child: report whether it still holds the replaced file
            os._exit(3 if _held_by_us("obj") else 0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "the forked child kept the replaced object"
        assert len(_held_by_us("obj")) == 1  # the parent's thread still holds its own
    finally:
        let_go.set()
        local.wait_for_freeing()
    assert _held_by_us("obj") == [] and local._held == set()
