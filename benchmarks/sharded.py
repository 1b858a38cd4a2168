"""Sharded saves (issue 19): 4 ranks x 256 MiB saved in parallel into one object, against the
same data gathered on rank 0 and saved as one tree, in one run.

    python -m benchmarks.sharded [--mib 256] [--ranks 4] [--runs 3] [--s3]
    python -m benchmarks.sharded --links 5,10,25    # 4 ranks x 64 MiB, each through its own link

Each rank is a process that imports the library, reports ready, and saves when told to; the
time runs from "go" to the last rank's return. Two baselines: "gathered, free" is rank 0
saving the union folder made beforehand with hard links (the gather costs nothing, which
favours it); "gathered over gloo" is what a job without sharded saves does (Flyte's FSDP
example gathers the state on rank 0): every rank joins a gloo process group before "go", then
sends its shard to rank 0 (``torch.distributed.send``), which writes the union folder and saves
it. The data is incompressible (as model weights are) and in the page cache. On S3 the server
is moto's on 127.0.0.1 (AWS's 5 MiB minimum part), sharing the machine's cores with the ranks.

With ``--links`` (S3 only) every rank is a node with its own link to the server, a token-bucket
proxy of the given rate (benchmarks/links.py, validated against a raw upload before each rate;
a link more than 10% off refuses the run): what a cluster's sharded save is bound by. The
baseline is rank 0 saving the union folder through its own link, the gather given for free.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.links import TOLERANCE, load_line, parse_rates

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


def _timed(
    dest: str,
    folders: list[Path],
    mode: str,
    env: dict[str, str],
    per_rank: list[dict[str, str]] | None = None,
) -> float:
    """Seconds from "go" to the last rank's return; ``per_rank[r]`` is added to rank r's env."""
    procs = []
    port = _free_port()
    for rank, folder in enumerate(folders):
        child_env = {**env, "RANK": str(rank), "WORLD_SIZE": str(len(folders)), "MASTER_PORT": port}
        child_env.update(per_rank[rank] if per_rank else {})
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


def links_suite(
    rates: list[float], ranks: int, mib: int, runs: int, env: dict[str, str], args: argparse.Namespace
) -> list[dict]:
    """On moto's S3 server, every rank through its own simulated link (benchmarks/links.py), at
    each rate: the sharded save of ``ranks`` x ``mib`` MiB against rank 0 saving the union
    through its own link (the gather given for free), ``runs`` of each, interleaved; the bytes
    each link carried; and the time the links alone would take (the busiest link's bytes over
    its rate)."""
    sys.path.insert(0, str(ROOT / "plugins" / "s3"))
    from flyte_checkpoint_s3_tests.server import run_server

    from benchmarks.__main__ import moto_bench
    from benchmarks.links import LinkProcess, MiB, load_line, validated_rate

    med = statistics.median
    rows = []
    with tempfile.TemporaryDirectory(prefix="fcp-bench-sharded-links-") as tmp:
        folders, gathered = make_data(Path(tmp), ranks, mib)
        with run_server(min_part_size=None) as server:  # AWS's 5 MiB minimum part
            s3_env, client = moto_bench(server.endpoint)
            s3_env = {**s3_env, "PYTHONPATH": env["PYTHONPATH"], "MASTER_ADDR": "127.0.0.1"}
            with LinkProcess(server.endpoint, rates[0], nodes=ranks) as links:
                for rate in rates:
                    if (validated := validated_rate(links, rate, args, rows)) is None:
                        continue
                    carried, before = validated
                    times: dict[str, list[float]] = {"sharded": [], "gathered": []}
                    sent: dict[str, list[list[int]]] = {"sharded": [], "gathered": []}
                    for run in range(runs):
                        for mode in ("gathered", "sharded") if run % 2 == 0 else ("sharded", "gathered"):
                            key = f"links/{rate:.0f}/{mode}-{run}"
                            start = [n["up"] for n in links.stats()]
                            if mode == "sharded":
                                per_rank = [{"AWS_ENDPOINT_URL": url} for url in links.urls]
                                took = _timed(f"s3://bench/{key}", folders, "sharded", s3_env, per_rank)
                            else:
                                per_rank = [{"AWS_ENDPOINT_URL": links.urls[0]}]
                                took = _timed(f"s3://bench/{key}", [gathered], "single", s3_env, per_rank)
                            end = [n["up"] for n in links.stats()]
                            times[mode].append(took)
                            sent[mode].append([b - a for a, b in zip(start, end, strict=True)])
                            print(f"  {mode} run {run}: {took:.2f} s", file=sys.stderr, flush=True)
                            client.delete_object(Bucket="bench", Key=key)  # moto holds objects in memory
                    busiest = {m: med(max(s) for s in sent[m]) for m in sent}
                    rows.append(
                        {
                            "rate_mb_s": rate / 1e6,
                            "carried_mb_s": [r / 1e6 for r in carried],
                            "sharded_s": med(times["sharded"]),
                            "gathered_s": med(times["gathered"]),
                            "sharded_runs_s": times["sharded"],
                            "gathered_runs_s": times["gathered"],
                            "sharded_busiest_link_mib": busiest["sharded"] / MiB,
                            "sharded_all_links_mib": med(sum(s) for s in sent["sharded"]) / MiB,
                            "gathered_link_mib": busiest["gathered"] / MiB,
                            "sharded_link_bound_s": busiest["sharded"] / rate,
                            "gathered_link_bound_s": busiest["gathered"] / rate,
                            "load_before": before,
                            "load_after": load_line(),
                        }
                    )
                    print("row: " + json.dumps(rows[-1]), file=sys.stderr, flush=True)  # kept if stopped
    return rows


def links_table(rows: list[dict], ranks: int, mib: int, runs: int) -> str:
    lines = [
        f"## Sharded saves on simulated links: {ranks} ranks x {mib} MiB, each rank its own link;"
        f" gathered = rank 0 saving the union through its link (median of {runs})",
        "",
        "| link MB/s | links measured MB/s | sharded s | gathered s | gathered / sharded | ideal"
        " | MiB up, busiest link (sharded) | MiB up (gathered) | link-bound s, sharded / gathered"
        " | load before -> after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "refused" in r:
            lines.append(f"| {r['rate_mb_s']:g} | refused: {r['refused']} |")
            continue
        ideal = r["gathered_link_bound_s"] / r["sharded_link_bound_s"]
        lines.append(
            f"| {r['rate_mb_s']:g} | {min(r['carried_mb_s']):.2f}-{max(r['carried_mb_s']):.2f}"
            f" | {r['sharded_s']:.2f} | {r['gathered_s']:.2f} | {r['gathered_s'] / r['sharded_s']:.2f}x"
            f" | {ideal:.2f}x | {r['sharded_busiest_link_mib']:.1f} | {r['gathered_link_mib']:.1f}"
            f" | {r['sharded_link_bound_s']:.2f} / {r['gathered_link_bound_s']:.2f}"
            f" | {r['load_before'].split(' on ')[0].removeprefix('load average ')} ->"
            f" {r['load_after'].split(' on ')[0].removeprefix('load average ')} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=None, help="MiB per rank (256; with --links 64)")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--s3", action="store_true", help="also on moto's S3 server")
    p.add_argument("--charts", type=Path, default=None, help="also draw the figures as an SVG chart here")
    p.add_argument(
        "--links",
        type=parse_rates,
        default=None,
        metavar="MB/S[,MB/S...]",
        help="only on moto's S3 server, each rank through its own simulated link of this rate (MB = 10^6"
        " bytes; several rates in one run: 5,10,25), against rank 0 saving the union through its link",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=TOLERANCE,
        help="with --links: refuse a link whose validated rate is this fraction off (default 0.10)",
    )
    p.add_argument("--probe-mib", type=int, default=0, help="with --links: MiB of the validating upload")
    p.add_argument(
        "--probe-tries",
        type=int,
        default=3,
        help="with --links: validations tried (10 s apart) before a rate is refused (default 3)",
    )
    p.add_argument("--json", type=Path, default=None, help="with --links: also write the figures here")
    args = p.parse_args()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    if args.links:
        mib = args.mib or 64
        load = load_line()
        rows = links_suite(args.links, args.ranks, mib, args.runs, env, args)
        print(f"\n{links_table(rows, args.ranks, mib, args.runs)}\n")
        print(f"{load} before, {load_line()} after")
        if args.json:
            args.json.write_text(json.dumps({"ranks": args.ranks, "mib": mib, "rows": rows}, indent=2) + "\n")
        if any("refused" in r for r in rows):
            sys.exit(3)  # a link missed its rate: those rates were not measured
        return
    args.mib = args.mib or 256
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
