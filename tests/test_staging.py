"""Background saves' staging folders, the library's working files, and what each leaves behind
(issue 32, items 7, 8, 9, 10, 14).

- Item 7: a folder save (synchronous, background, incremental, sharded) leaves out every
  working file of this library (:mod:`flyte_checkpoint.util.workfiles`), wherever in the folder:
  above all a background save's staging copy of a file inside the folder, made there when the
  temp folder is on another file system than the data (here ``/dev/shm``, a tmpfs, when it is
  one; else a ``st_dev`` told apart by the test).
- Item 8: a staging folder is kept while its process lives, in any PID namespace: decided by
  its lock (:mod:`flyte_checkpoint.util.heldfolders`), not by its PID.
- Item 9: ``save_background`` of a link stores what ``save_sync`` stores.
- Item 10: a SIGKILLed process's local root, with its staging copy, is removed by the next
  background save (and the next local root) made in that temp folder.
- Item 14: a background save cancelled by ``close()``'s timeout reports that it was cancelled.

Every child process reports (prints) that it reached its point before it is killed or
checked; uploads are held by a spy-store hook at a call the code makes. Nothing depends on the
machine's speed: :data:`HANG` only turns a hang into a failure.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import NotFoundError, OperationCancelledError, SaveTimeoutError
from flyte_checkpoint.lifecycle import snapshot
from flyte_checkpoint.lifecycle.snapshot import PREFIX
from flyte_checkpoint.sharded import save_sharded
from flyte_checkpoint.util import heldfolders, workfiles
from tests.reliability import test_leaks
from tests.reliability.gates import HANG
from tests.spystore import spying

ROOT = Path(__file__).resolve().parents[1]
#: A fixture: ``tempfile.gettempdir()`` is a folder of the test's own.
private_tmp = test_leaks.private_tmp


class Hold:
    """A spy-store hook that holds the first ``op`` call until :attr:`release` is set."""

    def __init__(self, op: str) -> None:
        self.op = op
        self.reached = threading.Event()
        self.release = threading.Event()
        self._used = False
        self._lock = threading.Lock()

    def hook(self, op: str, uri: str) -> None:
        if op != self.op:
            return
        with self._lock:
            if self._used:
                return
            self._used = True
        self.reached.set()
        assert self.release.wait(HANG), f"the held {op} was not released within {HANG}s"

    def wait_reached(self) -> None:
        assert self.reached.wait(HANG), f"no {self.op} within {HANG}s"


def dest_for(target: str, tmp_path: Path, label: str) -> str:
    return (
        str(tmp_path / "dest" / label)
        if target == "file"
        else f"memory://staging/{os.urandom(4).hex()}/{label}"
    )


def loaded_tree(uri: str, scratch: Path) -> dict[str, bytes]:
    """name -> bytes of every file the checkpoint at ``uri`` restores (links as their target)."""
    with fc.Checkpoint(str(scratch / "never-written"), uri) as cp:
        path = cp.load_sync()
        assert path is not None and path.is_dir(), path
        return {
            str(p.relative_to(path)): p.read_bytes()
            for p in sorted(path.rglob("*"))
            if p.is_file() and not p.is_symlink()
        }


def loaded_bytes(uri: str, scratch: Path) -> bytes | None:
    with fc.Checkpoint(str(scratch / "never-written"), uri) as cp:
        path = cp.load_sync()
        return None if path is None else path.read_bytes()


@pytest.fixture
def temp_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The temp folder on another file system than ``tmp_path`` (the data): a folder in
    ``/dev/shm`` where that is a tmpfs apart, else one whose ``st_dev`` the snapshot is told
    differs. Background saves of files in ``tmp_path`` then stage beside them."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK) and shm.stat().st_dev != tmp_path.stat().st_dev:
        temp = Path(tempfile.mkdtemp(prefix="fcp-staging-test-", dir=shm))
    else:
        temp = tmp_path / "other-fs-tmp"
        temp.mkdir()
        real_stat = os.stat

        def stat(path, *args, **kwargs):  # type: ignore[no-untyped-def]
            st = real_stat(path, *args, **kwargs)
            if os.fspath(path).startswith(str(temp)):
                return os.stat_result((st.st_mode, st.st_ino, st.st_dev + 1, *tuple(st)[3:]))
            return st

        monkeypatch.setattr(snapshot.os, "stat", stat)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    try:
        yield temp
    finally:
        import shutil

        shutil.rmtree(temp, ignore_errors=True)


def staging_in(folder: Path) -> list[Path]:
    return sorted(folder.glob(PREFIX + "*"))


# -- item 7: what a folder save leaves out ---------------------------------------------------------


@pytest.mark.parametrize("target", ["file", "memory"])
@pytest.mark.parametrize("how", ["sync", "background"])
def test_a_folder_save_leaves_out_a_background_saves_staging_copy_inside_it(
    target: str, how: str, tmp_path: Path, temp_elsewhere: Path
):
    """Proves (item 7): with the temp folder on another file system, ``save_background`` of
    ``run/model.pt`` stages beside it, in ``run/``; a folder save of ``run/`` made while that
    upload is held stores ``run/`` as the user sees it: no second copy of the weights."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "model.pt").write_bytes(b"weights" * 1000)
    (run / "step.txt").write_text("7")
    hold = Hold("upload_file")
    with spying(target, hold.hook) as spy:
        model_dest = spy.uri_for(dest_for(target, tmp_path, "model"))
        cp = fc.Checkpoint(model_dest)
        handle = cp.save_background(run / "model.pt")
        hold.wait_reached()
        assert len(staging_in(run)) == 1, "the staging copy is not beside the file"
        folder_dest = dest_for(target, tmp_path, "folder")
        with fc.Checkpoint(folder_dest) as other:
            if how == "sync":
                other.save_sync(run)
            else:
                other.save_background(run).result(timeout=HANG)
        hold.release.set()
        handle.result(timeout=HANG)
        cp.close()
    assert loaded_tree(folder_dest, tmp_path) == {"model.pt": b"weights" * 1000, "step.txt": b"7"}
    assert staging_in(run) == []


