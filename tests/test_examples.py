"""Every example in examples/ runs and does what its docstring says."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

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


def test_torch_sharded_dcp_resumes_after_a_rank_is_killed_with_identical_weights(tmp_path):
    """Proves: 4 torchrun ranks (gloo, CPU) saving torch.distributed.checkpoint folders with
    save_sharded, one rank SIGKILLed after epoch 3's save, resume at epoch 4 from the one object
    with the weights of a run that was never killed."""
    killed = run_args("torch_sharded_dcp.py", "--dest", str(tmp_path / "a" / "ckpt"))
    assert re.findall(r"^attempt (\d)$", killed, re.M) == ["0", "1"]
    assert re.findall(r"starting at epoch (\d)", killed) == ["0", "4"]
    whole = run_args("torch_sharded_dcp.py", "--dest", str(tmp_path / "b" / "ckpt"), "--kill-at", "-1")
    assert re.findall(r"starting at epoch (\d)", whole) == ["0"]
    weights = re.findall(r"weights: (.*)", killed)
    assert weights and weights == re.findall(r"weights: (.*)", whole)


def test_flyte_sharded_dcp_retried_by_flyte_resumes_with_identical_weights(tmp_path):
    """Proves: inside a Flyte task (Flyte's local mode) 4 torchrun ranks save one sharded DCP
    checkpoint at the attempt's destination; rank 1 SIGKILLed after epoch 3's save fails the
    attempt, Flyte's own retry (one flyte run, two attempts) resumes at epoch 4, and the final
    weights equal a run never killed. flyte.Checkpoint and tarfile read the object as one gzip
    tar of the union of the ranks' files, and DCP loads those exact weights from Flyte's tree."""
    killed = run_args("flyte_sharded_dcp.py", "--raw", str(tmp_path / "a"))
    assert killed.count("task attempt:") == 2
    assert re.findall(r"starting at epoch (\d)", killed) == ["0", "4"]
    whole = run_args("flyte_sharded_dcp.py", "--raw", str(tmp_path / "b"), "--kill-at", "-1")
    assert re.findall(r"starting at epoch (\d)", whole) == ["0"]
    weights = re.findall(r"^weights: (.*)$", killed, re.M)
    assert len(weights) == 1 and weights == re.findall(r"^weights: (.*)$", whole, re.M)

    union = [".metadata"] + [f"__{rank}_0.distcp" for rank in range(4)]  # rank 0 also writes .metadata
    assert f"flyte.Checkpoint restored: {union}" in killed
    assert re.findall(r"weights read through flyte.Checkpoint: (.*) \(epoch 5\)", killed) == weights
    [dest] = re.findall(r"^checkpoint: (.*)$", killed, re.M)
    assert Path(dest).parent == tmp_path / "a"  # under the raw data path Flyte was given
    body = Path(dest).read_bytes()
    assert body[:2] == b"\x1f\x8b"
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        assert sorted(m.name for m in tar.getmembers() if m.isfile()) == union


def run_args(name: str, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout
