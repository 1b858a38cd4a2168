"""Background saves (issue 17): handles, superseding, order, errors that surface once, close()
waiting, staging folders, snapshot isolation and async waits.

Every test holds uploads at a point the code reports: a :class:`Turnstile` on the spy store
(tests/spystore.py) stops each upload as it starts (``write_bytes`` for bytes, ``open_write``
for a file or folder) until the test lets it through, and says which arrived. Nothing depends
on the machine's speed; :data:`HANG` only turns a hang into a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import (
    CheckpointPermissionError,
    ConfigurationError,
    OperationCancelledError,
    SaveTimeoutError,
)
from flyte_checkpoint.lifecycle import background, saveorder
from flyte_checkpoint.lifecycle.background import THREAD_NAME
from flyte_checkpoint.lifecycle.snapshot import PREFIX
from tests.reliability.gates import HANG
from tests.spystore import SpyStore, spying

#: Store calls that start an upload.
STARTS = ("write_bytes", "open_write")


class Turnstile:
    """A spy-store hook that stops every upload as it starts until the test lets it through.

    :meth:`arrival` returns the next upload that arrived (its number, from 1); :meth:`let`
    lets ``n`` through; uploads whose number is in ``fail`` raise a permission error instead.
    """

    def __init__(self, fail: tuple[int, ...] = ()) -> None:
        self.fail = fail
        self.arrivals: queue.Queue[int] = queue.Queue()
        self.gate = threading.Semaphore(0)
        self.count = 0
        self.endings: list[str] = []
        self._lock = threading.Lock()

    def hook(self, op: str, uri: str) -> None:
        if ".fcp-history/" in uri:
            return  # a save's manifest, written after its commit (docs/history.md): not an upload
        if op in ("commit", "abort", "write_bytes"):
            self.endings.append(op)
        if op not in STARTS:
            return
        with self._lock:
            self.count += 1
            number = self.count
        self.arrivals.put(number)
        if not self.gate.acquire(timeout=HANG):
            raise AssertionError(f"upload {number} was not let through within {HANG}s")
        if number in self.fail:
            raise CheckpointPermissionError(f"upload {number} refused by the test store")

    def arrival(self) -> int:
        return self.arrivals.get(timeout=HANG)

    def let(self, n: int = 1) -> None:
        for _ in range(n):
            self.gate.release()

    def none_waiting(self) -> bool:
        return self.arrivals.empty()


@pytest.fixture
def spied() -> Iterator[tuple[SpyStore, Turnstile, str]]:
    """A turnstile on a spy store over the memory store, and a fresh destination through it."""
    turnstile = Turnstile()
    with spying("memory", turnstile.hook) as spy:
        yield spy, turnstile, spy.uri_for(f"memory://bg/{os.urandom(4).hex()}/ckpt")


def stored(dest: str) -> bytes | None:
    """The payload at ``dest`` (read past the spy: the memory store)."""
    real = "memory://" + dest.split("://", 1)[1]
    with fc.Checkpoint("memory://unused/x", real) as cp:
        path = cp.load_sync()
        return None if path is None else path.read_bytes()


def workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


def staging_folders(*places: Path) -> list[Path]:
    """Staging folders under ``places`` and under every checkpoint root in the temp folder."""
    roots = [*places, *Path(tempfile.gettempdir()).glob("flyte-checkpoint-ws-*")]
    return sorted(p for root in roots for p in root.glob(PREFIX + "*"))


def make_folder(path: Path, version: int) -> None:
    path.mkdir(exist_ok=True)
    (path / "weights.bin").write_bytes(bytes([version]) * 200_000)
    (path / "step.txt").write_text(str(version))


def folder_at(dest: str, scratch: Path) -> dict[str, bytes] | None:
    with fc.Checkpoint(str(scratch / "unused"), dest) as cp:
        path = cp.load_sync()
        if path is None:
            return None
        return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


# -- handles, superseding, order ---------------------------------------------------------------


def test_a_handle_reports_running_then_done_and_result_waits(spied):
    """Proves: ``save_background`` returns while the upload is held; the handle is not done and
    ``result(timeout=0)`` raises SaveTimeoutError (the save goes on); once let through, ``result()``
    returns, the handle is done and not superseded, and the bytes are stored."""
    _, turnstile, dest = spied
    cp = fc.Checkpoint(dest)
    handle = cp.save_background(b"step-1")
    assert turnstile.arrival() == 1
    assert not handle.done() and not handle.superseded
    with pytest.raises(SaveTimeoutError, match="goes on"):
        handle.result(timeout=0)
    turnstile.let()
    handle.result(timeout=HANG)
    assert handle.done() and not handle.superseded
    assert stored(dest) == b"step-1"
    cp.close()
    assert workers() == []


def test_a_newer_save_supersedes_the_waiting_one_and_saves_commit_in_call_order(spied):
    """Proves: with one upload held and one waiting, a third save replaces the waiting one (its
    handle is done and superseded, not failed, and it never reaches the store); the held one
    commits first, then the newest; at most two uploads ever reach the store."""
    spy, turnstile, dest = spied
    cp = fc.Checkpoint(dest)
    first = cp.save_background(b"1")
    assert turnstile.arrival() == 1
    second = cp.save_background(b"2")
    third = cp.save_background(b"3")
    assert second.done() and second.superseded
    second.result()  # not an error
    assert not third.done() and saveorder.waiting(dest) == 2  # the held save and the newest
    turnstile.let()
    first.result(timeout=HANG)
    assert stored(dest) == b"1"
    assert turnstile.arrival() == 2  # the newest, never the superseded one
    turnstile.let()
    third.result(timeout=HANG)
    assert stored(dest) == b"3" and not third.superseded
    assert spy.count("write_bytes") == 2
    cp.close()


def test_background_and_synchronous_saves_commit_in_call_order(spied):
    """Proves: a ``save_sync`` called (in another thread) while a background save is held
    waits for it, and a background save called after that ``save_sync`` commits after it: the
    destination holds 1, then "sync", then 3, and an older save never overwrites a newer one."""
    _, turnstile, dest = spied
    cp = fc.Checkpoint(dest)
    first = cp.save_background(b"1")
    assert turnstile.arrival() == 1
    other = fc.Checkpoint(dest)
    syncing = threading.Thread(target=other.save_sync, args=(b"sync",))
    syncing.start()
    deadline = time.monotonic() + HANG  # a hang guard: the thread takes its turn at once
    while saveorder.waiting(dest) < 2 and syncing.is_alive() and time.monotonic() < deadline:
        pass
    assert saveorder.waiting(dest) == 2
    third = cp.save_background(b"3")
    turnstile.let()
    first.result(timeout=HANG)
    assert turnstile.arrival() == 2  # the synchronous save, which was called before the third
    turnstile.let()
    syncing.join(HANG)
    assert stored(dest) == b"sync"
    assert turnstile.arrival() == 3
    turnstile.let()
    third.result(timeout=HANG)
    assert stored(dest) == b"3"
    cp.close()


# -- errors --------------------------------------------------------------------------------------


def failing(dest: str, turnstile: Turnstile) -> tuple[fc.Checkpoint, object]:
    """A checkpoint whose first background save has failed (its error not yet seen)."""
    turnstile.fail = (1,)
    cp = fc.Checkpoint(dest)
    handle = cp.save_background(b"will fail")
    turnstile.let()
    while not handle.done():
        handle_done = threading.Event()
        handle._on_done(handle_done.set)
        handle_done.wait(HANG)
    return cp, handle


def test_a_failed_save_raises_from_its_handle_and_then_nowhere_else(spied):
    """Proves: the handle's ``result()`` raises the save's error (every time it is asked); once
    seen there, the next save, ``wait()`` and ``close()`` do not raise it again."""
    _, turnstile, dest = spied
    cp, handle = failing(dest, turnstile)
    for _ in range(2):
        with pytest.raises(CheckpointPermissionError, match="upload 1 refused"):
            handle.result()
    turnstile.let(10)
    cp.save_background(b"next").result(timeout=HANG)
    cp.wait()
    cp.close()
    assert stored(dest) == b"next"


@pytest.mark.parametrize("where", ["save_background", "save_sync", "save", "wait", "close", "wait_async"])
def test_an_unseen_failure_raises_once_from_the_next_call(spied, where):
    """Proves: a failed background save whose handle nobody asked raises from the checkpoint's
    next save (background, sync or async; nothing is started then), ``wait()``, ``wait_async()``
    or ``close()``, once: the call after it goes through."""
    _, turnstile, dest = spied
    cp, _ = failing(dest, turnstile)
    turnstile.let(10)
    calls = {
        "save_background": lambda: cp.save_background(b"next").result(timeout=HANG),
        "save_sync": lambda: cp.save_sync(b"next"),
        "save": lambda: asyncio.run(cp.save(b"next")),
        "wait": cp.wait,
        "close": cp.close,
        "wait_async": lambda: asyncio.run(cp.wait_async()),
    }
    with pytest.raises(CheckpointPermissionError, match="upload 1 refused"):
        calls[where]()
    assert stored(dest) is None  # the failed save stored nothing; the raising call started nothing
    calls[where]()
    cp.close()


def test_leaving_with_on_an_error_logs_the_background_failure_and_keeps_the_blocks_error(spied, caplog):
    """Proves: a ``with`` block that raises while a background save failed unseen propagates the
    block's own error, and the save's failure is logged, not lost."""
    _, turnstile, dest = spied
    turnstile.fail = (1,)
    with pytest.raises(KeyError), fc.Checkpoint(dest) as cp:
        cp.save_background(b"will fail")
        turnstile.let()
        raise KeyError("the block's own")
    assert "upload 1 refused" in caplog.text


# -- close waits ---------------------------------------------------------------------------------


@contextlib.contextmanager
def let_through_when_waited_for(turnstile: Turnstile) -> Iterator[None]:
    """Let the held upload through only once something waits for the background saves (the
    lane's ``wait``, which ``close()`` calls): a close that does not wait returns with it held."""
    wait = background.Lane.wait

    def waiting(self: background.Lane, timeout: float | None) -> bool:
        turnstile.let()
        return wait(self, timeout)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(background.Lane, "wait", waiting)
        try:
            yield
        finally:
            turnstile.let(5)


def closing_waits(close, turnstile: Turnstile, dest: str) -> None:
    """Call ``close()`` with an upload held, let through only when close waits for it: ``close()``
    must return only after the upload committed, so the payload is there as soon as it returns."""
    assert turnstile.arrival() == 1
    with let_through_when_waited_for(turnstile):
        close()
        assert stored(dest) == b"last", "close() returned before the background save committed"


def test_close_and_leaving_with_wait_for_the_upload_in_flight(spied):
    """Proves: ``close()`` returns only once the background save it found in flight has
    committed; no worker thread is left after."""
    _, turnstile, dest = spied
    cp = fc.Checkpoint(dest)
    cp.save_background(b"last")
    closing_waits(cp.close, turnstile, dest)
    assert workers() == []


def test_leaving_with_waits_for_the_upload_in_flight(spied):
    """Proves: leaving a ``with`` block (the ``__exit__`` the statement calls) waits likewise."""
    _, turnstile, dest = spied
    cp = fc.Checkpoint(dest).__enter__()
    cp.save_background(b"last")
    closing_waits(lambda: cp.__exit__(None, None, None), turnstile, dest)


def test_a_task_that_returns_has_saved(spied):
    """Proves: in the local runner (``@fc.task``), a task that starts a background save and returns
    has saved by the time the call returns: the attempt's close waits for the upload held."""
    _, turnstile, dest = spied
    root = dest.rsplit("/", 1)[0] + "/runs"

    @fc.task(retries=0, checkpoint_root=root, keep_checkpoints=True)  # kept to be looked at
    def train() -> str:
        cp = fc.ctx().checkpoint
        assert cp is not None
        cp.save_background(b"last")
        return cp.remote_destination

    with let_through_when_waited_for(turnstile):
        attempt_dest = train()
        assert stored(attempt_dest) == b"last", "the task returned before its background save committed"


def test_a_task_context_close_waits_for_the_upload_in_flight(spied):
    """Proves: ``TaskContext.close()`` (what the local runner and Flyte integration call after an
    attempt) returns only after the attempt's background save committed."""
    _, turnstile, dest = spied
    tctx = fc.TaskContext(attempt_number=0, checkpoint_paths=fc.CheckpointPaths(dest, None))
    assert tctx.checkpoint is not None
    tctx.checkpoint.save_background(b"last")
    closing_waits(tctx.close, turnstile, dest)


def test_close_gives_up_after_the_timeout_cancels_and_keeps_the_previous_checkpoint(spied, monkeypatch):
    """Proves: with ``FLYTE_CHECKPOINT_CLOSE_TIMEOUT=0`` and an upload held, ``close()`` cancels it
    and raises SaveTimeoutError naming the variable and the URI; once let through, the cancelled
    upload commits nothing: the previous checkpoint is still there."""
    _, turnstile, dest = spied
    cp = fc.Checkpoint(dest)
    turnstile.let()
    cp.save_background(b"previous").result(timeout=HANG)
    turnstile.arrival()
    handle = cp.save_background(b"cut short")
    assert turnstile.arrival() == 2
    monkeypatch.setenv("FLYTE_CHECKPOINT_CLOSE_TIMEOUT", "0")
    with pytest.raises(SaveTimeoutError, match=r"CLOSE_TIMEOUT.*previous checkpoint was kept") as err:
        cp.close()
    assert "memory" not in str(err.value) or "spy://" in str(err.value)
    turnstile.let()
    with pytest.raises(OperationCancelledError):
        handle.result(timeout=HANG)
    assert stored(dest) == b"previous"


def test_an_invalid_close_timeout_names_the_variable(spied, monkeypatch):
    """Proves: a malformed ``FLYTE_CHECKPOINT_CLOSE_TIMEOUT`` is a ConfigurationError that names the
    variable and its value, raised by ``close()`` after waiting (default bound) and cleaning up."""
    _, turnstile, dest = spied
    turnstile.let(5)
    cp = fc.Checkpoint(dest)
    cp.save_background(b"x")
    monkeypatch.setenv("FLYTE_CHECKPOINT_CLOSE_TIMEOUT", "soon")
    with pytest.raises(ConfigurationError, match=r"FLYTE_CHECKPOINT_CLOSE_TIMEOUT='soon' is not a duration"):
        cp.close()
    assert stored(dest) == b"x"


# -- snapshots and staging -----------------------------------------------------------------------


def test_a_folder_changed_right_after_save_background_is_saved_as_it_was(spied, tmp_path):
    """Proves: the folder may be rewritten, and files removed, as soon as ``save_background``
    returns: the checkpoint holds the folder as it was at the call. A ``bytearray`` changed after
    the call is saved as it was too."""
    _, turnstile, dest = spied
    folder = tmp_path / "model"
    make_folder(folder, 1)
    cp = fc.Checkpoint(dest)
    handle = cp.save_background(folder)
    make_folder(folder, 2)
    (folder / "step.txt").unlink()
    turnstile.let()
    handle.result(timeout=HANG)
    assert folder_at(dest, tmp_path) == {"step.txt": b"1", "weights.bin": b"\1" * 200_000}
    data = bytearray(b"before")
    handle = cp.save_background(data)
    data[:] = b"after!"
    turnstile.let()
    handle.result(timeout=HANG)
    assert stored(dest) == b"before"
    cp.close()


def test_a_single_file_is_snapshotted_too(spied, tmp_path):
    _, turnstile, dest = spied
    path = tmp_path / "state.pt"
    path.write_bytes(b"old state")
    cp = fc.Checkpoint(dest)
    handle = cp.save_background(path)
    path.write_bytes(b"new state, longer")
    turnstile.let()
    handle.result(timeout=HANG)
    assert stored(dest) == b"old state"
    cp.close()


def test_staging_folders_are_removed_on_success_error_and_supersede(spied, tmp_path):
    """Proves: a staging copy exists while its upload is held or waiting, and is removed when the
    upload commits, when it fails, and when a newer save supersedes it; none is left at the end."""
    _, turnstile, dest = spied
    folder = tmp_path / "model"
    make_folder(folder, 1)
    before = staging_folders(tmp_path)
    turnstile.fail = (2,)
    cp = fc.Checkpoint(dest)
    first = cp.save_background(folder)
    assert turnstile.arrival() == 1
    assert len(staging_folders(tmp_path)) == len(before) + 1
    waiting = cp.save_background(folder)
    assert len(staging_folders(tmp_path)) == len(before) + 2
    newest = cp.save_background(folder)
    assert waiting.superseded and len(staging_folders(tmp_path)) == len(before) + 2
    turnstile.let()
    first.result(timeout=HANG)
    assert turnstile.arrival() == 2
    turnstile.let()  # upload 2 (the newest) fails
    with pytest.raises(CheckpointPermissionError):
        newest.result(timeout=HANG)
    assert staging_folders(tmp_path) == before
    cp.close()


def test_a_folder_with_links_and_hard_links_round_trips_through_the_snapshot(tmp_path):
    """Proves: a folder saved in the background loads back like one saved synchronously: links
    inside the folder stay links, hard links and modes are kept."""
    folder = tmp_path / "tree"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.bin").write_bytes(b"a" * 1000)
    (folder / "sub" / "a.bin").chmod(0o640)
    os.link(folder / "sub" / "a.bin", folder / "hard.bin")
    (folder / "latest").symlink_to("sub/a.bin")
    (folder / "absolute").symlink_to(folder / "sub")
    sync_dest, bg_dest = str(tmp_path / "sync.obj"), str(tmp_path / "bg.obj")
    fc.Checkpoint(sync_dest).save_sync(folder)
    with fc.Checkpoint(bg_dest) as cp:
        cp.save_background(folder).result(timeout=HANG)

    def described(dest: str) -> list[tuple]:
        with fc.Checkpoint(str(tmp_path / "unused"), dest) as cp:
            root = cp.load_sync()
            assert root is not None
            out = []
            for p in sorted(root.rglob("*")):
                st = p.lstat()
                out.append(
                    (
                        str(p.relative_to(root)),
                        os.readlink(p) if p.is_symlink() else None,
                        st.st_mode,
                        None if p.is_symlink() or p.is_dir() else (p.read_bytes(), st.st_nlink),
                    )
                )
            return out

    assert described(bg_dest) == described(sync_dest)


def test_without_reflink_or_copy_file_range_the_snapshot_copies(monkeypatch, tmp_path):
    """Proves: where neither reflink nor ``copy_file_range`` works, the plain copy stages the
    same bytes (the counters say which way each file went)."""
    from flyte_checkpoint.lifecycle import snapshot

    folder = tmp_path / "model"
    make_folder(folder, 3)
    monkeypatch.setattr(snapshot, "_reflink", lambda src, dest: False)
    monkeypatch.delattr(os, "copy_file_range", raising=False)
    staged = snapshot.stage(folder, True, lambda: str(tmp_path))
    try:
        assert (staged.reflinked, staged.copied) == (0, 2)
        assert (staged.path / "weights.bin").read_bytes() == b"\3" * 200_000
    finally:
        staged.remove()
    assert not Path(staged.folder).exists()


#: A folder on a file system with reflinks (XFS made with ``-m reflink=1``, btrfs). CI's ext4 has
#: none, so this test exists only where the variable names one (it is not collected otherwise,
#: so it neither runs nor skips): ``FCP_REFLINK_DIR=/mnt/xfs pytest tests/test_background.py``.
REFLINK_DIR = os.environ.get("FCP_REFLINK_DIR", "")

if REFLINK_DIR:

    def test_on_a_reflink_file_system_every_file_is_cloned_and_isolated():
        """Proves: there, staging clones each file (``FICLONE``: no bytes copied), and the clone
        keeps the snapshot's bytes when the source file is rewritten in place afterwards."""
        from flyte_checkpoint.lifecycle import snapshot

        base = Path(tempfile.mkdtemp(dir=REFLINK_DIR))
        try:
            folder = base / "model"
            make_folder(folder, 5)
            staged = snapshot.stage(folder, True, lambda: str(base))
            assert (staged.reflinked, staged.copied) == (2, 0)
            with open(folder / "weights.bin", "r+b") as f:
                f.write(b"X" * 10)  # in place: a clone that shared blocks would see it
            assert (staged.path / "weights.bin").read_bytes() == b"\5" * 200_000
            staged.remove()
        finally:
            shutil.rmtree(base, ignore_errors=True)


def test_staging_folders_of_killed_processes_are_removed_by_the_next_snapshot(tmp_path):
    """Proves: a process killed while its snapshot was staged (SIGKILL: no cleanup ran) leaves its
    staging folder; the next snapshot made in that place removes it, and keeps the folders of
    another machine (a volume shared between machines) and of an older version (no lock). Live
    processes, whatever their PID namespace: tests/test_staging.py."""
    import subprocess
    import sys

    from flyte_checkpoint.lifecycle import snapshot
    from flyte_checkpoint.util import heldfolders

    folder = tmp_path / "model"
    make_folder(folder, 6)
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path;"
         " from flyte_checkpoint.lifecycle import snapshot;"
         f" s = snapshot.stage(Path({str(folder)!r}), True, lambda: {str(tmp_path)!r});"
         " print(s.folder, flush=True); sys.stdin.readline()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None
    killed = Path(child.stdout.readline().strip())  # staged: the child waits on stdin
    child.kill()
    child.wait()
    assert killed.is_dir() and killed.parent == tmp_path
    old = tmp_path / f"{snapshot.PREFIX}{heldfolders.host()}-{os.getppid()}-{'a' * 12}"
    elsewhere = tmp_path / f"{snapshot.PREFIX}othermachine-{child.pid}-{'b' * 12}"
    for kept in (old, elsewhere):
        kept.mkdir()
        (kept / "model").write_bytes(b"x")
    staged = snapshot.stage(folder, True, lambda: str(tmp_path))
    try:
        assert not killed.exists(), "the killed process's staging folder was left behind"
        assert old.is_dir() and elsewhere.is_dir() and Path(staged.folder).is_dir()
    finally:
        staged.remove()


def test_the_staging_folder_goes_beside_the_source_when_the_root_is_elsewhere(monkeypatch, tmp_path):
    """Proves: when the checkpoint's local root is on another filesystem than the source (told by
    ``st_dev``), the staging folder is made beside the source, so a reflink is possible."""
    from flyte_checkpoint.lifecycle import snapshot

    folder = tmp_path / "model"
    make_folder(folder, 4)
    root = tmp_path / "root"
    root.mkdir()
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        st = real_stat(path, *args, **kwargs)
        if os.fspath(path) == str(root):
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev + 1, *tuple(st)[3:]))
        return st

    monkeypatch.setattr(snapshot.os, "stat", stat)
    staged = snapshot.stage(folder, True, lambda: str(root))
    try:
        assert Path(staged.folder).parent == tmp_path and Path(staged.folder).name.startswith(PREFIX)
    finally:
        staged.remove()


