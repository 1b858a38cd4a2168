"""The benchmarks' figures as charts (matplotlib, SVG), for the Performance page.

    python -m benchmarks.charts            # redraw docs/assets/charts/ from benchmarks/figures.json
    python -m benchmarks.charts --figures F --out DIR

``benchmarks/figures.json`` holds the figures recorded on the Performance page, each section
with the date, commit and command of its run. A benchmark run draws its own figures with the
same functions when given ``--charts DIR`` (``python -m benchmarks``, ``benchmarks.incremental``,
``benchmarks.sharded``): each builds a section of the same shape from what it measured.

The SVG files are the same bytes for the same figures and matplotlib version (no date, ids
from a fixed salt), so a test can check that the committed charts are drawn from the file.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
FIGURES = ROOT / "figures.json"
CHARTS = ROOT.parent / "docs" / "assets" / "charts"

#: Colours by role, the same in every chart: ours, the other approach, a third one.
OURS, THEIRS, THIRD = "#1f6fb4", "#d9822b", "#8c8c8c"

Section = dict[str, Any]


def _figure(rows: int, cols: int, height: float) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    matplotlib.rcParams["svg.hashsalt"] = "flyte-checkpoint"
    fig = Figure(figsize=(9, height), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, axes


def _source(fig: Any, section: Section) -> None:
    """The title, and below the panels the legend under where the figures come from."""
    fig.suptitle(section["title"], fontsize=11, fontweight="bold")
    fig.legend(
        *fig.axes[0].get_legend_handles_labels(),
        loc="outside lower center",
        ncols=3,
        fontsize=8,
        frameon=False,
        title=textwrap.fill(
            f"{section['command']} ({section['date']}, commit {section['commit']}; {section['conditions']})",
            width=140,
        ),
        title_fontsize=7,
    )


def _bars(
    ax: Any, groups: list[str], series: list[tuple[str, str, list[float]]], unit: str, log: bool
) -> None:
    """Horizontal bars: one group per label (top to bottom), one bar per series, values written."""
    n = len(series)
    height = 0.8 / n
    for i, (label, colour, values) in enumerate(series):
        ys = [g + (i - (n - 1) / 2) * height for g in range(len(groups))]
        bars = ax.barh(ys, values, height=height * 0.92, color=colour, label=label)
        ax.bar_label(bars, labels=[f"{v:.2f}{unit}" for v in values], padding=2, fontsize=7)
    ax.set_yticks(range(len(groups)), groups)
    ax.invert_yaxis()
    every = [v for _, _, values in series for v in values]
    if log:  # from half the smallest value, so that every bar shows; room for the labels
        ax.set_xscale("log")
        ax.set_xlim(min(every) / 2, max(every) * 6)
    else:
        ax.set_xlim(0, max(every) * 1.3)
    ax.tick_params(labelsize=8)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def suite(section: Section) -> Any:
    """Ours against Flyte and tar, per data set: save and load seconds (log scale)."""
    rows = {(r["data"], r["approach"]): r for r in section["rows"]}
    data = list(dict.fromkeys(r["data"] for r in section["rows"]))
    fig, axes = _figure(1, 2, 3.6)
    for ax, what in zip(axes[0], ("save", "load"), strict=True):
        series = [
            (name, colour, [rows[(d, approach)][f"{what}_s"] for d in data])
            for name, approach, colour in (
                ("ours", "ours", OURS),
                ("flyte.Checkpoint", "flyte", THEIRS),
                ("tar", "tar", THIRD),
            )
            if all((d, approach) in rows for d in data)
        ]
        _bars(ax, data, series, " s", log=True)
        ax.set_title(f"{what}, seconds (log scale; less is better)", fontsize=9)
    _source(fig, section)
    return fig


def s3(section: Section) -> Any:
    """Ours against boto3 on the S3 server: save and load seconds."""
    rows = section["rows"]
    data = [r["data"] for r in rows]
    fig, axes = _figure(1, 2, 3.4)
    panels = (
        ("save (full-object CRC32), s", "ours_save_s", "upload_s"),
        ("load, s", "ours_load_s", "download_s"),
    )
    boto3 = "boto3 (upload_file; the best of download_file and GET)"
    for ax, (title, ours, theirs) in zip(axes[0], panels, strict=True):
        series = [("ours", OURS, [r[ours] for r in rows]), (boto3, THEIRS, [r[theirs] for r in rows])]
        _bars(ax, data, series, " s", log=False)
        ax.set_title(title + " (less is better)", fontsize=9)
    _source(fig, section)
    return fig


def _one_panel(
    section: Section, height: float, labels: list[str], series: list, title: str, log: bool
) -> Any:
    fig, axes = _figure(1, 1, height)
    _bars(axes[0][0], labels, series, " s", log=log)
    axes[0][0].set_title(title, fontsize=9)
    _source(fig, section)
    return fig


def background(section: Section) -> Any:
    """Seconds the caller is blocked: save_sync against save_background."""
    rows = section["rows"]
    series = [
        ("save_sync", THEIRS, [r["sync_s"] for r in rows]),
        ("save_background (the snapshot)", OURS, [r["blocked_s"] for r in rows]),
    ]
    title = "seconds the training loop waits (less is better)"
    return _one_panel(section, 2.8, [r["backend"] for r in rows], series, title, log=False)


def incremental(section: Section) -> Any:
    """A full save against an incremental one (one file changed), per store."""
    rows = section["rows"]
    labels = [f"{r['store']}\n{r['content']}" if r["content"] != "random" else r["store"] for r in rows]
    series = [
        ("full save", THEIRS, [r["full_s"] for r in rows]),
        ("incremental save", OURS, [r["incremental_s"] for r in rows]),
    ]
    return _one_panel(section, 4.6, labels, series, "seconds (log scale; less is better)", log=True)


def sharded(section: Section) -> Any:
    """A sharded save against gathering every shard on rank 0, per backend."""
    rows = section["rows"]
    series = [
        ("save_sharded, every rank", OURS, [r["sharded_s"] for r in rows]),
        ("gathered on rank 0 over gloo, then saved", THEIRS, [r["gathered_gloo_s"] for r in rows]),
        ("gathered for free (hard links), then saved", THIRD, [r["gathered_free_s"] for r in rows]),
    ]
    return _one_panel(
        section, 2.9, [r["backend"] for r in rows], series, "seconds (less is better)", log=False
    )


#: Chart functions by section name of figures.json; each writes ``<name>.svg``.
CHARTS_BY_SECTION: dict[str, Callable[[Section], Any]] = {
    "suite": suite,
    "s3": s3,
    "background": background,
    "incremental": incremental,
    "sharded": sharded,
}


def draw(figures: dict[str, Section], out: Path) -> list[Path]:
    """Write a chart for each section of ``figures`` that has one, into ``out``; their paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, section in figures.items():
        chart = CHARTS_BY_SECTION.get(name)
        if chart is None:
            continue
        path = out / f"{name}.svg"
        chart(section).savefig(path, format="svg", metadata={"Date": None, "Creator": None})
        written.append(path)
    return written


def renamed(rows: list[dict], fields: dict[str, Any]) -> list[dict]:
    """Each row with the chart's field names: ``fields`` maps a name to the row's key, or to a
    function of the row."""
    return [{k: f(r) if callable(f) else r[f] for k, f in fields.items()} for r in rows]


def run_section(title: str, command: str, conditions: str, rows: list[dict]) -> Section:
    """A section for the figures of the run in progress (dated today, at the checkout's commit)."""
    import datetime
    import subprocess

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return {
        "title": title,
        "date": datetime.date.today().isoformat(),
        "commit": commit or "unknown",
        "command": command,
        "conditions": conditions,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.charts", description=__doc__.split("\n")[0])
    p.add_argument("--figures", type=Path, default=FIGURES, help="the recorded figures (JSON)")
    p.add_argument("--out", type=Path, default=CHARTS, help="where the SVG files go")
    args = p.parse_args(argv)
    for path in draw(json.loads(args.figures.read_text()), args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