def every_working_file(folder: Path, holds: list[heldfolders.HeldFolder]) -> list[str]:
    """One of each working file the library makes, made in ``folder`` (real names: from the
    modules that make them, or their patterns); the paths made. The staging folder is held
    (as another process's live one would be) by a folder added to ``holds``."""
    from flyte_checkpoint.sharded.writes import coordination_prefix
    from flyte_checkpoint.storage.stores.local import _temp_prefix

    held = heldfolders.HeldFolder()
    holds.append(held)
    held.make(str(folder), snapshot._name)
    assert held.path is not None
    Path(held.path, "model.pt").write_bytes(b"staged copy")
    made = [held.path]
    made.append(str(folder / f"{_temp_prefix(folder / 'ckpt')}{'ab12' * 3}"))  # a local writer's
    made.append(coordination_prefix(str(folder / "ckpt")).rstrip("/"))  # a local sharded save's
    made.append(str(folder / f".model.pt{workfiles.TMP}{'cd34' * 3}"))  # a download's
    for prefix in (workfiles.RESTORE, workfiles.LINKS, workfiles.PULL):
        made.append(tempfile.mkdtemp(prefix=prefix, dir=folder))
    made.append(str(folder / f"{workfiles.ROOT}{'ef56' * 3}"))  # a temp folder inside the data
    for path in made[1:]:
        p = Path(path)
        if p.suffix == ".shard" or workfiles.ROOT in p.name or p.is_dir():
            p.mkdir(exist_ok=True)
            (p / "piece").write_bytes(b"piece")
        else:
            p.write_bytes(b"temporary")
    return made


