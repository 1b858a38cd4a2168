"""A local run's attempts on disk (flyte_checkpoint.lifecycle.runs): resumed after the process dies,
removed when the run is done, refused while another process runs it.

The killed processes are children that report each step on stdout and wait on stdin; the
test kills them after a step they reported, never after a delay.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import ConfigurationError, RunInUseError
from tests.childlines import Child
from tests.reliability import backends

backend, backend_pool = backends.backend, backends.backend_pool  # fixtures

ROOT = Path(__file__).resolve().parents[1]

TRAIN = r"""
import os, sys
import flyte_checkpoint as fc


@fc.task(retries=int(os.environ.get("RETRIES", "0")), run_name="nightly")
def train(n: int) -> int:
    c = fc.ctx()
    cp = c.checkpoint
    path = cp.load_sync()
    start = int(path.read_bytes()) if path else 0
    print("ATTEMPT", c.attempt_number, "START", start, flush=True)
    for i in range(start, n):
        if os.environ.get("WAIT"):
            sys.stdin.readline()           # the test says when to go on (or kills us here)
        cp.save_sync(str(i + 1).encode())
        print("STEP", i + 1, flush=True)
    return n


print("RESULT", train(int(sys.argv[1])), flush=True)
"""


class Trainer(Child):
    """A child running the ``nightly`` run of ``train`` under ``root``."""

    def __init__(self, root: Path, n: int, *, wait: bool = True) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "FLYTE_CHECKPOINT_ROOT": str(root)}
        env.pop("FLYTE_CHECKPOINT_KEEP_RUNS", None)
        if wait:
            env["WAIT"] = "1"
        super().__init__([sys.executable, "-c", TRAIN, str(n)], env, ROOT)

    def go(self) -> str:
        self.say()
        return self.next()


def test_a_run_killed_by_sigkill_goes_on_with_the_next_attempt_and_its_newest_checkpoint(tmp_path):
    first = Trainer(tmp_path, 6)
    assert first.next() == "ATTEMPT 0 START 0"
    assert [first.go() for _ in range(3)] == ["STEP 1", "STEP 2", "STEP 3"]
    assert first.end(signal.SIGKILL)[0] == -signal.SIGKILL
    # Killed again before saving anything: its attempt counts, its checkpoint does not exist.
    second = Trainer(tmp_path, 6)
    assert second.next() == "ATTEMPT 1 START 3"
    assert second.end(signal.SIGKILL)[0] == -signal.SIGKILL
    assert not (tmp_path / "nightly" / "train" / "1" / "_flytecheckpoints").exists()
    third = Trainer(tmp_path, 6, wait=False)
    assert third.next() == "ATTEMPT 2 START 3"  # from attempt 0's, the newest that has one
    code, output = third.end()
    assert code == 0 and "RESULT 6" in output, output
    # The run finished: its checkpoints are gone (the lock file of its name stays, empty).
    assert not (tmp_path / "nightly" / "train").exists()
    assert [p.name for p in (tmp_path / "nightly").iterdir()] == [".train.lock"]


def test_a_second_process_running_the_same_run_is_refused(tmp_path, monkeypatch):
    holder = Trainer(tmp_path, 3)
    assert holder.next() == "ATTEMPT 0 START 0"  # the run is locked from here until it ends
    monkeypatch.setenv("FLYTE_CHECKPOINT_ROOT", str(tmp_path))
    calls = []

    @fc.task(run_name="nightly")
    def train(n: int) -> int:
        calls.append(n)
        return n

    with pytest.raises(RunInUseError) as info:
        train(3)
    message = str(info.value)
    assert "run 'nightly' of train is already running (another process" in message
    assert str(tmp_path / "nightly" / ".train.lock") in message
    assert "give this call another run_name" in message
    assert calls == []
    assert (tmp_path / "nightly" / "train" / "0" / ".attempt").exists()  # the holder's, untouched
    assert [holder.go() for _ in range(3)] == ["STEP 1", "STEP 2", "STEP 3"]
    code, output = holder.end()
    assert code == 0 and "RESULT 3" in output
    assert train(3) == 3 and calls == [3]  # free again once the holder has ended


def test_interrupted_by_ctrl_c_the_named_run_resumes_on_the_next_call(tmp_path):
    seen = []

    @fc.task(retries=1, checkpoint_root=str(tmp_path), run_name="r")
    def train(n: int) -> int:
        cp = fc.ctx().checkpoint
        path = cp.load_sync()
        start = int(path.read_bytes()) if path else 0
        seen.append((fc.ctx().attempt_number, start))
        for i in range(start, n):
            if len(seen) == 1 and i == 2:
                raise KeyboardInterrupt  # Ctrl-C twice: it is not retried, it ends the call
            cp.save_sync(str(i + 1).encode())
        return n

    with pytest.raises(KeyboardInterrupt):
        train(4)
    assert (tmp_path / "r" / "train" / "0" / "_flytecheckpoints").read_bytes() == b"2"
    assert train(4) == 4
    assert seen == [(0, 0), (1, 2)]
    assert not (tmp_path / "r" / "train").exists()


def test_a_named_run_on_a_remote_root_numbers_on_after_attempts_that_saved_nothing(monkeypatch):
    monkeypatch.setenv("FLYTE_CHECKPOINT_ROOT", "memory://runs-remote")
    seen = []

    @fc.task(run_name="m")
    def work() -> str:
        seen.append((fc.ctx().attempt_number, fc.ctx().checkpoint_paths.prev_checkpoint_path))
        if len(seen) == 1:
            fc.ctx().checkpoint.save_sync(b"0")
        if len(seen) < 3:
            raise KeyboardInterrupt
        path = fc.ctx().checkpoint.load_sync()
        return path.read_text() if path else "nothing"

    for _ in range(2):
        with pytest.raises(KeyboardInterrupt):
            work()
    assert work() == "0"
    assert seen == [
        (0, None),
        (1, "memory://runs-remote/m/work/0/_flytecheckpoints"),
        (2, "memory://runs-remote/m/work/0/_flytecheckpoints"),  # attempt 1 saved nothing
    ]
    from flyte_checkpoint.storage.registry import store_for

    assert list(store_for("memory://runs-remote/").list("memory://runs-remote/")) == []


def test_finished_runs_are_removed_so_the_root_does_not_grow(tmp_path, monkeypatch):
    monkeypatch.delenv("FLYTE_CHECKPOINT_KEEP_RUNS", raising=False)

    @fc.task(retries=1, checkpoint_root=str(tmp_path))
    def flaky(fail: bool) -> None:
        fc.ctx().checkpoint.save_sync(b"x")
        if fail:
            raise RuntimeError("always")

    for _ in range(5):
        flaky(False)
    with pytest.raises(RuntimeError):
        flaky(True)  # no run_name: it can never be resumed, so it is removed however it ends
    assert list(tmp_path.iterdir()) == []


def test_a_named_run_that_fails_keeps_its_checkpoints_to_be_resumed(tmp_path):
    @fc.task(checkpoint_root=str(tmp_path), run_name="r")
    def fails() -> None:
        fc.ctx().checkpoint.save_sync(b"x")
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        fails()
    with pytest.raises(RuntimeError):
        fails()
    assert sorted(p.name for p in (tmp_path / "r" / "fails").iterdir()) == ["0", "1"]


def test_keeping_a_finished_runs_checkpoints(tmp_path, monkeypatch):
    @fc.task(checkpoint_root=str(tmp_path), run_name="kept", keep_checkpoints=True)
    def kept() -> None:
        fc.ctx().checkpoint.save_sync(b"k")

    kept()
    assert (tmp_path / "kept" / "kept" / "0" / "_flytecheckpoints").read_bytes() == b"k"

    @fc.task(checkpoint_root=str(tmp_path), run_name="env")
    def by_env() -> None:
        fc.ctx().checkpoint.save_sync(b"e")

    monkeypatch.setenv("FLYTE_CHECKPOINT_KEEP_RUNS", "1")
    by_env()
    assert (tmp_path / "env" / "by_env" / "0" / "_flytecheckpoints").read_bytes() == b"e"
    monkeypatch.setenv("FLYTE_CHECKPOINT_KEEP_RUNS", "maybe")
    with pytest.raises(ConfigurationError) as info:
        by_env()
    assert "FLYTE_CHECKPOINT_KEEP_RUNS='maybe' is not valid: set it to 1 to keep" in str(info.value)


@pytest.mark.parametrize("name", ["../victim", "..", ".", "a/b", "a\\b", " padded", "nul\0"])
def test_a_run_name_that_would_reach_outside_the_root_is_refused(tmp_path, name):
    """Proves: a finished run removes ``{root}/{run_name}/{function}``, so a ``run_name`` that is
    not one plain folder name is refused when the task is made, and nothing beside the root goes."""
    root, victim = tmp_path / "root", tmp_path / "victim" / "train"
    root.mkdir()
    victim.mkdir(parents=True)
    (victim / "mine.txt").write_text("not the run's")
    with pytest.raises(ValueError) as info:

        @fc.task(checkpoint_root=str(root), run_name=name)
        def train() -> None:
            fc.ctx().checkpoint.save_sync(b"x")

        train()
    assert f"run_name {name!r} is not a plain folder name" in str(info.value)
    assert (victim / "mine.txt").read_text() == "not the run's"


@pytest.mark.parametrize("name", ["r" * 256, "é" * 128, "a\udcff"])
def test_a_run_name_no_file_system_takes_is_refused_when_the_task_is_made(tmp_path, name):
    """Proves (issue 32, item 15): a ``run_name`` over 255 bytes (UTF-8), or one that cannot be
    written as UTF-8, gave a bare ``OSError [Errno 36]`` (or a UnicodeEncodeError) at each call;
    it is refused when the task is made, with a ConfigurationError (a ValueError) that says
    why, as the other bad names are. 255 bytes is the longest that works."""
    with pytest.raises(ConfigurationError) as info:

        @fc.task(checkpoint_root=str(tmp_path), run_name=name)
        def train() -> None:
            fc.ctx().checkpoint.save_sync(b"x")

    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert message.startswith(f"run_name {name[:40]!r}... ")
    assert "names the run's folder under the checkpoint root" in message
    assert ("is 256 bytes long (UTF-8)" in message and "at most 255" in message) or "UTF-8" in message
    assert list(tmp_path.iterdir()) == []

    longest = "é" * 127 + "r"  # 255 bytes

    @fc.task(checkpoint_root=str(tmp_path), run_name=longest, keep_checkpoints=True)
    def fits() -> bytes:
        fc.ctx().checkpoint.save_sync(b"kept")
        return fc.ctx().checkpoint_paths.checkpoint_path.encode()

    assert Path(os.fsdecode(fits())).read_bytes() == b"kept"


def test_a_function_name_too_long_for_its_runs_lock_file_is_refused_when_the_task_is_made(tmp_path):
    """Proves: the function's name names the attempts' folder and the run's lock file
    ``.{function}.lock``; one over 249 bytes is refused when the task is made."""
    namespace: dict[str, object] = {}
    exec(f"def {'f' * 250}():\n    return 1\n", namespace)  # a name too long to type in a file
    with pytest.raises(ConfigurationError) as info:
        fc.task(checkpoint_root=str(tmp_path), run_name="r")(namespace["f" * 250])
    assert "is 250 bytes long (UTF-8), and it names the folder of its runs' attempts" in str(info.value)
    assert "may be at most 249" in str(info.value)
    exec(f"def {'f' * 249}():\n    return 1\n", namespace)
    assert fc.task(checkpoint_root=str(tmp_path), run_name="r")(namespace["f" * 249])() == 1


def test_a_resumed_run_counts_the_retries_left_of_this_call(tmp_path, caplog):
    """Proves (issue 32, item 17): a resumed named run numbers its attempts on from the earlier
    call's, and the failures said "no retries left", then retried, then "-1 retries left";
    each call now counts its own retries down to "no retries left", on its last attempt."""

    @fc.task(retries=1, checkpoint_root=str(tmp_path), run_name="r")
    def train(interrupt: bool) -> None:
        if interrupt:
            raise KeyboardInterrupt  # the first call ends in its attempt 0, not retried
        raise RuntimeError("crash")

    with pytest.raises(KeyboardInterrupt):
        train(True)
    with caplog.at_level("WARNING", logger="flyte_checkpoint"), pytest.raises(RuntimeError):
        train(False)
    said = [m.split("; ")[-1] for m in caplog.messages if m.startswith("task train attempt")]
    assert said == ["1 retry left", "no retries left"]
    assert [m.split(" failed")[0] for m in caplog.messages if m.startswith("task train attempt")] == [
        "task train attempt 1",
        "task train attempt 2",
    ]


Seen = tuple[int, int, "str | None"]


def attempts_over_one_that_saved_nothing(
    root: str, run_name: str | None
) -> list[tuple[int, int, str | None]]:
    """The issue's run: attempt 0 saves step 3 and fails; attempt 1 fails before its first save
    (an out-of-memory error building the model); attempt 2 trains to the end. Each attempt's
    (number, step it started from, source URI)."""
    seen: list[Seen] = []

    @fc.task(retries=3, checkpoint_root=root, run_name=run_name)
    def train(n: int) -> int:
        c = fc.ctx()
        cp = c.checkpoint
        path = cp.load_sync()
        start = int(path.read_bytes()) if path else 0
        seen.append((c.attempt_number, start, c.checkpoint_paths.prev_checkpoint_path))
        if c.attempt_number == 1:
            raise MemoryError("building the model")
        for i in range(start, n):
            cp.save_sync(str(i + 1).encode())
            if c.attempt_number == 0 and i + 1 == 3:
                raise RuntimeError("crash after step 3")
        return n

    assert train(5) == 5
    return seen


@pytest.mark.parametrize("run_name", [None, "nightly"])
def test_an_attempt_that_saves_nothing_does_not_reset_the_progress(backend, run_name):
    """Proves (issue 32, item 6): attempt 2 loaded attempt 1's empty destination and started
    from 0; every attempt now resumes from the newest checkpoint any earlier attempt committed
    (attempt 0's step 3), on every backend, named run or not."""
    seen = attempts_over_one_that_saved_nothing(backend.fresh("runs"), run_name)
    assert [(n, start) for n, start, _ in seen] == [(0, 0), (1, 3), (2, 3)]
    assert seen[2][2] == seen[1][2] and seen[1][2] is not None and seen[1][2].endswith("/0/_flytecheckpoints")


def test_an_attempt_that_saves_nothing_does_not_reset_the_progress_in_memory():
    seen = attempts_over_one_that_saved_nothing("memory://runs-nothing-saved", None)
    assert [(n, start) for n, start, _ in seen] == [(0, 0), (1, 3), (2, 3)]
    source = seen[2][2]
    assert source is not None and source.startswith("memory://runs-nothing-saved/run-")
    assert source.endswith("/train/0/_flytecheckpoints")


@pytest.mark.parametrize("kind", ["fifo", "folder", "link to nowhere"])
def test_something_other_than_a_file_at_the_lock_path_is_an_error_naming_it(tmp_path, kind):
    """Proves: a FIFO, a folder or a link leading nowhere where a named run's lock file goes
    (left by hand, by another tool, or planted) is a StoreError (a CheckpointError and an
    OSError) naming the path, what is there and what to do, and the task's function does not
    run. A FIFO made the call hang for ever in ``open`` (waiting for a reader); a folder and a
    link raised a bare IsADirectoryError or FileNotFoundError. Once it is removed, the run
    goes on."""
    import threading

    from flyte_checkpoint.errors import CheckpointError, StoreError
    from tests.reliability.gates import HANG

    lock = tmp_path / "r" / ".train.lock"
    lock.parent.mkdir()
    if kind == "fifo":
        os.mkfifo(lock)
    elif kind == "folder":
        lock.mkdir()
    else:
        lock.symlink_to(tmp_path / "nowhere" / "x")
    calls: list[int] = []

    @fc.task(retries=0, checkpoint_root=str(tmp_path), run_name="r")
    def train(n: int) -> int:
        calls.append(n)
        return n

    raised: list[BaseException] = []

    def call() -> None:
        try:
            train(1)
        except BaseException as exc:  # kept for the test's thread
            raised.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    caller.join(HANG)
    if caller.is_alive():  # a writer waiting for the FIFO's reader: give it one, then fail
        os.close(os.open(lock, os.O_RDONLY | os.O_NONBLOCK))
        caller.join(HANG)
        pytest.fail(f"the call hung with a {kind} at the run's lock path")
    [error] = raised
    assert isinstance(error, StoreError) and isinstance(error, CheckpointError), repr(error)
    what = {"fifo": "a FIFO", "folder": "a folder", "link to nowhere": "a link"}[kind]
    assert f"{lock} is {what}, not the run's lock file" in str(error)
    assert "remove it" in str(error) and calls == []
    if kind == "folder":
        lock.rmdir()
    else:
        lock.unlink()
    assert train(2) == 2 and calls == [2]


def test_a_named_run_on_a_system_without_fcntl_is_refused_naming_the_lock_and_what_to_do(
    tmp_path, monkeypatch
):
    """Proves (issue 35): where ``fcntl`` cannot be imported (Windows), a named run on a local
    root raises ConfigurationError naming the run, the lock file and what to do (it raised a bare
    ModuleNotFoundError), and the task's function does not run; a run on a remote root takes no
    lock and runs."""
    import sys

    from flyte_checkpoint.errors import ConfigurationError

    calls: list[str] = []

    def make(root: str):
        @fc.task(retries=0, checkpoint_root=root, run_name="r")
        def train(where: str) -> str:
            calls.append(where)
            return where

        return train

    monkeypatch.setitem(sys.modules, "fcntl", None)  # import fcntl raises ImportError
    with pytest.raises(ConfigurationError) as info:
        make(str(tmp_path))("local")
    message = str(info.value)
    assert "run 'r' of train" in message and str(tmp_path / "r" / ".train.lock") in message, message
    assert "no fcntl (Windows)" in message and "remote checkpoint_root" in message, message
    assert calls == []
    assert make("memory://runs-no-fcntl")("remote") == "remote"
    assert calls == ["remote"]
