"""Sharded saves (issue 19): 4 ranks x 256 MiB saved in parallel into one object, against the
same data gathered on rank 0 and saved as one tree, in one run.

    python -m benchmarks.sharded [--mib 256] [--ranks 4] [--runs 3] [--s3]

Each rank is a process that imports the library, reports ready, and saves when told to; the
time runs from "go" to the last rank's return. The baseline's gather (moving the shards to
rank 0) is not counted: its folder is made with hard links beforehand, which favours it. The
data is incompressible (as model weights are) and in the page cache. On S3 the server is
moto's on 127.0.0.1 (AWS's 5 MiB minimum part), sharing the machine's cores with the ranks.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import os, sys
import flyte_checkpoint as fc
from flyte_checkpoint.sharded import save_sharded
dest, folder, mode = sys.argv[1:4]
print("READY", flush=True)
sys.stdin.readline()
if mode == "sharded":
    save_sharded(dest, folder, timeout=600)
else:
    fc.Checkpoint(dest).save_sync(folder)
print("OK", flush=True)
"""


def _timed(dest: str, folders: list[Path], mode: str, env: dict[str, str]) -> float:
    procs = []
    for rank, folder in enumerate(folders):
        child_env = {**env, "RANK": str(rank), "WORLD_SIZE": str(len(folders))}
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _CHILD, dest, str(folder), mode],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=child_env,
                cwd=ROOT,
            )
        )
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "READY"
    start = time.perf_counter()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline().strip()
        if line != "OK":
            raise RuntimeError(f"a rank failed: {line!r} (exit {p.wait()})")
    elapsed = time.perf_counter() - start
    for p in procs:
        p.wait()
    return elapsed


def make_data(root: Path, ranks: int, mib: int) -> tuple[list[Path], Path]:
    """One folder per rank with a ``mib`` MiB shard, and the union folder (hard links) for rank 0."""
    folders = []
    gathered = root / "gathered"
    gathered.mkdir()
    for rank in range(ranks):
        folder = root / f"rank{rank}"
        folder.mkdir()
        with open(folder / f"__{rank}_0.distcp", "wb") as f:
            for _ in range(mib):
                f.write(os.urandom(1024 * 1024))
        os.link(folder / f"__{rank}_0.distcp", gathered / f"__{rank}_0.distcp")
        folders.append(folder)
    return folders, gathered


def measure(label: str, dest_of, folders: list[Path], gathered: Path, runs: int, env: dict[str, str]) -> dict:
    sharded, single = [], []
    for i in range(runs):
        single.append(_timed(dest_of(f"gathered-{i}"), [gathered], "single", env))
        sharded.append(_timed(dest_of(f"sharded-{i}"), folders, "sharded", env))
    return {"backend": label, "sharded": statistics.median(sharded), "gathered": statistics.median(single)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=256, help="MiB per rank")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--s3", action="store_true", help="also on moto's S3 server")
    args = p.parse_args()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    rows = []
    with tempfile.TemporaryDirectory(prefix="fcp-bench-sharded-") as tmp:
        folders, gathered = make_data(Path(tmp), args.ranks, args.mib)
        out = Path(tmp) / "out"
        out.mkdir()
        load = os.getloadavg()
        rows.append(measure("file", lambda name: str(out / name), folders, gathered, args.runs, env))
        if args.s3:
            sys.path.insert(0, str(ROOT / "plugins" / "s3"))
            from flyte_checkpoint_s3_tests.server import moto_s3_server

            from benchmarks.__main__ import moto_bench

            with moto_s3_server(min_part_size=None) as endpoint:
                s3_env, _ = moto_bench(endpoint)
                s3_env = {**s3_env, "PYTHONPATH": env["PYTHONPATH"]}
                rows.append(
                    measure(
                        "S3 (moto)", lambda name: f"s3://bench/{name}", folders, gathered, args.runs, s3_env
                    )
                )
        load_after = os.getloadavg()
    total = args.ranks * args.mib
    print(f"\n## Sharded saves: {args.ranks} ranks x {args.mib} MiB (median of {args.runs})\n")
    print(f"load average before/after: {load[0]:.1f} / {load_after[0]:.1f} on {os.cpu_count()} cores\n")
    print(
        "| backend | sharded s | gathered on rank 0 s | sharded MB/s | gathered MB/s | gathered / sharded |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        mb = total * 1.048576
        print(
            f"| {r['backend']} | {r['sharded']:.2f} | {r['gathered']:.2f} | {mb / r['sharded']:.0f} |"
            f" {mb / r['gathered']:.0f} | {r['gathered'] / r['sharded']:.2f}x |"
        )


if __name__ == "__main__":
    main()