@pytest.mark.parametrize("target", ["file", "memory"])
def test_folder_saves_leave_out_every_working_file_at_any_depth(target: str, tmp_path: Path):
    """Proves (item 7): every working file the library makes (staging folders, writers' and
    downloads' temporary files, a local sharded save's folder, partial restores' and pulls'
    staging, a local root) is left out by a synchronous, a background, an incremental and a
    sharded folder save, at the top and deeper; files whose names only look alike are kept."""
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "a.bin").write_bytes(b"a" * 100_000)
    (data / "sub" / "b.bin").write_bytes(b"b" * 70_000)
    kept = {
        ".fcp-notes": b"mine",  # a user's names that look like ours
        "fcp-staging-x": b"mine",
        ".fcp-tmp-x": b"mine",
        f"{workfiles.ROOT}notatoken": b"mine",
        ".fcp-lock": b"mine",
    }
    for name, content in kept.items():
        (data / "sub" / name).write_bytes(content)
    holds: list[heldfolders.HeldFolder] = []
    made = every_working_file(data, holds) + every_working_file(data / "sub", holds)
    want = {"a.bin": b"a" * 100_000, "sub/b.bin": b"b" * 70_000, **{f"sub/{n}": c for n, c in kept.items()}}
    for name in {Path(p).name for p in made}:
        assert workfiles.is_working_file(name), name
    dest = dest_for(target, tmp_path, "ckpt")
    fc.Checkpoint(dest).save_sync(data)
    assert loaded_tree(dest, tmp_path) == want
    fc.Checkpoint(dest).save_sync(data)  # incremental: copies from the one above
    assert loaded_tree(dest, tmp_path) == want
    with fc.Checkpoint(dest) as cp:
        cp.save_background(data).result(timeout=HANG)
    assert loaded_tree(dest, tmp_path) == want
    sharded = dest_for(target, tmp_path, "sharded")
    save_sharded(sharded, data, rank=0, world_size=1)
    assert loaded_tree(sharded, tmp_path) == want
    for path in made:
        assert os.path.lexists(path), f"{path} was removed"
    for held in holds:
        held.release()


def test_a_local_listing_leaves_out_working_files(tmp_path: Path):
    """Proves: the file store's listings (recursive and one level: ``flyte-checkpoint ls``,
    history) name the checkpoint objects under a prefix, not the working files beside them
    (a staging copy of a file there, a sharded save's folder, a writer's temporary file)."""
    from flyte_checkpoint.storage.registry import store_for

    folder = tmp_path / "ckpts"
    folder.mkdir()
    (folder / "a.obj").write_bytes(b"a")
    (folder / "sub").mkdir()
    (folder / "sub" / "b.obj").write_bytes(b"b")
    holds: list[heldfolders.HeldFolder] = []
    every_working_file(folder, holds)
    every_working_file(folder / "sub", holds)
    store = store_for(str(folder))
    try:
        assert list(store.list(f"{folder}/")) == [str(folder / "a.obj"), str(folder / "sub" / "b.obj")]
        assert [i.uri for i in store.list_details(f"{folder}/", recursive=False)] == [
            str(folder / "a.obj"),
            f"{folder}/sub/",
        ]
    finally:
        for held in holds:
            held.release()


@pytest.mark.parametrize(
    "name",
    [
        "model with spaces.pt",
        "modèle-\u00e9t\u00e9-\u6a21\u578b.pt",
        "x" * 255,
        "\u00e9" * 127,  # 254 bytes in UTF-8
    ],
)
def test_odd_names_stage_and_round_trip_and_their_working_files_are_recognised(
    name: str, tmp_path: Path, temp_elsewhere: Path
):
    """Proves: a file with spaces, non-ASCII letters or a name of 254-255 bytes is staged beside
    itself (the staging folder's name does not grow with it), saved in the background as its
    bytes, and left out of a save of its folder while staged; the temporary names made from
    it are recognised as working files."""
    run = tmp_path / "run"
    run.mkdir()
    (run / name).write_bytes(b"odd" * 100)
    dest = str(tmp_path / "obj")
    hold = Hold("upload_file")
    with spying("file", hold.hook) as spy, fc.Checkpoint(spy.uri_for(dest)) as cp:
        handle = cp.save_background(run / name)
        hold.wait_reached()
        (staged,) = staging_in(run)
        assert [p.name for p in staged.iterdir() if p.name != workfiles.LOCK] == [name]
        fc.Checkpoint(str(tmp_path / "folder")).save_sync(run)
        hold.release.set()
        handle.result(timeout=HANG)
    assert loaded_bytes(dest, tmp_path) == b"odd" * 100
    assert loaded_tree(str(tmp_path / "folder"), tmp_path) == {name: b"odd" * 100}
    assert workfiles.is_working_file(f"{workfiles.TMP}{name}.{'0a' * 6}")
    assert workfiles.is_working_file(f".{name}{workfiles.TMP}{'0a' * 6}")
    assert workfiles.is_working_file(f"{workfiles.TMP}{name}.shard")
    assert not workfiles.is_working_file(name)


# -- item 8: liveness by lock, not by PID -----------------------------------------------------------


def dead_pid() -> int:
    """A PID that no process of this PID namespace has (as another namespace's PID may be)."""
    with open("/proc/sys/kernel/pid_max") as f:
        pid = int(f.read()) - 1
    while pid > 300:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except OSError:
            pass
        pid -= 1
    raise AssertionError("no free PID found")


