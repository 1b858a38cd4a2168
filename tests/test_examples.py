"""Every example in examples/ runs and does what its docstring says."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run(name: str, tmp_path: Path) -> str:
    # Kept after the run (a finished run's checkpoints are removed by default), to be looked at.
    env = dict(os.environ, FLYTE_CHECKPOINT_ROOT=str(tmp_path / "root"), FLYTE_CHECKPOINT_KEEP_RUNS="1")
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_counter_sync_resumes_at_0_3_6_9(tmp_path):
    out = run("counter_sync.py", tmp_path)
    assert re.findall(r"starting at (\d+)", out) == ["0", "3", "6", "9"]
    assert "result: 10" in out


def test_counter_async_resumes_at_0_3_6_9(tmp_path):
    out = run("counter_async.py", tmp_path)
    assert re.findall(r"starting at (\d+)", out) == ["0", "3", "6", "9"]


def test_directory_checkpoint_resumes_after_each_crash(tmp_path):
    out = run("directory_checkpoint.py", tmp_path)
    assert re.findall(r"resuming after epoch (\d+)", out) == ["0", "1", "3"]
    assert "trained epochs: 5" in out
    assert len(list((tmp_path / "root").rglob("_flytecheckpoints"))) == 3


def test_demo_crashes_twice_and_finishes(tmp_path):
    out = run("demo.py", tmp_path)
    assert out.count("CRASH") == 2
    assert re.findall(r"restored progress: (\d+)", out) == ["3", "8"]
    assert "finished all 12 steps in 3 attempts" in out


def test_demo_leaves_nothing_in_the_temp_directory(tmp_path):
    """Proves: ``make demo`` (no FLYTE_CHECKPOINT_ROOT) removes its flyte-checkpoint-demo-*
    folder and leaves nothing else in the temp directory (checked with TMPDIR set to an empty one)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "FLYTE_CHECKPOINT_ROOT"}
    env["TMPDIR"] = str(tmp)
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "demo.py")], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"checkpoints under {tmp}/flyte-checkpoint-demo-" in out.stdout
    assert "finished all 12 steps in 3 attempts" in out.stdout
    assert sorted(p.name for p in tmp.iterdir()) == []


UNION = [".metadata"] + [f"__{rank}_0.distcp" for rank in range(4)]  # rank 0 also writes .metadata


@pytest.fixture(scope="module")
def never_killed(tmp_path_factory) -> str:
    """The exact final weights of torch_sharded_dcp's job (the training every sharded example
    runs) when no rank is killed."""
    tmp = tmp_path_factory.mktemp("whole")
    whole = run_args("torch_sharded_dcp.py", "--dest", str(tmp / "ckpt"), "--kill-at", "-1", tmp=tmp)
    assert re.findall(r"starting at epoch (\d)", whole) == ["0"]
    [weights] = re.findall(r"^weights: (.*)$", whole, re.M)
    return weights


def test_torch_sharded_dcp_resumes_after_a_rank_is_killed_with_identical_weights(tmp_path, never_killed):
    """Proves: 4 torchrun ranks (gloo, CPU) saving torch.distributed.checkpoint folders with
    save_sharded, one rank SIGKILLed after epoch 3's save, resume at epoch 4 from the one object
    with the weights of a run that was never killed."""
    killed = run_args("torch_sharded_dcp.py", "--dest", str(tmp_path / "a" / "ckpt"), tmp=tmp_path)
    assert re.findall(r"^attempt (\d)$", killed, re.M) == ["0", "1"]
    assert re.findall(r"starting at epoch (\d)", killed) == ["0", "4"]
    assert re.findall(r"^weights: (.*)$", killed, re.M) == [never_killed]


def check_flyte_reads(out: str, weights: str, dest: Path) -> None:
    """The example's checkpoint at ``dest`` is one gzip tar of the union of the ranks' DCP files
    (read with tarfile here), flyte.Checkpoint restored that union, and DCP loaded ``weights``
    (epoch 5's) from Flyte's tree."""
    assert re.findall(r"^checkpoint: (.*)$", out, re.M) == [str(dest)]
    body = dest.read_bytes()
    assert body[:2] == b"\x1f\x8b"
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        assert sorted(m.name for m in tar.getmembers() if m.isfile()) == UNION
    assert f"flyte.Checkpoint restored: {UNION}" in out
    assert re.findall(r"weights read through flyte.Checkpoint: (.*) \(epoch 5\)", out) == [weights]


@pytest.mark.slow
def test_flyte_sharded_dcp_in_local_mode_retried_by_flyte_resumes_with_identical_weights(
    tmp_path, never_killed
):
    """Proves: in a Flyte task run in Flyte's local mode (where the pytorch plugin starts no
    ranks), the body's 4 torchrun ranks save one sharded DCP checkpoint at the attempt's
    destination; rank 1 SIGKILLed after epoch 3's save fails the attempt, Flyte's own retry (one
    flyte run, two attempts) resumes at epoch 4, and the final weights are exactly those of a
    run never killed; Flyte's reader gets the union of the ranks' files."""
    killed = run_args("flyte_sharded_dcp.py", "--work", str(tmp_path), tmp=tmp_path)
    # The plugin ran the body once per attempt, in the example's own process, with no RANK set.
    assert killed.count("task attempt: no RANK, in the calling process;") == 2
    assert re.findall(r"starting at epoch (\d)", killed) == ["0", "4"]
    assert re.findall(r"^weights: (.*)$", killed, re.M) == [never_killed]
    check_flyte_reads(killed, never_killed, tmp_path / "raw" / "checkpoint")


@pytest.mark.slow
def test_flyte_sharded_dcp_as_pods_elastic_plugin_ranks_resume_with_identical_weights(tmp_path, never_killed):
    """Proves: run as Flyte's pod entrypoint (a0), the flyteplugins-pytorch task's elastic_launch
    starts 4 ranks that each get the attempt's paths from fc.ctx(); attempt 0 loses rank 1 after
    epoch 3's save and fails, attempt 1 (its previous path attempt 0's) resumes at epoch 4 with
    exactly the weights of a run never killed; Flyte's reader gets the union of the ranks' files."""
    killed = run_args("flyte_sharded_dcp.py", "--pods", "--work", str(tmp_path), tmp=tmp_path)
    assert "task attempt:" not in killed  # the plugin started the ranks, not the body
    assert re.findall(r"^pod attempt (\d) failed", killed, re.M) == ["0"]
    assert re.findall(r"starting at epoch (\d)", killed) == ["0", "4"]
    assert re.findall(r"^weights: (.*)$", killed, re.M) == [never_killed]
    check_flyte_reads(killed, never_killed, tmp_path / "ck" / "1" / "_flytecheckpoints")


def run_args(name: str, *args: str, tmp: Path) -> str:
    """Run an example with ``args``; its temporary files go under ``tmp`` (a SIGKILLed rank
    cannot remove its workspace)."""
    (tmp / "tmp").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TMPDIR=str(tmp / "tmp"))
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, timeout=600, env=env
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout
