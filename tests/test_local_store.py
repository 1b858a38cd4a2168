"""The local store's own behaviour: early write-back, replaced objects freed after the commit,
and the umask read without a race."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flyte_checkpoint.storage.stores import local
from flyte_checkpoint.storage.stores.local import LocalStore
from flyte_checkpoint.util.paths import current_umask


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


def _writer_with_a_copy_check(tmp_path: Path) -> Any:
    """An open writer that copied 4 KiB with ``expect``: its check ran on its own thread."""
    import zlib

    from flyte_checkpoint.storage.blobstore import CopyCheck

    data = os.urandom(4096)
    store, old = LocalStore(), str(tmp_path / "old")
    store.write_bytes(old, data)
    source = store.copy_source(old)
    assert source is not None
    w = store.open_write(str(tmp_path / "new"))
    w.copy(source, 0, len(data), CopyCheck(((len(data), zlib.crc32(data)),)))
    for check in w._checks:
        check.result(timeout=120)
    return w


def test_an_abort_on_the_writers_own_copy_check_thread_removes_its_file(tmp_path):
    """A writer an interrupted save dropped is aborted when collected, and a collection runs
    in whichever thread it happens in: its own check thread too. It joined that thread there
    (RuntimeError: cannot join current thread), and the temporary file stayed (found by
    tests/reliability/test_interrupts.py[file], 1 run in 8 under load)."""
    w = _writer_with_a_copy_check(tmp_path)
    assert w._checker is not None
    w._checker.submit(w.abort).result(timeout=120)  # what __del__ runs, on that thread
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old"]


def test_a_copy_check_does_not_hold_its_writer(tmp_path, monkeypatch):
    """The check keeps the writer's damage record, not the writer: a writer its owner dropped
    goes with the owner's frames (an abort in the owner's thread), not with a check ending
    later on the check thread."""
    submitted: list[Callable[[], None]] = []

    class Recording(local.ThreadPoolExecutor):
        def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
            submitted.append(fn)
            return super().submit(fn, *args, **kwargs)

    monkeypatch.setattr(local, "ThreadPoolExecutor", Recording)
    w = _writer_with_a_copy_check(tmp_path)
    held = [cell.cell_contents for fn in submitted for cell in fn.__closure__ or ()]
    assert submitted and held and not any(x is w for x in held), held
    w.abort()


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


def test_a_listing_prefix_is_text_as_on_a_cloud_store(tmp_path):
    """Proves: ``list("/d/ck")`` gives what S3's or the memory store's listing of that prefix
    gives (``ck/a``, ``ck2/b``, ``ckpt``), not only the folder ``ck``'s files; with a trailing
    slash, only the folder's."""
    from flyte_checkpoint.storage.stores.memory import MemoryStore

    names = ["ck/a", "ck/sub/b", "ck2/c", "ckpt", "other/d", "c"]
    local_store, memory = LocalStore(), MemoryStore()
    mem_root = f"memory://listing-{os.getpid()}/{tmp_path.name}"
    for name in names:
        local_store.write_bytes(f"{tmp_path}/{name}", name.encode())
        memory.write_bytes(f"{mem_root}/{name}", name.encode())
    for prefix in ("ck", "ck/", "ck/s", "c", "other", "nothing/", "ckpt"):
        listed = [u[len(str(tmp_path)) :] for u in local_store.list(f"{tmp_path}/{prefix}")]
        expected = [u[len(mem_root) :] for u in memory.list(f"{mem_root}/{prefix}")]
        assert listed == expected, prefix


# --------------------------------------------------------------------------- durability order


class _RecordingOs:
    """``os`` for the local store's module and the sharded join's: each ``fsync`` is recorded
    with what it made durable (a folder or a file: its device and inode, a file's size then),
    each ``rename``/``replace`` with the file it moved (the same) and where to; then it is done."""

    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    def fsync(self, fd: int) -> None:
        st = os.fstat(fd)
        kind = "folder" if stat.S_ISDIR(st.st_mode) else "file"
        self.events.append(("fsync", kind, (st.st_dev, st.st_ino, st.st_size if kind == "file" else None)))
        os.fsync(fd)

    def replace(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        st = os.lstat(src)
        self.events.append(("rename", (st.st_dev, st.st_ino, st.st_size), os.fspath(dst)))
        os.replace(src, dst)

    def rename(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        self.replace(src, dst)

    def commits(self, target: Path) -> list[list[tuple[object, ...]]]:
        """Per rename onto ``target``: the events that concern it (the fsyncs of the file it
        moved and of ``target``'s folder, the rename), from the previous such rename on."""
        folder = os.stat(target.parent)
        folder_id = (folder.st_dev, folder.st_ino, None)
        moved = {e[1] for e in self.events if e[0] == "rename" and e[2] == str(target)}
        out: list[list[tuple[object, ...]]] = [[]]
        for e in self.events:
            if e[0] == "rename" and e[2] == str(target):
                out[-1].append(e)
            elif e[0] == "fsync" and e[2] in moved | {folder_id}:
                if e[2] == folder_id and out[-1] and out[-1][-1][0] == "rename":
                    out[-1].append(e)
                    out.append([])
                else:
                    out[-1].append(e)
        return [c for c in out if c]


def _commit_by_write_bytes(store: LocalStore, target: Path, data: bytes, tmp: Path) -> None:
    store.write_bytes(str(target), data)


def _commit_by_writer(store: LocalStore, target: Path, data: bytes, tmp: Path) -> None:
    with store.open_write(str(target)) as w:
        for start in range(0, len(data), 64 * 1024):
            w.write(data[start : start + 64 * 1024])


def _commit_by_upload_file(store: LocalStore, target: Path, data: bytes, tmp: Path) -> None:
    src = tmp / "model.pt"
    src.write_bytes(data)
    store.upload_file(src, str(target))


def _commit_by_copies(store: LocalStore, target: Path, data: bytes, tmp: Path) -> None:
    old = str(tmp / "old")
    store.write_bytes(old, data)
    source = store.copy_source(old)
    assert source is not None
    with store.open_write(str(target)) as w:
        w.write(data[:1000])
        w.copy(source, 1000, len(data) - 1000)  # copy_file_range: the kernel's copy


def _commit_by_folder_save(store: LocalStore, target: Path, data: bytes, tmp: Path) -> None:
    import flyte_checkpoint as fc

    folder = tmp / "tree"
    folder.mkdir()
    (folder / "w.bin").write_bytes(data)
    with fc.Checkpoint(str(target)) as cp:
        cp.save_sync(folder)  # the pipeline's writer, committed on the saving thread
        (folder / "w.bin").write_bytes(data[::-1])
        cp.save_background(folder).result(timeout=120)  # a background save's commit


def _commit_by_sharded_join(store: LocalStore, target: Path, data: bytes, tmp: Path) -> None:
    from flyte_checkpoint.sharded.writes import LocalShardedWrites

    writes = LocalShardedWrites(str(target))
    session = {"token": "t0ken", **writes.begin("t0ken")}
    pieces = []
    for rank, part in enumerate((data[:5000], data[5000:])):
        segment = writes.segment(session, rank, 2, "j0iner")
        segment.write(part)
        pieces.append(segment.finish())  # no fsync: a piece is temporary
    writes.commit(session, pieces, b"tail")


COMMITS = {
    "write_bytes": _commit_by_write_bytes,
    "writer": _commit_by_writer,
    "upload_file": _commit_by_upload_file,
    "copies": _commit_by_copies,
    "folder and background saves": _commit_by_folder_save,
    "sharded join": _commit_by_sharded_join,
}


@pytest.mark.parametrize("path", list(COMMITS))
def test_every_commit_syncs_the_file_then_renames_it_then_syncs_the_folder(tmp_path, monkeypatch, path):
    """Proves the durability order of each way the local store commits an object (plain writes,
    writers, upload_file, copies, folder and background saves, the sharded join): the new file
    is fsynced whole, then renamed over the object, then the folder is fsynced, so a power loss
    leaves the previous object or the whole new one. (Without the first fsync the rename can
    reach the disk before the data: an empty or partial object after a crash.)"""
    recorder = _RecordingOs()
    monkeypatch.setattr(local, "os", recorder)  # the sharded join is the local store's too
    store, target = LocalStore(), tmp_path / "store" / "ckpt"
    data = os.urandom(300_000)
    store.write_bytes(str(target), b"the previous object")
    recorder.events.clear()
    COMMITS[path](store, target, data, tmp_path)
    commits = recorder.commits(target)
    assert len(commits) == (2 if path == "folder and background saves" else 1), recorder.events
    folder = os.stat(target.parent)
    for commit in commits:
        moved = commit[-2][1] if len(commit) >= 2 else None
        assert commit == [
            ("fsync", "file", moved),  # the whole file (its size at the rename), once
            ("rename", moved, str(target)),
            ("fsync", "folder", (folder.st_dev, folder.st_ino, None)),
        ], recorder.events
    st = os.stat(target)
    assert commits[-1][1][1] == (st.st_dev, st.st_ino, st.st_size)  # the last rename is the object


# --------------------------------------------------------------------------- permissions

NOBODY = 65534


def _run_in_child(fn: Callable[[], Any], uid: int | None) -> tuple[int, Any]:
    """``fn()`` in a forked child that first becomes ``uid`` (when given; root can); returns the
    child's effective uid and ``fn``'s answer, sent back through a pipe."""
    context = multiprocessing.get_context("fork")
    answers, sender = context.Pipe(duplex=False)

    def child() -> None:
        try:
            if uid is not None:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
            answer = fn()
        except BaseException as exc:  # said, not waited for
            answer = f"the child failed: {exc!r}"
        sender.send((os.geteuid(), answer))

    process = context.Process(target=child)
    process.start()
    try:
        assert answers.poll(120), "the child sent nothing"  # a hang guard only
        return answers.recv()
    finally:
        process.join(120)


#: Folder modes (for everyone: nobody, or the owner when the tests do not run as root).
MODES = {"no read, no search": 0o000, "read, no search": 0o444, "search, no read": 0o333}


@pytest.mark.parametrize("mode", list(MODES))
def test_an_object_in_a_folder_the_task_may_not_search_is_refused_not_absent(mode):
    """Proves: in a folder the task may not search, the local store's ``stat`` and ``copy_source``
    of an object raise CheckpointPermissionError (a PermissionError) naming it, and a load from it
    raises, never "no checkpoint" (a restart from zero); in a folder it may not read, a listing
    that would go through it raises too (it listed nothing: a named run finds its attempts by
    listing), while listings elsewhere in the parent go on. The existing test takes the read bit
    off the file, whose stat still works. The calls run in a forked child; as root (who passes
    every permission check, and CI runs as root) the child first becomes the user nobody."""
    import flyte_checkpoint as fc

    as_root = os.geteuid() == 0
    box = Path(tempfile.mkdtemp(prefix="fcp-shut-"))  # /tmp: pytest's own folder is root's alone
    shut = box / "shut"
    try:
        box.chmod(0o755)
        obj, readable = shut / "ckpt", box / "open" / "ckpt"
        store = LocalStore()
        store.write_bytes(str(obj), b"state")
        store.write_bytes(str(readable), b"state")
        work = box / "work"
        work.mkdir()
        if as_root:
            os.chown(work, NOBODY, NOBODY)
        # what a load imports, imported here: the child may not read the interpreter's folder
        with fc.Checkpoint(str(work / "warm"), str(readable)) as cp:
            assert cp.load_sync().read_bytes() == b"state"
        shut.chmod(MODES[mode])

        def load() -> bytes:
            with fc.Checkpoint(str(work / "dest"), str(obj)) as cp:
                return cp.load_sync().read_bytes()

        def attempt() -> dict[str, tuple[str, ...]]:
            tempfile.tempdir = str(work)
            calls = {
                "stat": lambda: store.stat(str(obj)),
                "copy_source": lambda: store.copy_source(str(obj)) and "found",
                "load": load,
                "list of the folder": lambda: list(store.list(f"{shut}/")),
                "list of the parent": lambda: list(store.list(f"{box}/")),
                "list beside it": lambda: list(store.list(f"{box}/op")),
            }
            out: dict[str, tuple[str, ...]] = {}
            for name, call in calls.items():
                try:
                    out[name] = ("returned", repr(call()))
                except Exception as exc:
                    out[name] = (type(exc).__name__, str(exc), str(isinstance(exc, PermissionError)))
            return out

        uid, outcome = _run_in_child(attempt, NOBODY if as_root else None)
    finally:
        shut.chmod(0o755)
        shutil.rmtree(box)
    assert uid == (NOBODY if as_root else os.geteuid())
    denied = ("CheckpointPermissionError", "{}: check the file's and its folder's permissions", "True")
    no_read = (denied[0], denied[1].format(f"permission denied to read {obj}"), denied[2])
    no_list = (denied[0], denied[1].format(f"permission denied to list {shut}"), denied[2])
    search = mode != "no read, no search" and mode != "read, no search"
    listed = mode == "read, no search"
    assert outcome == {
        "stat": ("returned", "5") if search else no_read,
        "copy_source": ("returned", "'found'") if search else no_read,
        "load": ("returned", "b'state'") if search else no_read,
        "list of the folder": ("returned", repr([str(obj)])) if listed else no_list,
        "list of the parent": ("returned", repr(sorted([str(obj), str(readable)]))) if listed else no_list,
        "list beside it": ("returned", repr([str(readable)])),
    }, outcome
