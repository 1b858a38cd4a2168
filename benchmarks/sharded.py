"""Sharded saves (issue 19): 4 ranks x 256 MiB saved in parallel into one object, against the
same data gathered on rank 0 and saved as one tree, in one run.

    python -m benchmarks.sharded [--mib 256] [--ranks 4] [--runs 3] [--s3]

Each rank is a process that imports the library, reports ready, and saves when told to; the
time runs from "go" to the last rank's return. Two baselines: "gathered, free" is rank 0
saving the union folder made beforehand with hard links (the gather costs nothing, which
favours it); "gathered over gloo" is what a job without sharded saves does (Flyte's FSDP
example gathers the state on rank 0): every rank joins a gloo process group before "go", then
sends its shard to rank 0 (``torch.distributed.send``), which writes the union folder and saves
it. The data is incompressible (as model weights are) and in the page cache. On S3 the server
is moto's on 127.0.0.1 (AWS's 5 MiB minimum part), sharing the machine's cores with the ranks.
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
if mode == "gloo":
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
print("READY", flush=True)
sys.stdin.readline()
if mode == "sharded":
    save_sharded(dest, folder, timeout=600)
elif mode == "gloo":
    names = sorted(os.listdir(folder))
    if rank:
        for name in names:
            with open(os.path.join(folder, name), "rb") as f:
                data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
            dist.send(torch.tensor([len(data)], dtype=torch.int64), 0)
            dist.send(data, 0)
    else:
        union = os.path.join(os.path.dirname(folder), f"union-{os.getpid()}-{os.path.basename(dest)}")
        os.mkdir(union)
        for name in names:
            os.link(os.path.join(folder, name), os.path.join(union, name))
        for src in range(1, world):
            size = torch.zeros(1, dtype=torch.int64)
            dist.recv(size, src)
            data = torch.empty(int(size.item()), dtype=torch.uint8)
            dist.recv(data, src)
            with open(os.path.join(union, f"__{src}_0.distcp"), "wb") as f:
                f.write(memoryview(data.numpy()))
        fc.Checkpoint(dest).save_sync(union)
    dist.destroy_process_group()
else:
    fc.Checkpoint(dest).save_sync(folder)
print("OK", flush=True)
"""


def _free_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _timed(dest: str, folders: list[Path], mode: str, env: dict[str, str]) -> float:
    procs = []
    port = _free_port()
    for rank, folder in enumerate(folders):
        child_env = {**env, "RANK": str(rank), "WORLD_SIZE": str(len(folders)), "MASTER_PORT": port}
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
    sharded, single, gloo = [], [], []
    env = {**env, "MASTER_ADDR": "127.0.0.1"}
    for i in range(runs):
        single.append(_timed(dest_of(f"gathered-{i}"), [gathered], "single", env))
        sharded.append(_timed(dest_of(f"sharded-{i}"), folders, "sharded", env))
        gloo.append(_timed(dest_of(f"gloo-{i}"), folders, "gloo", env))
    med = statistics.median
    return {"backend": label, "sharded": med(sharded), "gathered": med(single), "gloo": med(gloo)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=256, help="MiB per rank")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--s3", action="store_true", help="also on moto's S3 server")
    p.add_argument("--charts", type=Path, default=None, help="also draw the figures as an SVG chart here")
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
            from flyte_checkpoint_s3_tests.server import run_server

            from benchmarks.__main__ import moto_bench

            with run_server(min_part_size=None) as server:
                s3_env, _ = moto_bench(server.endpoint)
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
        "| backend | sharded s | gathered, free s | gathered over gloo s | sharded MB/s"
        " | gathered, free / sharded | gathered over gloo / sharded |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        mb = total * 1.048576
        print(
            f"| {r['backend']} | {r['sharded']:.2f} | {r['gathered']:.2f} | {r['gloo']:.2f} |"
            f" {mb / r['sharded']:.0f} | {r['gathered'] / r['sharded']:.2f}x | {r['gloo'] / r['sharded']:.2f}x |"
        )

    if args.charts:
        from benchmarks import charts

        section = charts.run_section(
            f"Sharded saves: {args.ranks} ranks of {args.mib} MiB, against gathering on rank 0",
            "python -m benchmarks.sharded",
            f"median of {args.runs}, {os.cpu_count()} cores",
            [
                {
                    "backend": r["backend"],
                    "sharded_s": r["sharded"],
                    "gathered_free_s": r["gathered"],
                    "gathered_gloo_s": r["gloo"],
                }
                for r in rows
            ],
        )
        for path in charts.draw({"sharded": section}, args.charts):
            print(f"chart: {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
