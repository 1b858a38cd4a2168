"""``fc.ctx()`` inside real Flyte v2 tasks: Flyte's local mode, and Flyte's pod entrypoint.

- Local mode (``flyte.with_runcontext(mode="local")``): a task with retries crashes and
  resumes through our checkpoint, at the paths Flyte gives it.
- The pod entrypoint (``a0``, the command a Flyte task's container runs) started as a
  subprocess, as a pod would be: attempts, and a pod restarted within one attempt.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from conftest import require
from flyte_checkpoint.errors import NoTaskContextError
from flyte_checkpoint.integrations.flyte import FlyteTaskContext, resolve_source
from flyte_checkpoint.storage.stores.memory import MemoryStore

try:
    import flyte
except ImportError:  # the fixture below skips, or fails under CI=true
    flyte = None

WHY = "flyte is not installed (pip install flyte==2.12.1)"


@pytest.fixture
def flyte_local(tmp_path, monkeypatch):
    """Run a Flyte task in Flyte's local mode with its data under tmp_path; returns a runner."""
    require(flyte is not None, WHY)
    for name in ("FLYTE_ATTEMPT_NUMBER", "JOBSET_RESTART_ATTEMPT"):
        monkeypatch.delenv(name, raising=False)
    flyte.init()
    SEEN.clear()
    names: list[str] = []

    def run(task, *args):
        # Each run its own raw data folder: a second local run in the same one would resume
        # from the checkpoint Flyte staged there for the first run's retries.
        names.append(f"fc-test-{os.urandom(6).hex()}")
        run.raw = tmp_path / ("raw" if len(names) == 1 else f"raw-{len(names)}")  # type: ignore[attr-defined]
        run_ctx = flyte.with_runcontext(
            mode="local",
            name=names[-1],
            raw_data_path=str(run.raw),  # type: ignore[attr-defined]
            run_base_dir=str(tmp_path / "meta"),
            disable_run_cache=True,
        )
        return run_ctx.run(task, *args).outputs()[0]

    yield run
    for name in names:  # Flyte's local mode keeps each run's metadata here, whatever run_base_dir says
        shutil.rmtree(Path("/tmp/flyte/metadata") / name, ignore_errors=True)


SEEN: list[dict] = []


def _count(n: int) -> int:
    """Count to n, saving after each step; crash on every third step of an attempt."""
    c = fc.ctx()
    cp = c.checkpoint
    path = cp.load_sync()
    start = int(path.read_bytes()) if path else 0
    fctx = flyte.ctx() if flyte is not None else None
    SEEN.append(
        {
            "type": type(c),
            "start": start,
            "attempt": c.attempt_number,
            "flyte_attempt": fctx.attempt_number if fctx else None,
            "paths": c.checkpoint_paths,
            "flyte_paths": fctx.checkpoint_paths if fctx else None,
            "same": fc.ctx() is c and c.checkpoint is cp,
            "dest": cp.remote_destination,
        }
    )
    for i in range(start, n):
        if i > start and i % 3 == 0:
            raise RuntimeError(f"crash at {i}")
        cp.save_sync(str(i + 1).encode())
    return n


