"""Background saves (issue 17's goals), measured as ratios within one run.

- Blocked time: how long ``save_background`` of the model folder keeps the caller (the snapshot
  into a staging folder) against a synchronous ``save_sync`` of the same folder, on the local
  file backend and, with ``--s3``, on moto's S3 server. Goals: <= 50% local, <= 10% S3.
- Loop throughput: a training loop that saves its state file every step in the background,
  against the same loop with no saves (and, for reference, with synchronous saves), when a save
  takes less time than a step. Goal: within 1.2x of no saves.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

#: The loop: steps, MiB hashed per step (GIL released), state file KiB saved each step; a
#: smaller one below scale 0.5 (a quick check, where the figures mean little).
LOOP = ("40", "48", "1024")
SMALL_LOOP = ("6", "4", "64")


def suite(
    name: str, data: Path, work: Path, runs: int, measure: Callable[..., dict], warm: int, env: dict | None
) -> dict[str, float]:
    """Medians of the blocked time (background) and save time (sync) of ``data``, and the loop's
    time in each mode, alternating the order of ours in each run. ``env`` points at S3 (else local)."""
    import statistics

    where = "s3://bench" if env else str(work)
    # Both start with the model in the page cache, as a training loop that just wrote it.
    same = {"env": env, "warm": warm, "inputs": (str(data),)}
    res: dict[str, list[float]] = {"sync": [], "blocked": [], "total": []}
    for i in range(runs):
        dest = f"{where}/{name}-bg-{i}/ckpt"

        def sync(dest: str = dest) -> None:
            res["sync"].append(measure("ours_save", str(data), dest + "-sync", **same)["seconds"])

        def background(dest: str = dest) -> None:
            out = measure("ours_background", str(data), dest, **same)
            res["blocked"].append(out["blocked_s"])
            res["total"].append(out["total_s"])

        for step in (sync, background) if i % 2 == 0 else (background, sync):
            step()
        if not env:
            for obj in (Path(dest), Path(dest + "-sync")):
                obj.unlink(missing_ok=True)
    return {k: statistics.median(v) for k, v in res.items()}


def loop_args(scale: float) -> tuple[str, str, str]:
    return LOOP if scale >= 0.5 else SMALL_LOOP


def loop_suite(work: Path, runs: int, measure: Callable[..., dict], scale: float) -> dict[str, float]:
    """Median loop time with no saves, background saves and synchronous saves (local backend)."""
    import statistics

    res: dict[str, list[float]] = {"none": [], "background": [], "sync": []}
    modes = list(res)
    for i in range(runs):
        for mode in modes[i % 3 :] + modes[: i % 3]:
            dest = str(work / f"loop-{mode}-{i}.obj")
            res[mode].append(measure("training_loop", mode, dest, *loop_args(scale))["loop_s"])
            Path(dest).unlink(missing_ok=True)
    return {k: statistics.median(v) for k, v in res.items()}


def fmt(rows: list[tuple[str, str, dict[str, float]]], loop: dict[str, float] | None, scale: float) -> str:
    lines = [
        "| data | backend | save_sync s | save_background blocked s | its upload s | blocked / sync |",
        "|---|---|---|---|---|---|",
    ]
    for data, backend, r in rows:
        lines.append(
            f"| {data} | {backend} | {r['sync']:.2f} | {r['blocked']:.3f} | {r['total']:.2f}"
            f" | {100 * r['blocked'] / r['sync']:.1f}% |"
        )
    if loop:
        steps, mib, kib = loop_args(scale)
        lines += [
            "",
            f"Training loop, {steps} steps hashing {mib} MiB each, saving a {kib} KiB state file every step"
            " (local backend):",
            "",
            "| no saves s | background saves s | ratio | synchronous saves s | ratio |",
            "|---|---|---|---|---|",
            f"| {loop['none']:.2f} | {loop['background']:.2f} | {loop['background'] / loop['none']:.2f}x"
            f" | {loop['sync']:.2f} | {loop['sync'] / loop['none']:.2f}x |",
        ]
    return "\n".join(lines)