STAGE_SCRIPT = r"""
import os, sys
from pathlib import Path
fake = int(sys.argv[3])
if fake:
    os.getpid = lambda: fake  # as a process of another PID namespace sees itself
from flyte_checkpoint.lifecycle import snapshot
staged = snapshot.stage(Path(sys.argv[1]), True, lambda: sys.argv[2])
print(staged.folder, flush=True)
sys.stdin.readline()
"""


def stage_in_child(folder: Path, root: Path, pid: int = 0) -> tuple[subprocess.Popen[str], Path]:
    """A child that stages ``folder`` (local root ``root``, PID shown as ``pid`` if given) and
    waits on its stdin; the child and its staging folder (reported by the child)."""
    child = subprocess.Popen(
        [sys.executable, "-c", STAGE_SCRIPT, str(folder), str(root), str(pid)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    assert line, "the child printed nothing"
    return child, Path(line)


def test_a_live_staging_folder_of_another_pid_namespace_is_kept(tmp_path: Path):
    """Proves (item 8): a live process whose PID means nothing here (another container of the
    pod: same host name, same volume, its own PID namespace) keeps its staging folder through
    this process's sweeps; once that process is gone (SIGKILL), the next sweep removes it."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "w.bin").write_bytes(b"w" * 50_000)
    pid = dead_pid()
    child, theirs = stage_in_child(folder, tmp_path, pid)
    try:
        assert theirs.name.startswith(f"{PREFIX}{heldfolders.host()}-{pid}-"), theirs
        staged = snapshot.stage(folder, True, lambda: str(tmp_path))  # sweeps tmp_path
        staged.remove()
        assert snapshot.sweep(str(tmp_path)) == 0
        assert (theirs / "model" / "w.bin").read_bytes() == b"w" * 50_000, "a live staging folder was removed"
    finally:
        child.kill()
        child.wait()
    assert snapshot.sweep(str(tmp_path)) == 1
    assert not theirs.exists()


def test_staging_folders_are_kept_while_held_and_removed_once_their_process_is_gone(tmp_path: Path):
    """Proves: the next snapshot in a place removes the staging folder of a process killed
    there (SIGKILL: no cleanup ran), and keeps those of a live process, of this process, of
    another machine (told by its folder's name, or by the full host name its lock file
    holds: ``trainer-0`` is not ``trainer0``), and those without a lock file (an older
    version's, empty or not: it may be about to copy into an empty one)."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "w.bin").write_bytes(b"w" * 1000)
    killed_child, killed = stage_in_child(folder, tmp_path)
    live_child, live = stage_in_child(folder, tmp_path)
    try:
        killed_child.kill()
        killed_child.wait()
        assert killed.is_dir()
        mine = snapshot.stage(folder, True, lambda: str(tmp_path))
        host = heldfolders.host()
        elsewhere = tmp_path / f"{PREFIX}othermachine-{os.getpid()}-{'b' * 12}"
        old = tmp_path / f"{PREFIX}{host}-{os.getpid()}-{'c' * 12}"
        empty = tmp_path / f"{PREFIX}{host}-{os.getpid()}-{'d' * 12}"
        for made in (elsewhere, old, empty):
            made.mkdir()
        for made in (elsewhere, old):
            (made / "model").write_bytes(b"x")
        # a machine whose name differs from this one's only by what staging names leave out
        name = socket.gethostname()
        twin = tmp_path / f"{PREFIX}{host}-{os.getpid()}-{'e' * 12}"
        twin.mkdir()
        (twin / workfiles.LOCK).write_bytes(f"{name[:1]}-{name[1:]}\n1\n".encode())
        staged = snapshot.stage(folder, True, lambda: str(tmp_path))
        try:
            assert not killed.exists(), "the killed process's staging folder was left behind"
            for kept in (live, elsewhere, old, empty, twin, Path(mine.folder), Path(staged.folder)):
                assert kept.is_dir(), kept
        finally:
            staged.remove()
            mine.remove()
    finally:
        live_child.kill()
        live_child.wait()


def test_a_sweep_while_a_folder_is_made_never_removes_it_once_its_maker_holds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Proves: making a held folder takes three steps (the folder, its lock file, the lock);
    sweeps run from inside them (the test intercepts the lock file's creation) keep a folder
    without a lock file, and remove one whose lock file is not locked yet (or that a sweep holds
    as its maker tries): the maker, finding its lock file gone or taken, makes another, and
    the folder it returns is held."""
    made: list[str] = []
    real_open = os.open
    swept: list[int] = []
    holding: list[int] = []

    def of_test(name: str) -> bool:
        return name.startswith("f-")

    def open_(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not (os.fspath(path).endswith(workfiles.LOCK) and flags & os.O_CREAT) or len(made) == 2:
            return real_open(path, flags, *args, **kwargs)
        made.append(os.path.dirname(path))
        swept.append(heldfolders.sweep(str(tmp_path), of_test))  # no lock file yet: kept
        fd = real_open(path, flags, *args, **kwargs)
        if len(made) == 1:  # the lock file exists, not locked: a sweep takes it, removes the folder
            swept.append(heldfolders.sweep(str(tmp_path), of_test))
        else:  # a sweep holds the lock as the maker tries to take it
            import fcntl

            holding.append(real_open(path, os.O_RDONLY))
            fcntl.flock(holding[0], fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd

    names = iter(f"f-{i}" for i in range(10))
    monkeypatch.setattr(heldfolders.os, "open", open_)
    held = heldfolders.HeldFolder()
    try:
        path = held.make(str(tmp_path), lambda: next(names))
    finally:
        monkeypatch.undo()
    assert swept == [0, 1, 0]
    assert path == str(tmp_path / "f-2") and Path(path, workfiles.LOCK).is_file()
    assert not Path(made[0]).exists() and Path(made[1]).is_dir()
    assert heldfolders.sweep(str(tmp_path), of_test) == 0  # f-1 held by the "sweep", f-2 by its maker
    os.close(holding[0])
    assert heldfolders.sweep(str(tmp_path), of_test) == 1 and not Path(made[1]).exists()
    assert Path(path).is_dir()
    held.release()
    assert not Path(path).exists()


def test_a_held_folder_is_removed_with_its_lock_file_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Proves: a held folder is removed (by its maker, or by a sweep once its maker is gone)
    with its lock file last, so a removal cut short by a kill leaves a folder that the next
    sweep proves abandoned and removes, never data without a lock (which sweeps keep)."""
    unlinked: list[str] = []
    real_unlink = os.unlink

    def unlink(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        unlinked.append(os.path.basename(os.fspath(path)))
        return real_unlink(path, *args, **kwargs)

    for by_sweep in (False, True):
        held = heldfolders.HeldFolder()
        path = Path(held.make(str(tmp_path), snapshot._name))
        for i in range(20):
            (path / f"w{i}.bin").write_bytes(b"w")
        (path / "model").mkdir()
        (path / "model" / "x.bin").write_bytes(b"x")
        unlinked.clear()
        monkeypatch.setattr(os, "unlink", unlink)
        if by_sweep:
            fd, held._fd = held._fd, None  # its maker is gone: the kernel frees its lock
            os.close(fd)  # type: ignore[arg-type]
            heldfolders._mine.discard(str(path))
            assert snapshot.sweep(str(tmp_path)) == 1
        else:
            held.release()
        monkeypatch.undo()
        assert not path.exists()
        assert len(unlinked) == 22 and unlinked[-1] == workfiles.LOCK, unlinked


def lockable(path: Path) -> bool:
    """Whether another open file description can take ``path``'s lock (as another process's sweep)."""
    import fcntl

    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def test_a_full_disk_still_makes_a_held_root(private_tmp: Path, monkeypatch: pytest.MonkeyPatch):
    """Proves: where the lock file's one line cannot be written (the disk is full: an empty
    file still can be made), a local root is made and held all the same: a sweep keeps it
    while its ``Checkpoint`` lives, and ``close()`` removes it."""
    import errno

    real_write = os.write

    def write(fd: int, data: bytes) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(workfiles.LOCK):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    cp = fc.Checkpoint(str(private_tmp / "unused"))
    root = Path(cp.path).parent
    monkeypatch.undo()
    assert (root / workfiles.LOCK).read_bytes() == b""
    assert not lockable(root / workfiles.LOCK), "the root is not held"
    assert heldfolders.sweep_roots(str(private_tmp)) == 0 and root.is_dir()
    cp.close()
    assert not root.exists()


# -- item 9: links --------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["file", "memory"])
def test_save_background_of_a_link_stores_what_save_sync_stores(target: str, tmp_path: Path):
    """Proves (item 9): ``save_background`` of a link to a file (Lightning's ``last.ckpt ->
    epoch3.ckpt``), of a chain of links, and of a link to a folder stores what ``save_sync``
    stores: the target's bytes, the folder's tree. A dangling link and a loop of links raise
    NotFoundError from both, naming the path."""
    work = tmp_path / "run"
    work.mkdir()
    (work / "epoch3.ckpt").write_bytes(b"epoch 3 weights")
    (work / "last.ckpt").symlink_to("epoch3.ckpt")
    (work / "latest").symlink_to("last.ckpt")
    (work / "tree").mkdir()
    (work / "tree" / "a.bin").write_bytes(b"a" * 5000)
    (work / "tree-link").symlink_to("tree")
    for link in ("last.ckpt", "latest"):
        sync, bg = dest_for(target, tmp_path, f"sync-{link}"), dest_for(target, tmp_path, f"bg-{link}")
        fc.Checkpoint(sync).save_sync(work / link)
        with fc.Checkpoint(bg) as cp:
            cp.save_background(work / link).result(timeout=HANG)
        assert loaded_bytes(bg, tmp_path) == loaded_bytes(sync, tmp_path) == b"epoch 3 weights"
    sync, bg = dest_for(target, tmp_path, "sync-tree"), dest_for(target, tmp_path, "bg-tree")
    fc.Checkpoint(sync).save_sync(work / "tree-link")
    with fc.Checkpoint(bg) as cp:
        cp.save_background(work / "tree-link").result(timeout=HANG)
    assert loaded_tree(bg, tmp_path) == loaded_tree(sync, tmp_path) == {"a.bin": b"a" * 5000}
    (work / "dangling").symlink_to("nowhere")
    (work / "loop-a").symlink_to("loop-b")
    (work / "loop-b").symlink_to("loop-a")
    for bad in ("dangling", "loop-a"):
        with pytest.raises(NotFoundError, match=bad):
            fc.Checkpoint(dest_for(target, tmp_path, "x")).save_sync(work / bad)
        with fc.Checkpoint(dest_for(target, tmp_path, "y")) as cp, pytest.raises(NotFoundError, match=bad):
            cp.save_background(work / bad)
    assert staging_in(work) == []


def test_a_link_to_a_file_elsewhere_stages_beside_the_file_it_leads_to(tmp_path: Path, temp_elsewhere: Path):
    """Proves: with the temp folder on another file system, a link's snapshot is staged beside
    the file it leads to (on that file's file system, where a reflink can be made), not beside
    the link."""
    data, links = tmp_path / "data", tmp_path / "links"
    data.mkdir()
    links.mkdir()
    (data / "epoch3.ckpt").write_bytes(b"e3")
    (links / "last.ckpt").symlink_to(data / "epoch3.ckpt")
    staged = snapshot.stage(links / "last.ckpt", False, lambda: str(Path(tempfile.gettempdir())))
    try:
        assert Path(staged.folder).parent == data
        assert staged.path.name == "last.ckpt" and staged.path.read_bytes() == b"e3"
    finally:
        staged.remove()


# -- item 10: roots of killed processes -----------------------------------------------------------------


HELD_SAVE_SCRIPT = r"""
import os, sys, tempfile, threading
from pathlib import Path
import flyte_checkpoint as fc

dest, folder = sys.argv[1], sys.argv[2]
never = threading.Event()
cp = fc.Checkpoint(dest, progress=lambda done, total: never.wait())  # the upload never goes on
cp.save_background(Path(folder))  # returns once the staging copy is made
root = Path(cp.path).parent
staged = sorted(root.glob(".fcp-staging-*"))
print(root, *staged, flush=True)
sys.stdin.readline()
"""


def held_save_in_child(folder: Path, dest: str, temp: Path) -> tuple[subprocess.Popen[str], Path, Path]:
    """A child (temp folder ``temp``) whose background save of ``folder`` is staged and held;
    the child, its local root and its staging folder, as the child reports them."""
    child = subprocess.Popen(
        [sys.executable, "-c", HELD_SAVE_SCRIPT, dest, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temp)},
    )
    assert child.stdout is not None
    reported = child.stdout.readline().split()
    assert len(reported) == 2, f"the child reported {reported}"
    return child, Path(reported[0]), Path(reported[1])


def test_a_sigkilled_processs_root_and_staging_copy_are_removed_by_the_next_background_save(
    tmp_path: Path, private_tmp: Path
):
    """Proves (item 10): a process SIGKILLed while its background save was held leaves its
    local root in the temp folder with a full staging copy of the data; the next background
    save made with that temp folder (another process's, here this one's) removes both, and
    keeps the root and staging copy of a live process (the same held save, not killed) and
    this process's own live roots."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(os.urandom(300_000))
    dest = str(tmp_path / "dest" / "ckpt")
    killed, killed_root, killed_staging = held_save_in_child(folder, dest, private_tmp)
    live, live_root, live_staging = held_save_in_child(folder, dest, private_tmp)
    try:
        assert (killed_staging / "model" / "weights.bin").stat().st_size == 300_000
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait()
        assert killed_root.parent == private_tmp and killed_staging.is_dir()
        mine = fc.Checkpoint(str(tmp_path / "unused"))
        mine_root = Path(mine.path).parent
        with fc.Checkpoint(str(tmp_path / "next")) as cp:
            cp.save_background(folder).result(timeout=HANG)
            assert not killed_root.exists(), "the killed process's root (and its staging copy) was left"
            assert (live_staging / "model" / "weights.bin").stat().st_size == 300_000
            assert live_root.is_dir() and mine_root.is_dir()
        mine.close()
    finally:
        live.kill()
        live.wait()
    assert sorted(private_tmp.iterdir()) == [live_root]
    with fc.Checkpoint(str(tmp_path / "unused")) as cp:
        cp.path  # noqa: B018 - a new local root sweeps the temp folder too
        assert not live_root.exists()


def test_close_does_not_wait_for_the_sweep_a_new_root_makes(
    private_tmp: Path, monkeypatch: pytest.MonkeyPatch
):
    """Proves: the sweep a new local root makes of the temp folder (which may remove a killed
    process's large copies) runs outside the checkpoint's lock: ``close()`` from another thread
    returns while it is held (a watchdog timer only turns a wait into a failure)."""
    entered, release = threading.Event(), threading.Event()
    real = heldfolders.sweep_roots

    def held_sweep(temp: str) -> int:
        entered.set()
        release.wait(HANG)
        return real(temp)

    monkeypatch.setattr(heldfolders, "sweep_roots", held_sweep)
    cp = fc.Checkpoint(str(private_tmp / "unused"))
    maker = threading.Thread(target=lambda: cp.path)
    maker.start()
    assert entered.wait(HANG)
    watchdog = threading.Timer(HANG, release.set)
    watchdog.start()
    try:
        cp.close()
        returned_first = not release.is_set()
    finally:
        release.set()
        watchdog.cancel()
        maker.join(HANG)
    assert returned_first, "close() waited for the sweep"


# -- item 14: a save cancelled by close() ---------------------------------------------------------------


@pytest.mark.parametrize("target", ["file", "memory"])
@pytest.mark.parametrize(
    ("what", "op"), [("folder", "open_write"), ("folder", "write"), ("file", "upload_file")]
)
def test_a_background_save_cancelled_by_closes_timeout_reports_cancelled(
    target: str, what: str, op: str, tmp_path: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch
):
    """Proves (item 14): a background save held (before its upload opens, at its first write,
    or in a whole-file upload) when ``close()`` times out raises OperationCancelledError from
    its handle (not SourceChangedError: close() removed its staging copy under it), and the
    previous checkpoint stays."""
    data = tmp_path / "model"
    data.mkdir()
    (data / "weights.bin").write_bytes(os.urandom(2 << 20))
    source = data if what == "folder" else data / "weights.bin"
    real = dest_for(target, tmp_path, "ckpt")
    fc.Checkpoint(real).save_sync(b"previous")
    hold = Hold(op)
    with spying(target, hold.hook) as spy:
        cp = fc.Checkpoint(spy.uri_for(real))
        handle = cp.save_background(source)
        hold.wait_reached()
        root = Path(cp.path).parent
        assert staging_in(root), "the staging copy is not under the local root"
        monkeypatch.setenv("FLYTE_CHECKPOINT_CLOSE_TIMEOUT", "0")
        with pytest.raises(SaveTimeoutError):
            cp.close()
        assert not root.exists()
        hold.release.set()
        with pytest.raises(OperationCancelledError, match="cancelled"):
            handle.result(timeout=HANG)
    assert loaded_bytes(real, tmp_path) == b"previous"