if flyte is not None:
    env = flyte.TaskEnvironment(name="fc_tests")
    quick = flyte.RetryStrategy(count=3, backoff=flyte.Backoff(base=timedelta(0)))

    @env.task(retries=quick)
    def count(n: int) -> int:
        return _count(n)

    @env.task(retries=quick)
    @fc.task(retries=3)
    def count_anywhere(n: int) -> int:
        return _count(n)

    async def _count_async(n: int) -> int:
        cp = fc.ctx().checkpoint
        path = await cp.load()
        start = int(path.read_bytes()) if path else 0
        SEEN.append({"start": start, "type": type(fc.ctx()), "attempt": fc.ctx().attempt_number})
        for i in range(start, n):
            if i > start and i % 3 == 0:
                raise RuntimeError(f"crash at {i}")
            await cp.save(str(i + 1).encode())
        return n

    @env.task(retries=quick)
    async def count_async(n: int) -> int:
        return await _count_async(n)

    # @fc.task on either side of @env.task; without retries= it takes Flyte's (3), with it its own.
    @fc.task
    @env.task(retries=quick)
    def count_fc_above(n: int) -> int:
        return _count(n)

    @env.task(retries=quick)
    @fc.task
    def count_fc_under(n: int) -> int:
        return _count(n)

    @fc.task(retries=1)
    @env.task(retries=quick)
    def count_fc_above_own(n: int) -> int:
        return _count(n)

    @env.task(retries=quick)
    @fc.task(retries=1)
    def count_fc_under_own(n: int) -> int:
        return _count(n)

    @fc.task
    @env.task(retries=quick)
    async def count_fc_above_async(n: int) -> int:
        return await _count_async(n)

    @env.task
    def main(n: int) -> int:
        return count(n)

    @env.task
    def main_anywhere(n: int) -> int:
        return count_anywhere(n)

    @env.task
    async def main_async(n: int) -> int:
        return await count_async(n)

    @env.task(retries=quick)
    def count_over_nothing(n: int) -> int:
        """Attempt 0 saves step 3 and fails; attempt 1 fails before its first save; then on.
        (Flyte's local mode numbers every attempt 0: SEEN counts them.)"""
        cp = fc.ctx().checkpoint
        path = cp.load_sync()
        start = int(path.read_bytes()) if path else 0
        SEEN.append({"start": start, "src": cp.remote_source})
        if len(SEEN) == 2:
            raise MemoryError("building the model")
        for i in range(start, n):
            cp.save_sync(str(i + 1).encode())
            if len(SEEN) == 1 and i + 1 == 3:
                raise RuntimeError("crash after step 3")
        return n

    @env.task
    def main_over_nothing(n: int) -> int:
        return count_over_nothing(n)

    @env.task
    def where() -> str:
        c = fc.ctx()
        return json.dumps([c.attempt_number, type(c).__name__, flyte.ctx().attempt_number])


def test_local_flyte_run_crashes_and_resumes_through_our_checkpoint(flyte_local):
    assert flyte_local(main, 10) == 10
    assert [s["start"] for s in SEEN] == [0, 3, 6, 9]
    for s in SEEN:
        assert s["type"] is FlyteTaskContext and s["same"]
        flyte_paths = s["flyte_paths"]
        assert s["paths"] == fc.CheckpointPaths(flyte_paths.checkpoint_path, flyte_paths.prev_checkpoint_path)
        assert s["dest"] == str(flyte_local.raw / "checkpoint")
        assert s["attempt"] == s["flyte_attempt"]
    # The object at Flyte's destination is ours: the last count, as plain bytes.
    assert (flyte_local.raw / "checkpoint").read_bytes() == b"10"


def test_same_decorated_code_runs_locally_and_in_flyte(flyte_local, tmp_path, monkeypatch):
    monkeypatch.setenv("FLYTE_CHECKPOINT_ROOT", str(tmp_path / "local-root"))
    # Outside Flyte: the local runner retries, numbering attempts itself.
    assert count_anywhere.func(10) == 10
    local = list(SEEN)
    assert [(s["start"], s["attempt"]) for s in local] == [(0, 0), (3, 1), (6, 2), (9, 3)]
    assert all(s["type"] is fc.TaskContext and s["flyte_paths"] is None for s in local)
    assert all(s["dest"].startswith(str(tmp_path / "local-root")) for s in local)
    # In Flyte: one call per Flyte attempt (Flyte retries), Flyte's paths.
    SEEN.clear()
    assert flyte_local(main_anywhere, 10) == 10
    assert [s["start"] for s in SEEN] == [0, 3, 6, 9]
    assert all(s["type"] is FlyteTaskContext for s in SEEN)
    assert all(s["dest"] == str(flyte_local.raw / "checkpoint") for s in SEEN)


def test_async_flyte_task(flyte_local):
    assert flyte_local(main_async, 7) == 7
    assert [s["start"] for s in SEEN] == [0, 3, 6]
    assert all(s["type"] is FlyteTaskContext for s in SEEN)