# -- async ---------------------------------------------------------------------------------------


def test_cancelling_an_async_wait_leaves_the_save_running_unless_asked(spied):
    """Proves: cancelling a task awaiting ``wait_async()`` (or a handle's ``result_async()``)
    leaves the save to commit; with ``cancel=True`` the save is cancelled and commits nothing."""
    _, turnstile, dest = spied
    cp = fc.Checkpoint(dest)

    async def cancel_wait(cancel: bool, by_handle: bool, data: bytes) -> object:
        handle = await cp.save_background_async(data)
        await asyncio.to_thread(turnstile.arrival)
        waiter = asyncio.ensure_future(
            handle.result_async(cancel=cancel) if by_handle else cp.wait_async(cancel=cancel)
        )
        await asyncio.sleep(0)  # the waiter starts waiting (one loop turn; no timing)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        turnstile.let()
        await asyncio.to_thread(cp._lane.get().wait, HANG)
        return handle

    for by_handle in (False, True):
        kept = asyncio.run(cancel_wait(False, by_handle, b"kept"))
        kept.result()  # type: ignore[attr-defined]
        assert stored(dest) == b"kept"
        cut = asyncio.run(cancel_wait(True, by_handle, b"cancelled"))
        with pytest.raises(OperationCancelledError):
            cut.result()  # type: ignore[attr-defined]
        assert stored(dest) == b"kept"
    cp.close()


