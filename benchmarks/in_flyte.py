"""Inside a Flyte task: ours and Flyte's own ``flyte.ctx().checkpoint`` save the same folder.

Both saves run in one attempt of one Flyte task (Flyte's local mode), one after the other, to
the destination Flyte gave the attempt: ``fc.ctx().checkpoint.save_sync(folder)`` and
``flyte.ctx().checkpoint.save_sync(folder)``. The order alternates between runs, so neither
always finds the folder warmer in the page cache. ``python -m benchmarks --in-flyte-only``
measures this alone; ``python -m benchmarks`` includes it when flyte is installed.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

APPROACHES = ("ours", "flyte")


def save_both(src: str, raw: str, order: str) -> dict[str, float]:
    """Run the Flyte task once (local mode, raw data under ``raw``); returns each save's time and
    the size of the object it left (run in a child process by ``benchmarks.ops``)."""
    import flyte

    import flyte_checkpoint as fc

    env = flyte.TaskEnvironment(name="bench_in_flyte")

    @env.task
    def save_twice(folder: str, order: str) -> str:
        out: dict[str, float] = {}
        for who in order.split(","):
            cp = fc.ctx().checkpoint if who == "ours" else flyte.ctx().checkpoint
            start = time.perf_counter()
            cp.save_sync(Path(folder))
            out[f"{who}_s"] = time.perf_counter() - start
            out[f"{who}_bytes"] = Path(fc.ctx().checkpoint.remote_destination).stat().st_size
        return json.dumps(out)

    flyte.init()
    name = Path(raw).name
    run_ctx = flyte.with_runcontext(mode="local", name=name, raw_data_path=raw, disable_run_cache=True)
    try:
        return json.loads(run_ctx.run(save_twice, src, order).outputs()[0])
    finally:  # Flyte's local mode keeps each run's metadata here
        shutil.rmtree(Path("/tmp/flyte/metadata") / name, ignore_errors=True)


def suite(name: str, data: Path, work: Path, runs: int, measure: Any, warm: int) -> dict[str, Any]:
    """Median save time of each approach inside one Flyte task, over ``runs`` runs."""
    results: list[dict[str, float]] = []
    for run in range(runs):
        order = ",".join(APPROACHES if run % 2 == 0 else reversed(APPROACHES))
        raw = work / f"in-flyte-{name}-{run}"
        results.append(measure("in_flyte_saves", str(data), str(raw), order, warm=warm, inputs=(str(data),)))
        shutil.rmtree(raw, ignore_errors=True)
    row: dict[str, Any] = {"data": name}
    for who in APPROACHES:
        row[f"{who}_s"] = statistics.median(r[f"{who}_s"] for r in results)
        row[f"{who}_bytes"] = results[-1][f"{who}_bytes"]
    return row


def fmt(rows: list[dict[str, Any]], sizes: dict[str, int]) -> str:
    lines = [
        "| data | MiB | ours save s | flyte.ctx().checkpoint save s | ratio | object MiB ours / flyte |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['data']} | {sizes[r['data']] / 2**20:.0f} | {r['ours_s']:.2f} | {r['flyte_s']:.2f}"
            f" | {r['flyte_s'] / r['ours_s']:.1f}x faster"
            f" | {r['ours_bytes'] / 2**20:.1f} / {r['flyte_bytes'] / 2**20:.1f} |"
        )
    return "\n".join(lines)