def test_in_flytes_local_mode_an_attempt_that_saves_nothing_does_not_reset_the_progress(flyte_local):
    """Issue 32, item 6, in Flyte's local mode: every attempt saves to the same destination,
    so after an attempt that saved nothing the destination still holds the newest checkpoint,
    and the next attempt resumes from it (point 2 of the adapter's rules: nothing to look back for)."""
    assert flyte_local(main_over_nothing, 5) == 5
    assert [s["start"] for s in SEEN] == [0, 3, 3]
    assert SEEN[2]["src"] == str(flyte_local.raw / "checkpoint")


def test_attempt_number_is_flytes(flyte_local, monkeypatch):
    assert json.loads(flyte_local(where)) == [0, "FlyteTaskContext", 0]
    monkeypatch.setenv("FLYTE_ATTEMPT_NUMBER", "4")
    assert json.loads(flyte_local(where)) == [4, "FlyteTaskContext", 4]


def test_flyte_local_mode_numbers_every_attempt_0_while_the_local_runner_counts(
    flyte_local, tmp_path, monkeypatch
):
    """README "Attempt numbers": the same retries, numbered differently; the checkpoint tells."""
    assert flyte_local(main_anywhere, 10) == 10
    assert [(s["start"], s["attempt"], s["flyte_attempt"]) for s in SEEN] == [
        (0, 0, 0),
        (3, 0, 0),
        (6, 0, 0),
        (9, 0, 0),
    ]
    SEEN.clear()
    monkeypatch.setenv("FLYTE_CHECKPOINT_ROOT", str(tmp_path / "local-root"))
    assert count_anywhere.func(10) == 10
    assert [(s["start"], s["attempt"], s["flyte_attempt"]) for s in SEEN] == [
        (0, 0, None),
        (3, 1, None),
        (6, 2, None),
        (9, 3, None),
    ]


def test_fc_task_above_env_task_returns_the_flyte_task_and_flyte_runs_it(flyte_local):
    for task in (count_fc_above, count_fc_above_own, count_fc_above_async):
        assert isinstance(task, flyte.TaskTemplate)
        assert env.tasks[task.name] is task  # the very task the environment holds (and deploys)
    # flyte.run takes it (it used to be a plain function: "On Flyte tasks can be run, not generic
    # functions or methods"); inside Flyte the function runs once per attempt and Flyte retries.
    assert flyte_local(count_fc_above, 10) == 10
    assert [s["start"] for s in SEEN] == [0, 3, 6, 9]
    assert all(s["type"] is FlyteTaskContext for s in SEEN)
    SEEN.clear()
    assert flyte_local(count_fc_above_own, 10) == 10  # Flyte's retries inside Flyte, whatever ours
    assert [s["start"] for s in SEEN] == [0, 3, 6, 9]
    SEEN.clear()
    assert flyte_local(count_fc_above_async, 7) == 7
    assert [(s["start"], s["type"]) for s in SEEN] == [
        (0, FlyteTaskContext),
        (3, FlyteTaskContext),
        (6, FlyteTaskContext),
    ]


@pytest.mark.parametrize("order", ["above", "under"])
def test_either_order_retries_outside_flyte_as_often_as_the_flyte_task(
    order, flyte_local, tmp_path, monkeypatch
):
    monkeypatch.setenv("FLYTE_CHECKPOINT_ROOT", str(tmp_path / "local-root"))
    task = {"above": count_fc_above, "under": count_fc_under}[order]
    assert task(10) == 10  # called outside Flyte, as a script or a test calls it
    assert [(s["start"], s["attempt"]) for s in SEEN] == [(0, 0), (3, 1), (6, 2), (9, 3)]
    assert all(s["type"] is fc.TaskContext for s in SEEN)


@pytest.mark.parametrize("order", ["above", "under"])
def test_retries_given_to_fc_task_are_the_local_runners(order, flyte_local, tmp_path, monkeypatch):
    monkeypatch.setenv("FLYTE_CHECKPOINT_ROOT", str(tmp_path / "local-root"))
    task = {"above": count_fc_above_own, "under": count_fc_under_own}[order]
    with pytest.raises(Exception, match="crash at 6"):
        task(10)
    assert [(s["start"], s["attempt"]) for s in SEEN] == [(0, 0), (3, 1)]