def test_wait_async_returns_without_blocking_the_loop(spied):
    """Proves: while ``wait_async()`` waits for a held upload, the event loop runs other tasks
    (one of them lets the upload through); ``wait_async(timeout=0)`` raises SaveTimeoutError."""
    _, turnstile, dest = spied
    cp = fc.Checkpoint(dest)

    async def main() -> None:
        cp.save_background(b"async")
        await asyncio.to_thread(turnstile.arrival)
        with pytest.raises(SaveTimeoutError):
            await cp.wait_async(timeout=0)

        async def let_through() -> None:
            turnstile.let()

        other = asyncio.ensure_future(let_through())
        await cp.wait_async()
        assert other.done()

    asyncio.run(main())
    assert stored(dest) == b"async"
    cp.close()


# -- loads during a background save --------------------------------------------------------------


@pytest.mark.parametrize("target", ["file", "memory"])
def test_a_load_during_a_background_save_sees_the_old_or_new_checkpoint_whole(target, tmp_path):
    """Proves: on the file and memory stores, a load of the destination while a background save
    of a folder is held mid-upload (its second write) restores the previous checkpoint whole;
    once it has committed, the new one whole. (The cloud stores: tests/reliability/test_background.py.)"""
    from tests.reliability.gates import Gate

    real = str(tmp_path / "dest" / "ckpt") if target == "file" else f"memory://bgload/{os.urandom(4).hex()}"
    gate = Gate(writes=2)
    folder = tmp_path / "model"
    with spying(target, gate.hook) as spy:
        dest = spy.uri_for(real)
        make_folder(folder, 1)
        fc.Checkpoint(real).save_sync(folder)
        old = folder_at(real, tmp_path)
        big = os.urandom(3 << 20)
        (folder / "weights.bin").write_bytes(big)
        cp = fc.Checkpoint(dest)
        handle = cp.save_background(folder)
        gate.wait_reached()
        assert folder_at(real, tmp_path) == old
        gate.release.set()
        handle.result(timeout=HANG)
        assert folder_at(real, tmp_path) == {"step.txt": b"1", "weights.bin": big}
        cp.close()


