"""Loads of the same data by two versions of this repository, interleaved in one run.

    python -m benchmarks.versions a604c1e^            # that commit against this checkout
    python -m benchmarks.versions a604c1e^ HEAD~3 --sets model,small --runs 11
    python -m benchmarks.versions HEAD --scale 0.01 --runs 1   # a quick check

Each version (a commit, checked out in a temporary worktree; or ``.``, this checkout as it
is) saves each data set with its own code, so each loads the object its own save writes.
Then the loads alternate, the order rotating each round, each in a fresh process
(``load_sync()`` timed inside it) after ``sync``, with the page cache dropped where the
process may (as root) and the object read back into it: what a task that restarts finds.
Memory is not warmed first, as the main suite does (``benchmarks.warm_memory``, which then
waits 3 s): a load right after a process had touched and freed 2.4 GB was often up to 3
times as slow, whichever version loaded.
Before timing, each version loads once so that its bytecode is compiled and written
(``PYTHONDONTWRITEBYTECODE`` is removed from the processes' environment): otherwise a
version whose ``__pycache__`` is missing compiles its modules inside every timed load, about
0.03 s, which flatters the other. The report is each version's median (and fastest) load and the
ratio of its median to the first's; every run's time goes to stderr. This machine's times
drift through a day, and medians of 9 runs have differed by 20% between runs an hour apart:
compare versions within one run, and run it more than once.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from . import datasets
from .__main__ import can_reset_page_cache, reset_page_cache

_REPO = Path(__file__).resolve().parent.parent
_SETS = {"model": datasets.model_like, "jsonl": datasets.json_lines, "small": datasets.small_files}

# Run in a fresh process with the version's checkout first on sys.path.
_CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
import flyte_checkpoint as fc
if sys.argv[2] == "save":
    fc.Checkpoint(sys.argv[3]).save_sync(sys.argv[4])
else:
    cp = fc.Checkpoint(sys.argv[4], sys.argv[3])
    t = time.perf_counter()
    cp.load_sync()
    print(time.perf_counter() - t)
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _child(root: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(root), *args], env=_env(), capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"{root}: {' '.join(args[:1])} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def _checkout(rev: str, into: Path) -> Path:
    if rev == ".":
        return _REPO
    done = subprocess.run(
        ["git", "-C", str(_REPO), "worktree", "add", "--detach", "--force", str(into), rev],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise SystemExit(f"cannot check out {rev!r}: {done.stderr.strip()}")
    return into


def compare(
    revs: list[str], sets: list[str], runs: int, data: Path, work: Path, scale: float = 1.0
) -> list[str]:
    """Markdown lines: per data set, each version's median load time and ratio to the first."""
    if len(set(revs)) != len(revs):
        raise SystemExit(f"compare different versions, not {revs}")
    lines = ["| data | " + " | ".join(f"{rev} median (min)" for rev in revs) + " | ratio of medians |"]
    lines.append("|---" * (len(revs) + 2) + "|")
    roots: dict[str, Path] = {}
    try:
        for i, rev in enumerate(revs):
            roots[rev] = _checkout(rev, work / f"v{i}")
        for name in sets:
            src = _SETS[name](data, scale)
            objs = {rev: work / f"{name}-{i}.tgz" for i, rev in enumerate(revs)}
            for rev, root in roots.items():
                _child(root, "save", str(objs[rev]), str(src))
                _child(root, "load", str(objs[rev]), str(work / "warm"))  # compiles its bytecode
            times: dict[str, list[float]] = {rev: [] for rev in revs}
            for i in range(runs):
                order = revs[i % len(revs) :] + revs[: i % len(revs)]
                for rev in order:
                    os.sync()
                    reset_page_cache((str(objs[rev]),))
                    times[rev].append(float(_child(roots[rev], "load", str(objs[rev]), str(work / "unused"))))
            med = {rev: statistics.median(t) for rev, t in times.items()}
            first = med[revs[0]]
            cells = " | ".join(f"{med[rev]:.3f} s (min {min(times[rev]):.3f})" for rev in revs)
            ratios = ", ".join(f"{med[rev] / first:.2f}x" for rev in revs[1:])
            lines.append(f"| {name} | {cells} | {ratios} |")
            for rev in revs:  # every run, in order, to see the machine's noise
                print(f"{name} {rev}: " + " ".join(f"{t:.3f}" for t in times[rev]), file=sys.stderr)
            print(lines[-1], file=sys.stderr, flush=True)  # progress; the table follows on stdout
    finally:
        for root in roots.values():
            if root != _REPO:
                subprocess.run(
                    ["git", "-C", str(_REPO), "worktree", "remove", "--force", str(root)], check=False
                )
    if not can_reset_page_cache():
        lines.append(
            "(the page cache could not be reset: that needs root; each load found the object as the"
            " runs before left it)"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "revs", nargs="+", help="commits to compare (the first is the baseline); '.' is this checkout"
    )
    p.add_argument(
        "--sets", default="model,jsonl,small", help="data sets, comma-separated: model, jsonl, small"
    )
    p.add_argument("--runs", type=int, default=9)
    p.add_argument(
        "--scale", type=float, default=1.0, help="data set size (1.0: 1 GiB, 512 MiB, 20,000 files)"
    )
    p.add_argument("--data", type=Path, default=Path(__file__).parent / ".data")
    args = p.parse_args(argv)
    revs = args.revs if len(args.revs) > 1 else [*args.revs, "."]
    sets = args.sets.split(",")
    unknown = [s for s in sets if s not in _SETS]
    if unknown:
        p.error(f"unknown data sets {unknown}; choose from {sorted(_SETS)}")
    args.data.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fcp-versions-"))
    try:
        print("\n".join(compare(revs, sets, args.runs, args.data, work, args.scale)))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