def test_async_flyte_task_under_fc_task_retries_outside_flyte(flyte_local, tmp_path, monkeypatch):
    monkeypatch.setenv("FLYTE_CHECKPOINT_ROOT", str(tmp_path / "local-root"))
    assert asyncio.run(count_fc_above_async(7)) == 7
    assert [(s["start"], s["attempt"]) for s in SEEN] == [(0, 0), (3, 1), (6, 2)]


def test_fc_task_on_a_flyte_task_without_a_python_function_names_what_to_do(flyte_local):
    from flyte.extras import ContainerTask

    container = ContainerTask(name="shell", image="alpine", command=["true"])
    with pytest.raises(TypeError) as info:
        fc.task(container)
    message = str(info.value)
    assert "'shell' (ContainerTask)" in message
    assert "put @fc.task on a function, above or under @env.task" in message


def test_a_plain_function_still_gets_no_retries_unless_given(tmp_path):
    calls = []

    @fc.task(checkpoint_root=str(tmp_path))
    def once() -> None:
        calls.append(fc.ctx().attempt_number)
        raise RuntimeError("no retry")

    with pytest.raises(RuntimeError, match="no retry"):
        once()
    assert calls == [0]


def test_outside_flyte_tasks_ctx_is_the_local_one(flyte_local):
    # flyte is imported in this process, but no Flyte task runs: nothing changes.
    assert "flyte" in sys.modules
    assert not fc.ctx()
    with pytest.raises(NoTaskContextError):
        fc.ctx().checkpoint  # noqa: B018

    @fc.task(retries=1)
    def local() -> str:
        return type(fc.ctx()).__name__

    assert local() == "TaskContext"
    assert asyncio.run(fc.task(_async_kind)()) == "TaskContext"


async def _async_kind() -> str:
    return type(fc.ctx()).__name__


# -- the pod entrypoint --------------------------------------------------------------------

POD_TASK = """
import json, os
import flyte
import flyte_checkpoint as fc

env = flyte.TaskEnvironment(name="pod")


@env.task
def steps() -> int:
    n = int(os.environ["STEPS"])
    c = fc.ctx()
    cp = c.checkpoint
    path = cp.load_sync()
    start = int(path.read_bytes()) if path else 0
    report = {"start": start, "attempt": c.attempt_number, "type": type(c).__name__,
              "restart": c.restart_attempt, "src": cp.remote_source, "dest": cp.remote_destination}
    if os.environ.get("ASK_FLYTE"):
        theirs = flyte.ctx().checkpoint.load_sync()
        report["flyte_start"] = int(theirs.read_bytes()) if theirs else 0
    print("REPORT " + json.dumps(report), flush=True)
    for i in range(start, n):
        if os.environ.get("CRASH_AT") == str(i):
            os._exit(3)  # the pod dies: no cleanup, no error upload
        cp.save_sync(str(i + 1).encode())
    return n
"""


