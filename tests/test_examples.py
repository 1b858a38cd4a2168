"""Every example in examples/ runs and does what its docstring says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
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
