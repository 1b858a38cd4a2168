"""Retention wired in: Checkpoint(retention=...), @fc.task(retention=...) and keep_checkpoints."""

from __future__ import annotations

import uuid
import warnings

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import ConfigurationError
from flyte_checkpoint.history.manifest import generation_uri, read_manifests
from flyte_checkpoint.storage.registry import store_for
from tests.test_retention_cleanup import put, series


def test_checkpoint_cleans_its_generations_after_a_commit_off_the_thread(tmp_path):
    dest = str(tmp_path / "a/ckpt")
    store = store_for(dest)
    with fc.Checkpoint(dest, retention=fc.Retention(keep_last=2)) as cp:
        for step in range(5):
            cp.save_sync(f"step {step}".encode(), step=step)
        cp.wait()
        assert [e.step for e in fc.history(dest)] == [4, 3]
        kept = sorted(u.rsplit("/", 1)[1] for u in store.list(dest + ".fcp-history/"))
        assert kept == ["g00000003.json", "g00000003.obj", "g00000004.json", "summary.json"]
    assert store.read_bytes(dest) == b"step 4"  # the object itself: never deleted


def test_keep_last_1_keeps_no_generation_and_no_old_manifest(tmp_path):
    dest = str(tmp_path / "a/ckpt")
    with fc.Checkpoint(dest, retention=fc.Retention(keep_last=1)) as cp:
        for step in range(4):
            cp.save_sync(f"step {step}".encode(), step=step)
    assert [e.step for e in fc.history(dest)] == [3]
    assert not [u for u in store_for(dest).list(dest) if u.endswith(".obj")]


def test_a_source_of_another_run_is_left_alone(tmp_path):
    """A warm start from another run's checkpoint, with earlier_attempts: its generations stay."""
    from flyte_checkpoint.lifecycle.runs import current_attempt
    from flyte_checkpoint.taskcontext import CheckpointPaths, TaskContext

    other = str(tmp_path / "other/0/ckpt")
    series(store_for(other), other, 3, run="other", attempt=7)
    dest = str(tmp_path / "mine/0/ckpt")
    token = current_attempt.set(
        TaskContext(0, CheckpointPaths(dest, other), run_name="mine", action_name="t")
    )
    try:
        with fc.Checkpoint(dest, other, retention=fc.Retention(keep_last=1, earlier_attempts=True)) as cp:
            cp.save_sync(b"a")
            cp.save_sync(b"b")
    finally:
        current_attempt.reset(token)
    assert [m.generation for m in read_manifests(store_for(other), other)] == [0, 1, 2]
    assert [e.run for e in fc.history(dest)] == ["mine"]


def test_the_loaded_object_is_protected(tmp_path):
    src = str(tmp_path / "run/0/ckpt")
    dest = str(tmp_path / "run/1/ckpt")
    store = store_for(src)
    series(store, src, 3, attempt=0)
    loaded = generation_uri(src, 0)
    from flyte_checkpoint.lifecycle.runs import current_attempt
    from flyte_checkpoint.taskcontext import CheckpointPaths, TaskContext

    cp = fc.Checkpoint(dest, src, retention=fc.Retention(keep_last=1, earlier_attempts=True))
    cp._loaded_from = loaded  # as a fallback load records it
    token = current_attempt.set(TaskContext(1, CheckpointPaths(dest, src), run_name="r"))
    try:
        cp.save_sync(b"y")  # its manifest names run r, as the source's do
    finally:
        current_attempt.reset(token)
    cp.close()
    assert store.stat(loaded) is not None  # protected
    assert store.stat(generation_uri(src, 1)) is None  # the previous attempt's older generation
    assert store.stat(src) is not None  # the object the attempt loads: protected


def test_without_a_policy_nothing_is_deleted(tmp_path):
    dest = str(tmp_path / "a/ckpt")
    store = store_for(dest)
    series(store, dest, 3)
    with fc.Checkpoint(dest) as cp:
        cp.save_sync(b"z")
    assert all(store.stat(generation_uri(dest, g)) is not None for g in (0, 1))


def test_retention_must_be_a_policy(tmp_path):
    with pytest.raises(ConfigurationError, match=r"fc\.Retention"):
        fc.Checkpoint(str(tmp_path / "x"), retention=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"fc\.Retention"):
        fc.task(retention={"keep_last": 2})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="not both"):
        fc.task(retention=fc.Retention(keep_last=1), keep_checkpoints=True)


def test_keep_checkpoints_still_works_with_a_deprecation_warning(tmp_path):
    with pytest.warns(DeprecationWarning, match="retention=fc.Retention"):

        @fc.task(checkpoint_root=str(tmp_path), run_name="kept", keep_checkpoints=True)
        def train() -> str:
            fc.ctx().checkpoint.save_sync(b"state")
            return "ok"

    assert train() == "ok"
    assert store_for(str(tmp_path)).stat(str(tmp_path / "kept/train/0/_flytecheckpoints")) == 5


def test_no_warning_without_keep_checkpoints(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        @fc.task(checkpoint_root=str(tmp_path), run_name="plain")
        def train() -> None:
            fc.ctx().checkpoint.save_sync(b"state")

        train()
    assert not (tmp_path / "plain/train").exists()  # as today: removed


def test_a_finished_run_keeps_what_its_policy_keeps(tmp_path):
    root = str(tmp_path)
    tries = []

    @fc.task(
        checkpoint_root=root,
        run_name=f"r-{uuid.uuid4().hex[:6]}",
        retries=2,
        retention=fc.Retention(keep_last=1),
    )
    def train() -> str:
        cp = fc.ctx().checkpoint
        assert cp._retention == fc.Retention(keep_last=1)
        n = fc.ctx().attempt_number
        dest = cp.remote_destination
        # what saves with manifests leave (wp-history writes them on save; here by hand)
        put(store_for(dest), dest, 0, attempt=n, current=True, run=fc.ctx().run_name)
        tries.append(dest)
        if n < 2:
            raise RuntimeError("again")
        return "done"

    assert train() == "done"
    store = store_for(root)
    assert store.stat(tries[2]) is not None  # the newest: kept
    assert store.stat(tries[0]) is None and store.stat(tries[1]) is None  # thinned by the policy


def test_the_local_runner_cleans_earlier_attempts_generations_during_the_run(tmp_path):
    """Its attempts are this library's: an attempt's clean-up takes its source's generations
    too (the source's object, the one it loaded, stays), without earlier_attempts; the run's
    end keeps what the policy keeps over every attempt."""
    seen = []

    @fc.task(checkpoint_root=str(tmp_path), run_name="gens", retries=1, retention=fc.Retention(keep_last=2))
    def train() -> None:
        cp = fc.ctx().checkpoint
        n = fc.ctx().attempt_number
        for step in range(3):
            cp.save_sync(f"{n}.{step}".encode(), step=10 * n + step)
        cp.wait()
        seen.append([e.step for e in fc.history(cp.remote_destination)])
        if n == 0:
            raise RuntimeError("again")
        assert cp.remote_source is not None
        seen.append([e.step for e in fc.history(cp.remote_source)])

    train()
    assert seen[0] == [2, 1]  # attempt 0
    assert seen[1] == [12, 11]  # attempt 1
    assert seen[2] == [2]  # attempt 0's object (attempt 1's source) stays; its generation went
    kept = [e.step for e in fc.history(str(tmp_path / "gens/train/1/_flytecheckpoints"))]
    assert kept == [12, 11]
    assert fc.history(str(tmp_path / "gens/train/0/_flytecheckpoints")) == []  # the run's end
