"""Partial restore (issue 18's goal), measured as ratios within one run.

Restoring one 1 MiB file from an indexed object of the model data set (1 GiB at full size)
with ``load(members=[...])``, against a full ``load()`` of the same object: the bytes each
reads from the store (counted by the load's progress callback) and its time. Goal: the
partial load reads at most 1 MiB plus the index.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from pathlib import Path

MEMBER = "extra/wanted.bin"


def tree_with_one_file(data: Path, work: Path) -> Path:
    """``data``'s files (hard links: nothing copied) and one 1 MiB random file, ``MEMBER``."""
    tree = work / "partial-src"
    (tree / "extra").mkdir(parents=True)
    for f in sorted(data.iterdir()):
        os.link(f, tree / f.name)
    (tree / MEMBER).write_bytes(os.urandom(2**20))
    return tree


def suite(data: Path, work: Path, runs: int, measure: Callable[..., dict], warm: int) -> dict[str, float]:
    """Medians of the partial and the full load's time, their bytes read, the object's size."""
    tree = tree_with_one_file(data, work)
    obj = work / "partial.obj"
    measure("ours_save", str(tree), str(obj), warm=warm, inputs=(str(tree),))
    res: dict[str, list[dict]] = {"partial": [], "full": []}
    for i in range(runs):
        order = ("partial", "full") if i % 2 == 0 else ("full", "partial")
        for kind in order:
            op = (
                ("ours_partial_load", str(obj), MEMBER)
                if kind == "partial"
                else ("ours_counted_load", str(obj))
            )
            res[kind].append(measure(*op, warm=warm, inputs=(str(obj),)))
    out = {"object_bytes": float(obj.stat().st_size)}
    for kind, rows in res.items():
        out[f"{kind}_s"] = statistics.median(r["seconds"] for r in rows)
        out[f"{kind}_read"] = float(max(r["bytes_read"] for r in rows))
    obj.unlink()
    return out


def fmt(r: dict[str, float]) -> str:
    mib = 2**20
    return "\n".join(
        [
            "| object MiB | one 1 MiB file: bytes read | s | full load: bytes read | s | read ratio | time ratio |",
            "|---|---|---|---|---|---|---|",
            f"| {r['object_bytes'] / mib:.0f} | {r['partial_read']:.0f} ({r['partial_read'] / mib:.3f} MiB)"
            f" | {r['partial_s']:.3f} | {r['full_read']:.0f} | {r['full_s']:.2f}"
            f" | {r['partial_read'] / r['full_read']:.4f}x | {r['partial_s'] / r['full_s']:.4f}x |",
        ]
    )