class Pod:
    """Runs Flyte's task entrypoint (``a0``) the way a task pod does, in a subprocess."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "podtask.py").write_text(POD_TASK)
        (root / "inputs.pb").write_bytes(b"")  # the task has no inputs: an empty message

    def run(self, *, dest: str, prev: str, crash_at: int | None = None, **env: str) -> dict:
        out = self.root / "out"
        out.mkdir(exist_ok=True)
        a0 = Path(sys.executable).with_name("a0")
        cmd = [str(a0), "--inputs", str(self.root / "inputs.pb"), "--outputs-path", str(out)]
        cmd += ["--version", "v1", "--run-base-dir", str(out), "--raw-data-path", str(self.root / "raw")]
        cmd += ["--checkpoint-path", dest, "--prev-checkpoint", prev, "--run-name", "r1", "--name", "a0"]
        cmd += ["--project", "p", "--domain", "d", "--org", "o"]
        cmd += ["--resolver", "flyte._internal.resolvers.default.DefaultTaskResolver"]
        cmd += ["mod", "podtask", "instance", "steps"]
        full_env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("FLYTE_ATTEMPT_NUMBER", "JOBSET_RESTART_ATTEMPT", "TORCHELASTIC_RESTART_COUNT")
        }
        # A clustered worker runs without a controller (no connection to a Flyte backend).
        full_env.update(FLYTE_CLUSTERED_WORKER="1", STEPS="5", **env)
        if crash_at is not None:
            full_env["CRASH_AT"] = str(crash_at)
        proc = subprocess.run(cmd, cwd=self.root, env=full_env, capture_output=True, text=True, timeout=120)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
        assert len(lines) == 1, proc.stdout + proc.stderr
        assert proc.returncode == (3 if crash_at is not None else 0), proc.stdout + proc.stderr
        return json.loads(lines[0][len("REPORT ") :])


@pytest.fixture
def pod(tmp_path):
    require(flyte is not None, WHY)
    require(Path(sys.executable).with_name("a0").exists(), "Flyte's a0 entrypoint is not installed")
    return Pod(tmp_path)


def test_pod_attempts_use_flytes_paths_and_attempt_number(pod, tmp_path):
    first = str(tmp_path / "ck" / "0" / "_flytecheckpoints")
    second = f"file://{tmp_path}/ck/1/_flytecheckpoints"
    r0 = pod.run(dest=first, prev="", crash_at=2, FLYTE_ATTEMPT_NUMBER="0")
    assert r0 == {
        "start": 0,
        "attempt": 0,
        "type": "FlyteTaskContext",
        "restart": None,
        "src": None,
        "dest": first,
    }
    r1 = pod.run(dest=second, prev=first, FLYTE_ATTEMPT_NUMBER="1")
    assert (r1["start"], r1["attempt"], r1["src"]) == (2, 1, first)
    assert r1["dest"] == str(tmp_path / "ck" / "1" / "_flytecheckpoints")
    assert (tmp_path / "ck" / "1" / "_flytecheckpoints").read_bytes() == b"5"


def test_clustered_pod_restarted_within_an_attempt_resumes_from_the_destination(pod, tmp_path):
    dest = str(tmp_path / "ck" / "0" / "_flytecheckpoints")
    r0 = pod.run(dest=dest, prev="", crash_at=3, JOBSET_RESTART_ATTEMPT="0")
    assert (r0["start"], r0["restart"], r0["src"]) == (0, 0, None)
    # JobSet recreates the pod set from the same template: same paths, restart count 1.
    r1 = pod.run(dest=dest, prev="", JOBSET_RESTART_ATTEMPT="1", ASK_FLYTE="1")
    assert (r1["start"], r1["restart"], r1["src"]) == (3, 1, dest)
    assert r1["flyte_start"] == 3  # flyte.Checkpoint agrees, reading our object
    assert Path(dest).read_bytes() == b"5"


def test_pod_restarted_with_a_blank_previous_path_resumes_from_the_destination(pod, tmp_path):
    dest = str(tmp_path / "ck" / "0" / "_flytecheckpoints")
    assert pod.run(dest=dest, prev="", crash_at=4)["start"] == 0
    again = pod.run(dest=dest, prev="")
    assert (again["start"], again["src"], again["restart"]) == (4, dest, None)


def test_workers_restarted_by_the_elastic_agent_resume_from_this_attempts_destination(pod, tmp_path):
    """torchrun (or Flyte's PyTorch plugin) with max_restarts > 0 restarts the workers in the
    same pod and attempt, setting TORCHELASTIC_RESTART_COUNT: the destination holds what they
    saved before, newer than the previous attempt's checkpoint."""
    prev = tmp_path / "ck" / "0" / "_flytecheckpoints"
    prev.parent.mkdir(parents=True)
    prev.write_bytes(b"1")
    dest = str(tmp_path / "ck" / "1" / "_flytecheckpoints")
    first = pod.run(
        dest=dest, prev=str(prev), crash_at=3, FLYTE_ATTEMPT_NUMBER="1", TORCHELASTIC_RESTART_COUNT="0"
    )
    assert (first["start"], first["src"]) == (1, str(prev))
    again = pod.run(dest=dest, prev=str(prev), FLYTE_ATTEMPT_NUMBER="1", TORCHELASTIC_RESTART_COUNT="1")
    assert (again["start"], again["src"]) == (3, dest)  # not 1: no progress of this attempt redone
    assert Path(dest).read_bytes() == b"5"


def test_restarted_pod_with_nothing_saved_yet_in_this_attempt_uses_the_previous_attempt(pod, tmp_path):
    prev = tmp_path / "ck" / "0" / "_flytecheckpoints"
    prev.parent.mkdir(parents=True)
    prev.write_bytes(b"2")
    dest = str(tmp_path / "ck" / "1" / "_flytecheckpoints")
    r = pod.run(dest=dest, prev=str(prev), JOBSET_RESTART_ATTEMPT="2", FLYTE_ATTEMPT_NUMBER="1")
    assert (r["start"], r["src"], r["attempt"]) == (2, str(prev), 1)


def test_a_pod_after_an_attempt_that_saved_nothing_resumes_from_the_newest_earlier_attempt(pod, tmp_path):
    """Proves (issue 32, item 6, on a cluster): Flyte hands attempt 2 attempt 1's path only,
    and attempt 1 failed before its first save: it started from 0. With paths in Flyte's
    attempt layout (``.../{run}/{action}/{n}/...``), ``load()`` now looks back to attempt 0's."""

    def path(n: int) -> str:
        return str(tmp_path / "meta" / "r1" / "a0" / str(n) / "_flytecheckpoints")

    r0 = pod.run(dest=path(0), prev="", crash_at=2, FLYTE_ATTEMPT_NUMBER="0")
    assert (r0["start"], Path(path(0)).read_bytes()) == (0, b"2")
    r1 = pod.run(dest=path(1), prev=path(0), crash_at=2, FLYTE_ATTEMPT_NUMBER="1")  # dies before saving
    assert r1["start"] == 2 and not Path(path(1)).exists()
    r2 = pod.run(dest=path(2), prev=path(1), FLYTE_ATTEMPT_NUMBER="2")
    assert (r2["start"], r2["src"], r2["attempt"]) == (2, path(0), 2)
    assert Path(path(2)).read_bytes() == b"5"


# -- resolve_source without a pod -----------------------------------------------------------


def fc_redact(uri: str) -> str:
    from flyte_checkpoint.uri import redact

    return redact(uri)


@pytest.fixture
def denying_scheme():
    from flyte_checkpoint.storage.blobstore import BlobStore

    class Denying(BlobStore):
        def _deny(self, uri: str, *a: object) -> None:
            from flyte_checkpoint.errors import CheckpointPermissionError

            raise CheckpointPermissionError(f"access denied to {fc_redact(uri)}")

        open_read = open_write = stat = delete = list = _deny  # type: ignore[assignment]

    fc.register_store("denying-test", "deny", Denying)
    yield "deny"
    fc.unregister_store("denying-test")


def test_resolve_source_rules():
    from flyte_checkpoint.storage.registry import store_for

    store = store_for("memory://x")
    store.write_bytes("memory://rs/held", b"state")
    store.write_bytes("memory://rs/empty", b"")
    # A restarted pod or a blank previous path: the destination when it holds something.
    assert resolve_source("memory://rs/held", None) == "memory://rs/held"
    assert resolve_source("memory://rs/held", "memory://rs/p", restart_attempt=1) == "memory://rs/held"
    assert resolve_source("memory://rs/empty", "memory://rs/p", restart_attempt=1) == "memory://rs/p"
    assert resolve_source("memory://rs/missing", "  ", restart_attempt=3) is None
    # Otherwise the previous path, even when the destination holds something.
    assert resolve_source("memory://rs/held", "memory://rs/p") == "memory://rs/p"
    assert resolve_source("memory://rs/held", "memory://rs/p", restart_attempt=0) == "memory://rs/p"
    # Workers restarted by torch's elastic agent, in the same pod and attempt: the same rule.
    assert resolve_source("memory://rs/held", "memory://rs/p", elastic_restart=1) == "memory://rs/held"
    assert resolve_source("memory://rs/empty", "memory://rs/p", elastic_restart=2) == "memory://rs/p"
    assert resolve_source("memory://rs/held", "memory://rs/p", elastic_restart=0) == "memory://rs/p"


def test_resolve_source_steps_back_only_a_previous_uri_naming_this_attempt(monkeypatch):
    from flyte_checkpoint.integrations import flyte as adapter

    monkeypatch.setattr(adapter, "_size_of", lambda uri, retry: 1)  # every attempt saved: no look-back
    names = {"run_name": "r1", "action_name": "a0"}
    dest = "s3://b/m/r1/a0/3/_flytecheckpoints"
    assert resolve_source(dest, "s3://b/m/r1/a0/3/_flytecheckpoints", **names) == (
        "s3://b/m/r1/a0/2/_flytecheckpoints"
    )
    # A correct previous URI is kept (a blind repair would turn attempt 2 into attempt 1).
    assert resolve_source(dest, "s3://b/m/r1/a0/2/_flytecheckpoints", **names) == (
        "s3://b/m/r1/a0/2/_flytecheckpoints"
    )
    assert resolve_source(dest, "s3://b/m/r1/a0/3/_flytecheckpoints") == "s3://b/m/r1/a0/3/_flytecheckpoints"


def test_restart_check_that_cannot_read_the_destination_raises_naming_it(denying_scheme):
    dest = f"{denying_scheme}://KEY:SECRET@bucket/r/_flytecheckpoints"
    with pytest.raises(PermissionError) as info:
        resolve_source(dest, "memory://p", restart_attempt=1)
    message = str(info.value)
    assert "SECRET" not in message and "deny://<redacted>@bucket/r/_flytecheckpoints" in message
    assert "pod restart 1" in message and "credentials" in message
    with pytest.raises(PermissionError, match="worker restart 2 by the elastic agent of this attempt"):
        resolve_source(dest, "memory://p", elastic_restart=2)


def test_local_mode_that_cannot_read_the_destination_raises_not_starts_fresh(denying_scheme):
    """Proves: in Flyte's local mode the destination may hold the newest checkpoint (a re-run
    after a SIGTERM save), so a failed check of it is raised, never read as "no checkpoint"."""
    dest = f"{denying_scheme}://bucket/r/_flytecheckpoints"
    for prev in (None, "memory://p"):
        with pytest.raises(PermissionError) as info:
            resolve_source(dest, prev, local_mode=True)
        message = str(info.value)
        assert (
            "Flyte's local mode: could not check" in message
            and "deny://bucket/r/_flytecheckpoints" in message
        )


def test_blank_previous_path_and_an_unreadable_destination_start_fresh(denying_scheme, caplog):
    dest = f"{denying_scheme}://bucket/r/_flytecheckpoints"
    with caplog.at_level("WARNING", logger="flyte_checkpoint"):
        assert resolve_source(dest, None) is None
    assert "could not check deny://bucket/r/_flytecheckpoints" in caplog.text


class CountingStore(MemoryStore):
    """A memory store that counts ``stat`` calls per URI."""

    def __init__(self) -> None:
        self.stats: dict[str, int] = {}

    def stat(self, uri: str) -> int | None:
        self.stats[uri] = self.stats.get(uri, 0) + 1
        return super().stat(uri)


@pytest.fixture
def counting_store():
    store = CountingStore()
    fc.register_store("countstat-test", "countstat", lambda: store)
    yield store
    fc.unregister_store("countstat-test")


@pytest.mark.parametrize(
    ("restart", "prev", "lookups"),
    [(1, "countstat://b/r/a0/0/_flytecheckpoints", 1), (None, None, 1), (0, "countstat://b/p", 0)],
)
def test_a_clustered_restart_costs_one_size_lookup_of_the_destination(counting_store, restart, prev, lookups):
    """README: deciding whether a restarted pod resumes from this attempt's destination costs one
    size lookup of the destination, the first time ``fc.ctx().checkpoint`` is used; none when
    there is no restart and a previous path was given."""
    dest = "countstat://b/r/a0/1/_flytecheckpoints"
    counting_store.write_bytes(dest, b"saved by the earlier pods")
    tctx = FlyteTaskContext(
        attempt_number=1,
        checkpoint_paths=fc.CheckpointPaths(dest, prev),
        run_name="r",
        action_name="a0",
        restart_attempt=restart,
    )
    cps = [tctx.checkpoint for _ in range(3)]
    assert cps[0] is cps[1] is cps[2]
    assert counting_store.stats.get(dest, 0) == lookups
    assert cps[0].remote_source == (dest if lookups else prev)


def attempt_uri(n: int) -> str:
    return f"countstat://b/meta/r/a0/{n}/_flytecheckpoints"


def test_resolve_source_looks_back_past_attempts_that_saved_nothing(counting_store):
    """Proves: when the previous attempt's checkpoint (Flyte's layout) is absent or empty, the
    newest earlier attempt's that holds one is loaded, with one size lookup per attempt looked
    at; none holding one: the previous path as given (``load()`` then returns None)."""
    names = {"run_name": "r", "action_name": "a0"}
    counting_store.write_bytes(attempt_uri(0), b"1")
    counting_store.write_bytes(attempt_uri(1), b"3")
    counting_store.write_bytes(attempt_uri(3), b"")  # zero bytes: "no checkpoint" by the contract
    assert resolve_source(attempt_uri(5), attempt_uri(4), **names) == attempt_uri(1)
    assert [counting_store.stats.get(attempt_uri(n), 0) for n in range(5)] == [0, 1, 1, 1, 1]
    counting_store.stats.clear()
    assert resolve_source(attempt_uri(2), attempt_uri(1), **names) == attempt_uri(1)  # it saved
    assert counting_store.stats == {attempt_uri(1): 1}
    counting_store.stats.clear()
    assert resolve_source(attempt_uri(1), attempt_uri(0), **names) == attempt_uri(0)
    assert counting_store.stats == {}  # attempt 0 has nothing before it: not looked at
    # A previous path outside the layout is used as given, not looked at.
    assert (
        resolve_source(attempt_uri(1), "countstat://b/elsewhere/ckpt", **names)
        == "countstat://b/elsewhere/ckpt"
    )
    assert counting_store.stats == {}


def test_the_look_back_is_bounded(counting_store):
    """Proves: at most LOOK_BACK attempts before the previous one are looked at (one size lookup
    each), so a long run of attempts that saved nothing costs a bounded number of requests."""
    from flyte_checkpoint.integrations.flyte import LOOK_BACK

    names = {"run_name": "r", "action_name": "a0"}
    previous = 3 * LOOK_BACK
    counting_store.write_bytes(attempt_uri(previous - LOOK_BACK - 1), b"too far back")
    assert resolve_source(attempt_uri(previous + 1), attempt_uri(previous), **names) == attempt_uri(previous)
    assert sum(counting_store.stats.values()) == LOOK_BACK + 1
    counting_store.write_bytes(attempt_uri(previous - LOOK_BACK), b"just within")
    assert resolve_source(attempt_uri(previous + 1), attempt_uri(previous), **names) == attempt_uri(
        previous - LOOK_BACK
    )


def test_a_look_back_that_cannot_read_an_earlier_attempt_raises_naming_it(denying_scheme):
    """Proves: a size that cannot be read is raised (naming the URI, without credentials),
    never taken for "that attempt saved nothing"."""
    prev = f"{denying_scheme}://KEY:SECRET@bucket/meta/r/a0/2/_flytecheckpoints"
    dest = prev.replace("/2/", "/3/")
    with pytest.raises(PermissionError) as info:
        resolve_source(dest, prev, run_name="r", action_name="a0")
    message = str(info.value)
    assert "SECRET" not in message
    assert (
        "could not check attempt 2's checkpoint at deny://<redacted>@bucket/meta/r/a0/2/_flytecheckpoints"
        in message
    )
