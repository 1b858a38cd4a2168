"""ctx(), the local task runner, latest_checkpoint and the previous-URI repair."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

import pytest

import flyte_checkpoint as fc


def test_ctx_is_falsy_outside_a_task():
    c = fc.ctx()
    assert not c
    assert c.attempt_number == 0 and c.checkpoint_paths.checkpoint_path is None


def test_the_quick_start_body_outside_a_task_says_so_and_what_to_do():
    """Proves: the Quick start's body run without @fc.task fails on ``fc.ctx().checkpoint`` with
    a NoTaskContextError (a CheckpointError and a RuntimeError) that names @fc.task and
    fc.Checkpoint, not with "'NoneType' object has no attribute 'load_sync'"."""
    from flyte_checkpoint.errors import CheckpointError, NoTaskContextError

    with pytest.raises(NoTaskContextError) as info:
        cp = fc.ctx().checkpoint
        cp.load_sync()
    assert isinstance(info.value, CheckpointError) and isinstance(info.value, RuntimeError)
    message = str(info.value)
    assert "no task is running" in message
    assert "@fc.task" in message and "fc.Checkpoint(destination_uri, previous_uri)" in message


def test_task_retries_and_resumes_from_checkpoint(tmp_path):
    seen = []

    @fc.task(retries=3, checkpoint_root=str(tmp_path))
    def count(n: int) -> int:
        cp = fc.ctx().checkpoint
        path = cp.load_sync()
        start = int(path.read_bytes()) if path else 0
        seen.append((fc.ctx().attempt_number, start))
        for i in range(start, n):
            if i > start and i % 3 == 0:
                raise RuntimeError(f"crash at {i}")
            cp.save_sync(str(i + 1).encode())
        return n

    assert count(10) == 10
    assert seen == [(0, 0), (1, 3), (2, 6), (3, 9)]


def test_each_attempt_gets_its_own_destination_and_the_previous_as_source(tmp_path):
    paths = []

    @fc.task(retries=2, checkpoint_root=str(tmp_path), run_name="r1")
    def fail():
        c = fc.ctx()
        paths.append(c.checkpoint_paths)
        assert c.checkpoint.remote_destination == c.checkpoint_paths.checkpoint_path
        raise ValueError(f"attempt {c.attempt_number}")

    with pytest.raises(ValueError, match="attempt 2"):
        fail()
    dests = [p.checkpoint_path for p in paths]
    assert dests == [str(tmp_path / "r1" / "fail" / str(i) / "_flytecheckpoints") for i in range(3)]
    assert [p.prev_checkpoint_path for p in paths] == [None, dests[0], dests[1]]


def test_async_task(tmp_path):
    @fc.task(retries=1, checkpoint_root=str(tmp_path))
    async def work() -> str:
        cp = fc.ctx().checkpoint
        path = await cp.load()
        if path is None:
            await cp.save(b"half")
            raise RuntimeError("crash")
        return path.read_bytes().decode()

    assert asyncio.run(work()) == "half"


def test_root_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYTE_CHECKPOINT_ROOT", f"file://{tmp_path}/envroot")

    @fc.task(run_name="r")
    def where():
        return fc.ctx().checkpoint_paths.checkpoint_path

    assert where() == str(tmp_path / "envroot" / "r" / "where" / "0" / "_flytecheckpoints")


def test_root_can_be_a_remote_uri(monkeypatch):
    monkeypatch.setenv("FLYTE_CHECKPOINT_ROOT", "memory://runs")

    @fc.task(retries=1, run_name="mem")
    def remote():
        cp = fc.ctx().checkpoint
        if cp.load_sync() is None:
            cp.save_sync(b"m")
            raise RuntimeError("again")
        return cp.remote_source

    assert remote() == "memory://runs/mem/remote/0/_flytecheckpoints"


def test_workspaces_are_removed_after_each_attempt(tmp_path):
    roots = []

    @fc.task(retries=1, checkpoint_root=str(tmp_path))
    def t():
        roots.append(fc.ctx().checkpoint.path.parent)
        if len(roots) == 1:
            raise RuntimeError("x")

    t()
    assert roots and not any(r.exists() for r in roots)


def test_latest_checkpoint_by_mtime_and_key(tmp_path):
    assert fc.latest_checkpoint(tmp_path) is None
    for name, mtime in [("a/last.ckpt", 2000), ("b/c/last.ckpt", 1500), ("last.ckpt", 1000)]:
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(name)
        os.utime(p, (mtime, mtime))
    assert fc.latest_checkpoint(tmp_path) == tmp_path / "a" / "last.ckpt"
    assert fc.latest_checkpoint(tmp_path, key=lambda p: len(p.parts)) == tmp_path / "b" / "c" / "last.ckpt"
    (tmp_path / "epoch=3.ckpt").write_text("")
    assert fc.latest_checkpoint(tmp_path, "*.ckpt") == tmp_path / "epoch=3.ckpt"
    assert fc.latest_checkpoint(tmp_path, "**/none.ckpt") is None
    assert fc.latest_checkpoint(tmp_path / "missing") is None


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://b/runs/r1/a0/3/ckpt", "s3://b/runs/r1/a0/2/ckpt"),
        ("s3a://b/r1/a0/2", "s3a://b/r1/a0/1"),
        ("gs://b/x/r1/a0/10/y", "gs://b/x/r1/a0/9/y"),
        ("abfss://c@acct.dfs.core.windows.net/r1/a0/5/z", "abfss://c@acct.dfs.core.windows.net/r1/a0/4/z"),
        ("az://c/r1/a0/2/z", "az://c/r1/a0/1/z"),
        ("gcs://b/r1/a0/1/z", "gcs://b/r1/a0/1/z"),  # n = 1 stays
        ("s3://b/r1/other/3/z", "s3://b/r1/other/3/z"),  # another action
        ("/local/r1/a0/3/z", "/local/r1/a0/3/z"),  # local: never rewritten
        ("file:///local/r1/a0/3/z", "file:///local/r1/a0/3/z"),
        ("memory://r1/a0/3/z", "memory://r1/a0/3/z"),
        ("s3://b/xr1/a0/3/z", "s3://b/xr1/a0/3/z"),  # names must match whole segments
    ],
)
def test_repair_union_prev_checkpoint_uri(uri, expected):
    assert fc.repair_union_prev_checkpoint_uri(uri, run_name="r1", action_name="a0") == expected


def test_checkpoint_repairs_remote_source_inside_a_task_only():
    @fc.task(run_name="r1")
    def a0():
        dest = "s3://b/r1/a0/3/out"
        buggy = fc.Checkpoint(dest, "s3://b/r1/a0/3/ckpt").remote_source  # names this attempt
        other = fc.Checkpoint(dest, "s3://b/r1/a0/1/ckpt").remote_source  # a deliberate choice
        local = fc.Checkpoint("/x/r1/a0/3/out", "/x/r1/a0/3/ckpt").remote_source
        return buggy, other, local

    assert a0() == ("s3://b/r1/a0/2/ckpt", "s3://b/r1/a0/1/ckpt", "/x/r1/a0/3/ckpt")
    outside = fc.Checkpoint("s3://b/r1/a0/3/out", "s3://b/r1/a0/3/ckpt").remote_source
    assert outside == "s3://b/r1/a0/3/ckpt"


def test_runner_with_a_remote_root_loads_the_previous_attempt(monkeypatch):
    monkeypatch.setenv("FLYTE_CHECKPOINT_ROOT", "memory://runs")
    starts = []

    @fc.task(retries=3, run_name="chain")
    def step():
        cp = fc.ctx().checkpoint
        path = cp.load_sync()
        n = int(path.read_bytes()) if path else 0
        starts.append(n)
        cp.save_sync(str(n + 1).encode())
        if n < 3:
            raise RuntimeError("again")
        return n

    assert step() == 3 and starts == [0, 1, 2, 3]


def test_task_without_parentheses_and_negative_retries(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYTE_CHECKPOINT_ROOT", str(tmp_path))

    @fc.task
    def plain():
        return fc.ctx().attempt_number, fc.ctx().checkpoint_paths

    attempt, paths = plain()
    assert attempt == 0 and paths.prev_checkpoint_path is None
    assert Path(paths.checkpoint_path).is_relative_to(tmp_path)
    with pytest.raises(ValueError, match="retries must be 0 or more"):
        fc.task(retries=-1)
    assert fc.ctx().checkpoint_paths.checkpoint_path is None  # the task's context ended with it


def test_default_root_is_a_folder_in_the_temp_dir_and_the_variable_overrides_it(tmp_path, monkeypatch):
    """README: ``FLYTE_CHECKPOINT_ROOT`` (any URI) is where ``@fc.task`` keeps each attempt's
    checkpoint; unset or blank, ``{tempfile.gettempdir()}/flyte-checkpoint-runs``."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    seen = []

    @fc.task(run_name="r")
    def where():
        seen.append(fc.ctx().checkpoint_paths.checkpoint_path)

    for value in (None, "", "  "):
        if value is None:
            monkeypatch.delenv("FLYTE_CHECKPOINT_ROOT", raising=False)
        else:
            monkeypatch.setenv("FLYTE_CHECKPOINT_ROOT", value)
        where()
    default = os.path.join(
        str(tmp_path / "tmp"), "flyte-checkpoint-runs", "r", "where", "0", "_flytecheckpoints"
    )
    assert seen == [default] * 3
    monkeypatch.setenv("FLYTE_CHECKPOINT_ROOT", "memory://elsewhere/runs")
    where()
    assert seen[-1] == "memory://elsewhere/runs/r/where/0/_flytecheckpoints"


def test_a_task_attempt_without_a_destination_says_so_rather_than_give_none():
    """Proves: ``checkpoint`` of an attempt given no destination (a Flyte task run without
    checkpoint paths; here our own context and the Flyte adapter's) raises a
    NoCheckpointDestinationError (a NoTaskContextError and a ValueError) that says so and what to
    do, as its type (``Checkpoint``, never ``None``) promises; ``on_terminate`` still raises a
    ValueError there."""
    from flyte_checkpoint.context import CheckpointPaths, TaskContext
    from flyte_checkpoint.errors import NoCheckpointDestinationError, NoTaskContextError
    from flyte_checkpoint.integrations.flyte import FlyteTaskContext

    contexts = [TaskContext(0, CheckpointPaths(None)), FlyteTaskContext(1, CheckpointPaths("", "/x"))]
    # Flyte's own TaskContext(attempt_number=0, checkpoint_paths=None): no paths at all, the same
    # error (it raised AttributeError on None.checkpoint_path)
    contexts += [TaskContext(attempt_number=0, checkpoint_paths=None), FlyteTaskContext(0, None)]  # type: ignore[arg-type]
    assert contexts[2].checkpoint_paths == contexts[3].checkpoint_paths == CheckpointPaths(None)
    for tctx in contexts:
        with pytest.raises(NoCheckpointDestinationError, match="has no checkpoint destination") as info:
            tctx.checkpoint.load_sync()
        assert isinstance(info.value, NoTaskContextError) and isinstance(info.value, ValueError)
        assert "fc.Checkpoint(destination_uri, previous_uri)" in str(info.value)
        with pytest.raises(ValueError, match="has no checkpoint destination"):
            tctx.on_terminate(lambda: b"x")
