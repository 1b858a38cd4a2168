"""The benchmark suite runs end to end at a tiny size (figures are not checked: they are
measured by `make bench`, not by tests)."""

from __future__ import annotations

import json
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
    args += ["--cache", str(tmp_path), "--charts", str(tmp_path / "charts")]
    table = run_benchmark("benchmarks", *args)
    assert_charts(tmp_path / "charts", "suite", "s3", "background")
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


def assert_charts(folder: Path, *names: str) -> None:
    """``folder`` holds an SVG chart of each of ``names``, and nothing else."""
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{n}.svg" for n in names)
    for name in names:
        svg = (folder / f"{name}.svg").read_text()
        assert svg.startswith("<?xml") and "</svg>" in svg and "<path" in svg, name


def test_incremental_and_sharded_benchmarks_run_and_draw_their_charts(tmp_path):
    """benchmarks.incremental and benchmarks.sharded at a tiny size, with --charts."""
    table = run_benchmark(
        "benchmarks.incremental", "--files", "3", "--scale", "0.01", "--runs", "1",
        "--work", str(tmp_path), "--charts", str(tmp_path / "incremental"),
    )  # fmt: skip
    assert re.search(r"^\| file \| [0-9.]+ \| [0-9.]+ \| [0-9.]+% \|", table, flags=re.M), table
    assert_charts(tmp_path / "incremental", "incremental")
    table = run_benchmark(
        "benchmarks.sharded",
        "--mib",
        "1",
        "--ranks",
        "2",
        "--runs",
        "1",
        "--charts",
        str(tmp_path / "sharded"),
    )
    assert re.search(r"^\| file \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|", table, flags=re.M), table
    assert_charts(tmp_path / "sharded", "sharded")


def test_the_committed_charts_are_drawn_from_the_recorded_figures(tmp_path):
    """docs/assets/charts/ is what benchmarks.charts draws from benchmarks/figures.json, byte for
    byte: a figure changed in one and not the other fails here (redraw with
    ``python -m benchmarks.charts``)."""
    from benchmarks import charts

    figures = json.loads(charts.FIGURES.read_text())
    drawn = charts.draw(figures, tmp_path)
    assert sorted(p.name for p in charts.CHARTS.iterdir()) == sorted(p.name for p in drawn)
    for path in drawn:
        assert path.read_bytes() == (charts.CHARTS / path.name).read_bytes(), (
            f"{path.name} differs from what benchmarks/figures.json draws: run python -m benchmarks.charts"
        )
    for name, section in figures.items():  # where each figure came from, as the page says
        assert {"title", "date", "commit", "command", "conditions", "rows"} <= set(section), name
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", section["date"]), name


def test_the_performance_page_tables_hold_the_figures_the_charts_draw():
    """Each row of benchmarks/figures.json has its times (every ``*_s`` figure, to 2 decimals) on
    one line of a table of docs/performance.md, which shows each chart: the tables below the
    charts and the charts say the same."""
    from benchmarks import charts

    page = (ROOT / "docs" / "performance.md").read_text()
    table_lines = [line for line in page.splitlines() if line.startswith("|")]
    for name, section in json.loads(charts.FIGURES.read_text()).items():
        if name in charts.CHARTS_BY_SECTION:
            assert f"(assets/charts/{name}.svg)" in page, name
        for row in section["rows"]:
            times = [f"{v:.2f}" for k, v in row.items() if k.endswith("_s")]
            assert times, (name, row)
            assert any(
                all(re.search(rf"(?<![\d.]){re.escape(t)}(?![\d])", line) for t in times)
                for line in table_lines
            ), f"{name}: no table line of docs/performance.md shows {times} ({row})"


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


def test_incremental_saves_of_two_versions_are_compared_on_the_same_tree():
    """benchmarks.incremental --against checks a commit out beside this checkout; both make
    their incremental saves of the same tree; the table gives each one's median and the ratio."""
    table = run_benchmark(
        "benchmarks.incremental", "--against", "HEAD", "--scale", "0.005", "--files", "3", "--runs", "1"
    )
    for what in ("wall s", "CPU s"):
        assert re.search(rf"^\| incremental save, median {what}.* \| [0-9.]+x \|$", table, flags=re.M), table
    worktrees = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True)
    assert "fcp-incr-" not in worktrees.stdout  # the checkout of HEAD was removed


def test_warming_memory_waits_the_settle_time(monkeypatch):
    """The main suite waits ``--settle`` seconds after warming, before the operation."""
    import benchmarks.__main__ as suite

    slept = []
    monkeypatch.setattr(suite.time, "sleep", slept.append)
    monkeypatch.setattr(suite, "settle_s", 2.5)
    suite.warm_memory(1 << 20)
    assert slept == [2.5]