EXIT_SCRIPT = r"""
import sys, threading
from pathlib import Path
import flyte_checkpoint as fc

dest, folder = sys.argv[1], Path(sys.argv[2])
exiting = threading.Event()


def held(done, total):
    # The upload (in the worker) waits until the interpreter has begun to exit.
    if done and not exiting.is_set():
        assert exiting.wait(60), "the interpreter never began to exit"


cp = fc.Checkpoint(dest, progress=held)
cp.save_background(folder)
# Registered after the library's own exit hook, so it runs first (they run in reverse order).
threading._register_atexit(exiting.set)
print("returning", flush=True)
"""


def test_interpreter_exit_waits_for_the_upload_in_flight(tmp_path):
    """Proves: a script that starts a background save and ends without ``close()`` has saved when
    the process has ended: the upload, held until the interpreter begins to exit, commits."""
    import subprocess
    import sys

    folder = tmp_path / "model"
    make_folder(folder, 7)
    dest = str(tmp_path / "obj")
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, dest, str(folder)],
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=5 * HANG,
    )
    assert done.returncode == 0 and done.stdout == "returning\n", done.stderr[-3000:]
    assert folder_at(dest, tmp_path) == {"step.txt": b"7", "weights.bin": b"\7" * 200_000}


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_a_full_disk_while_staging_is_a_workspace_error_naming_the_uri_and_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
):
    """Proves: a staging copy that fills its disk (the source on a 1 MiB tmpfs, the temp folder
    elsewhere, so the copy goes beside the source) raised a bare ``OSError`` naming neither the
    checkpoint nor what to do. It is a WorkspaceError (a CheckpointError, an OSError with errno
    ENOSPC) naming the URI, the data and the folder, saying what to do; nothing is stored, no
    staging copy is left, and the next save runs."""
    import errno

    from conftest import require
    from flyte_checkpoint.errors import CheckpointError, WorkspaceError
    from tests.test_load_rules import _mount_tmpfs

    small = tmp_path / "small"
    require(_mount_tmpfs(small, "1m"), "mounting a 1 MiB tmpfs needs root (CAP_SYS_ADMIN)")
    try:
        (small / "run").mkdir()
        (small / "run" / "big.bin").write_bytes(os.urandom(600_000))
        data = small / "run" if kind == "folder" else small / "run" / "big.bin"
        elsewhere = tmp_path / "temp"
        elsewhere.mkdir()
        monkeypatch.setattr(tempfile, "tempdir", str(elsewhere))
        dest = tmp_path / "store" / "ckpt"
        with fc.Checkpoint(str(dest)) as cp:
            with pytest.raises(WorkspaceError) as info:
                cp.save_background(data)
            error = info.value
            assert isinstance(error, CheckpointError) and error.errno == errno.ENOSPC
            text = str(error)
            assert f"no space left in {small / 'run'}" in text or f"no space left in {small}" in text
            assert str(dest) in text and str(data) in text and "save_sync" in text
            assert not dest.exists() and sorted(small.rglob(PREFIX + "*")) == []
            cp.save_background(b"next").result(HANG)
        assert dest.read_bytes() == b"next"
    finally:
        import subprocess

        subprocess.run(["umount", str(small)], check=True)
