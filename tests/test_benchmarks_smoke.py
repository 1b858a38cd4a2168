"""The benchmark suite runs end to end at a tiny size (figures are not checked: they are
measured by `make bench`, not by tests)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import require

ROOT = Path(__file__).resolve().parent.parent


def run_benchmark(module: str, *args: str) -> str:
    """What ``python -m module args`` printed, once it succeeded."""
    out = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return out.stdout


def test_benchmarks_run_at_a_small_size(tmp_path):
    import importlib.util

    require(importlib.util.find_spec("moto") is not None, "moto[server] is not installed")
    args = ["--scale", "0.003", "--runs", "1", "--s3", "--background", "--partial", "--settle", "0"]
    args += ["--cache", str(tmp_path)]
    table = run_benchmark("benchmarks", *args)
    for data in ("model", "jsonl", "small"):
        for approach in ("ours", "reference", "tar"):
            assert f"| {data} | {approach} |" in table
    assert "## Ratios (same run, same data)" in table
    assert "## moto S3 server" in table and table.count("x |") >= 3
    # flyte is a dev dependency: ours against flyte.ctx().checkpoint inside a Flyte task
    in_flyte = table.split("## Inside a Flyte task (local mode)", 1)[1]
    for data in ("model", "jsonl", "small"):
        assert re.search(rf"^\| {data} \| .* \| [0-9.]+x faster \|", in_flyte, flags=re.M), in_flyte
    assert "`import flyte_checkpoint` adds" in table
    partial = table.split("## Partial restore", 1)[1]
    assert re.search(
        r"^\| [0-9]+ \| [0-9]+ \(1\.00[0-9] MiB\) \| [0-9.]+ \| [0-9]+ \| .*x \|$", partial, flags=re.M
    ), partial
    background = table.split("## Background saves", 1)[1]
    assert re.search(r"^\| model \| file \| .*% \|$", background, flags=re.M), background
    assert re.search(r"^\| model \| s3 \(moto\) \| .*% \|$", background, flags=re.M), background
    assert re.search(r"^\| [0-9.]+ \| [0-9.]+ \| [0-9.]+x \|", background, flags=re.M), background


def test_two_versions_are_compared_on_the_same_data(tmp_path):
    """benchmarks.versions checks a commit out beside this checkout, and both save and load
    the data set; the table gives each one's median and the ratio."""
    args = ["HEAD", ".", "--sets", "small,model", "--scale", "0.002", "--runs", "2", "--data", str(tmp_path)]
    table = run_benchmark("benchmarks.versions", *args)
    for data in ("small", "model"):
        row = rf"^\| {data} \| [0-9.]+ s \(min [0-9.]+\) \| [0-9.]+ s \(min [0-9.]+\) \| [0-9.]+x \|$"
        assert re.search(row, table, flags=re.M), table
    worktrees = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True)
    assert "fcp-versions-" not in worktrees.stdout  # the checkout of HEAD was removed


def test_warming_memory_waits_the_settle_time(monkeypatch):
    """The main suite waits ``--settle`` seconds after warming, before the operation."""
    import benchmarks.__main__ as suite

    slept = []
    monkeypatch.setattr(suite.time, "sleep", slept.append)
    monkeypatch.setattr(suite, "settle_s", 2.5)
    suite.warm_memory(1 << 20)
    assert slept == [2.5]
