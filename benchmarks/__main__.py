"""Run the benchmark suite and print a table of medians and ratios.

    python -m benchmarks                 # full size: 1 GiB model, 512 MiB JSON, 20,000 files
    python -m benchmarks --scale 0.01 --runs 1      # a quick check that everything works
    python -m benchmarks --s3            # also on moto's S3 server, against boto3
    python -m benchmarks --in-flyte-only --data model   # ours vs flyte.ctx().checkpoint in a Flyte task
    python -m benchmarks --partial-only  # restore one 1 MiB file of a 1 GiB object vs a full load

Each figure is the median of ``--runs`` runs; every operation runs in a fresh child
process (``benchmarks/ops.py``) so peak RSS is its own. Baselines run in the same run,
interleaved with ours, on the same data, so the ratios hold on a busy machine too.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import background, in_flyte, partial
from .datasets import DATASETS

ROOT = Path(__file__).resolve().parent


def warm_memory(nbytes: int) -> None:
    """Touch ``nbytes`` of memory and give it back, so the next operation gets warm pages,
    then wait :data:`settle_s` seconds.

    Virtual machines hand memory that has been free for a second or two back to their
    host; touching it again costs about 2.5 ms per MiB here, as much as writing it to disk.
    Left alone, whether an operation writes into such cold memory or into pages freed a
    moment ago decides its time more than its code does; warming before each operation
    gives every approach the same start.
    """
    # in a child process, whose peak RSS the measured children cannot inherit
    code = (
        "import mmap, sys\n"
        "n = int(sys.argv[1]); chunk = b'\\1' * (64 << 20)\n"
        "with mmap.mmap(-1, n) as m:\n"
        "    for offset in range(0, n, len(chunk)):\n"
        "        m.write(chunk[: n - offset])\n"
    )
    subprocess.run([sys.executable, "-c", code, str(nbytes)], check=True)
    time.sleep(settle_s)


#: Seconds to wait after warming memory, before the operation (``--settle``). The operation
#: right after the 2.4 GB were freed was often up to 3 times as slow, with as much more CPU
#: time (the model set's load, 14 runs over two days: 7 took 0.63-1.38 s, the others
#: 0.41-0.57 s; 3 s after warming, 2 of 14 were slow; without warming, 1 of 14). These
#: machines report freed memory to their host after a 2 s delay (virtio-balloon free page
#: reporting), which may be what the pause waits out; the cause is not proven.
settle_s = 3.0


DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def can_reset_page_cache() -> bool:
    return os.access(DROP_CACHES, os.W_OK)


def reset_page_cache(inputs: tuple[str, ...]) -> None:
    """Empty the page cache, then read ``inputs`` back into it (where this process may).

    On these machines, once a tree of many files has been deleted (each operation removes
    what the previous one restored), creating files stays ~1 ms each instead of ~50 us for
    as long as the page cache is left as it was: 20,000 files then take 20 s to restore,
    whatever restores them. Emptying the cache ends that; reading the operation's input
    back gives every approach the same warm start.
    """
    if not can_reset_page_cache():
        return
    DROP_CACHES.write_text("1\n")
    for top in inputs:
        paths = [Path(top)] if Path(top).is_file() else sorted(Path(top).rglob("*"))
        for path in paths:
            if path.is_file() and not path.is_symlink():
                with open(path, "rb") as f:
                    while f.read(8 << 20):
                        pass


def measure(
    op: str, *args: str, env: dict[str, str] | None = None, warm: int = 0, inputs: tuple[str, ...] = ()
) -> dict[str, float]:
    """Run one operation in a child process, from the same start: nothing left to write
    back, the page cache holding just the ``inputs``, ``warm`` bytes of memory touched."""
    os.sync()
    reset_page_cache(inputs)
    if warm:
        warm_memory(warm)
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.ops", op, *args],
        capture_output=True,
        text=True,
        cwd=ROOT.parent,
        env=env,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{op} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def warm_bytes(data: Path) -> int:
    """Memory an operation on ``data`` may newly touch: the reference's temporary copy and
    its output, the S3 server's copy of the object, the process itself."""
    return 2 * tree_bytes(data) + 256 * 2**20


def median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def local_suite(name: str, data: Path, work: Path, runs: int, approaches: list[str]) -> list[dict]:
    """Save and load of one data set with each approach; returns one row per approach."""
    save_op = {
        "ours": "ours_save",
        "streamed": "ours_save",
        "parallel": "ours_save",
        "reference": "reference_save",
        "tar": "tar_save",
        "flyte": "flyte_save",
    }
    load_op = {
        "ours": "ours_load",
        "streamed": "ours_load_stream",
        "parallel": "ours_load_parallel",
        "reference": "reference_load",
        "tar": "tar_load",
        "flyte": "flyte_load",
    }
    results: dict[str, dict[str, list]] = {a: {"save": [], "load": []} for a in approaches}
    warm = warm_bytes(data)
    sizes: dict[str, int] = {}
    for run in range(runs):
        # interleaved, and in a rotating order, so the machine's state hits all alike
        for a in approaches[run % len(approaches) :] + approaches[: run % len(approaches)]:
            obj = work / f"{name}-{a}.obj"
            obj.unlink(missing_ok=True)
            results[a]["save"].append(
                measure(save_op[a], str(data), str(obj), warm=warm, inputs=(str(data),))
            )
            sizes[a] = obj.stat().st_size
            results[a]["load"].append(measure(load_op[a], str(obj), warm=warm, inputs=(str(obj),)))
    rows = []
    for a in approaches:
        rows.append(
            {
                "data": name,
                "approach": a,
                "save_s": median(results[a]["save"], "seconds"),
                "load_s": median(results[a]["load"], "seconds"),
                "save_rss": max(r["rss_mib"] for r in results[a]["save"]),
                "load_rss": max(r["rss_mib"] for r in results[a]["load"]),
                "object_bytes": sizes[a],
            }
        )
    for a in approaches:
        (work / f"{name}-{a}.obj").unlink(missing_ok=True)
    return rows


def moto_bench(endpoint: str) -> tuple[dict[str, str], object]:
    """The environment that points our store at moto's server, and a boto3 client with the
    ``bench`` bucket made."""
    # moto copies the whole object for every ranged GET, so there one GET is fastest; the
    # plugin's defaults are for real S3 (ranges in parallel), so the range size is raised here.
    env = dict(
        os.environ,
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        FLYTE_CHECKPOINT_S3_READ_RANGE_SIZE=str(8 * 2**30),
    )
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    client.create_bucket(Bucket="bench")
    return env, client


def background_suites(cache: Path, work: Path, scale: float, runs: int, s3: bool) -> tuple[str, list]:
    """Background saves of the model data set (local, and S3 with ``s3``) and the loop: the
    table, and the rows (data, backend, figures)."""
    data = DATASETS["model"](cache, scale)
    warm = warm_bytes(data)
    rows = [("model", "file", background.suite("model", data, work, runs, measure, warm, None))]
    if s3:
        sys.path.insert(0, str(ROOT.parent / "plugins" / "s3"))
        from flyte_checkpoint_s3_tests.server import run_server

        with run_server(min_part_size=None) as server:
            endpoint = server.endpoint
            env, _ = moto_bench(endpoint)
            rows.append(
                ("model", "s3 (moto)", background.suite("model", data, work, runs, measure, warm, env))
            )
    return background.fmt(rows, background.loop_suite(work, runs, measure, scale), scale), rows


def s3_suite(name: str, data: Path, work: Path, runs: int) -> list[dict]:
    """On moto's S3 server: our directory save/load against boto3 on the same tarball."""
    sys.path.insert(0, str(ROOT.parent / "plugins" / "s3"))
    from flyte_checkpoint_s3_tests.server import run_server

    rows = []
    with run_server(min_part_size=None) as server:
        endpoint = server.endpoint
        env, client = moto_bench(endpoint)
        # boto3 moves the very bytes our save writes: made once, kept as a local file
        tarball = work / f"{name}-ours.tgz"
        measure("ours_save", str(data), f"s3://bench/{name}/setup", env=env)
        measure("boto3_download", f"s3://bench/{name}/setup", str(tarball), env=env)
        client.delete_object(Bucket="bench", Key=f"{name}/setup")
        warm = warm_bytes(data)
        # Each save is compared with boto3 storing the same kind of checksum: a full-object
        # CRC32 (our default, which reads verify) costs moto two extra copies of the object;
        # a composite one (boto3's default) does not.
        composite = dict(env, FLYTE_CHECKPOINT_S3_CHECKSUM_TYPE="COMPOSITE")
        keys = (
            "ours_save",
            "ours_save_composite",
            "ours_load",
            "ours_load_stream",
            "ours_load_parallel",
            "up_full",
            "up",
            "down",
            "get",
        )
        res: dict[str, list] = {k: [] for k in keys}

        def m(op: str, *args: str, env: dict[str, str] = env, inputs: tuple[str, ...] = ()) -> dict:
            return measure(op, *args, env=env, warm=warm, inputs=inputs)

        src, tgz, dl = str(data), str(tarball), str(work / "dl")
        for i in range(runs):
            uri, base = f"s3://bench/{name}/{i}/ckpt", f"s3://bench/{name}/{i}/boto3"

            def ours(uri: str = uri) -> None:
                res["ours_save_composite"].append(m("ours_save", src, uri, env=composite, inputs=(src,)))
                res["ours_save"].append(m("ours_save", src, uri, inputs=(src,)))
                res["ours_load"].append(m("ours_load", uri))
                res["ours_load_stream"].append(m("ours_load_stream", uri))
                res["ours_load_parallel"].append(m("ours_load_parallel", uri))

            def theirs(base: str = base) -> None:
                res["up"].append(m("boto3_upload", tgz, base, inputs=(tgz,)))
                res["up_full"].append(m("boto3_upload_full_crc", tgz, base, inputs=(tgz,)))
                res["down"].append(m("boto3_download", base, dl))
                res["get"].append(m("plain_get", base, dl))

            for step in (ours, theirs) if i % 2 == 0 else (theirs, ours):
                step()
            for key in (uri, base):  # keep the server's memory (and so its speed) steady
                client.delete_object(Bucket="bench", Key=key.split("/", 3)[3])
        rows.append(
            {"data": name}
            | {k: median(res[k], "seconds") for k in keys}
            | {
                "save_rss": max(r["rss_mib"] for r in res["ours_save"] + res["ours_save_composite"]),
                "load_rss": max(r["rss_mib"] for r in res["ours_load"]),
            }
        )
        tarball.unlink(missing_ok=True)
        (work / "dl").unlink(missing_ok=True)
    return rows


def import_cost(runs: int) -> tuple[float, float]:
    """Median wall time of ``python -c pass`` and of ``python -c 'import flyte_checkpoint'``."""
    import time

    def t(code: str) -> float:
        times = []
        for _ in range(max(5, runs * 3)):
            s = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT.parent)
            times.append(time.perf_counter() - s)
        return statistics.median(times)

    return t("pass"), t("import flyte_checkpoint")


def fmt_table(rows: list[dict], sizes: dict[str, int]) -> str:
    lines = [
        "| data | approach | save s | save MB/s | load s | load MB/s | object MiB | peak RSS save/load MiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mb = sizes[r["data"]] / 1e6
        lines.append(
            f"| {r['data']} | {r['approach']} | {r['save_s']:.2f} | {mb / r['save_s']:.0f} | {r['load_s']:.2f}"
            f" | {mb / r['load_s']:.0f} | {r['object_bytes'] / 2**20:.1f} | {r['save_rss']:.0f} / {r['load_rss']:.0f} |"
        )
    return "\n".join(lines)


def fmt_ratios(rows: list[dict]) -> str:
    by = {(r["data"], r["approach"]): r for r in rows}
    lines = [
        "| data | save vs reference | load vs reference | save vs tar cf | load vs tar xf"
        " | parallel load vs tar xf | parallel vs streamed load | object size vs reference"
        " | save vs flyte | load vs flyte |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for data in dict.fromkeys(r["data"] for r in rows):
        o, ref, tar, st, par = (by[(data, a)] for a in ("ours", "reference", "tar", "streamed", "parallel"))
        fl = by.get((data, "flyte"))
        lines.append(
            f"| {data} | {ref['save_s'] / o['save_s']:.1f}x faster | {ref['load_s'] / o['load_s']:.1f}x faster"
            f" | {o['save_s'] / tar['save_s']:.2f}x its time | {o['load_s'] / tar['load_s']:.2f}x its time"
            f" | {par['load_s'] / tar['load_s']:.2f}x its time | {par['load_s'] / st['load_s']:.2f}x its time"
            f" | {o['object_bytes'] / ref['object_bytes']:.2f}x"
            + (
                f" | {fl['save_s'] / o['save_s']:.1f}x faster | {fl['load_s'] / o['load_s']:.1f}x faster |"
                if fl
                else " | n/a | n/a |"
            )
        )
    return "\n".join(lines)


def fmt_s3(rows: list[dict]) -> str:
    lines = [
        "| data | our save s | upload_file s | ratio | our save, composite s | upload_file, composite s | ratio"
        " | our load s | best of download_file/GET s | ratio | parallel load s | streamed load s"
        " | parallel vs streamed"
        " | peak RSS save/load MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        best = min(r["down"], r["get"])
        lines.append(
            f"| {r['data']} | {r['ours_save']:.2f} | {r['up_full']:.2f} | {r['ours_save'] / r['up_full']:.2f}x"
            f" | {r['ours_save_composite']:.2f} | {r['up']:.2f} | {r['ours_save_composite'] / r['up']:.2f}x"
            f" | {r['ours_load']:.2f} | {best:.2f} | {r['ours_load'] / best:.2f}x"
            f" | {r['ours_load_parallel']:.2f} | {r['ours_load_stream']:.2f}"
            f" | {r['ours_load_parallel'] / r['ours_load_stream']:.2f}x"
            f" | {r['save_rss']:.0f} / {r['load_rss']:.0f} |"
        )
    return "\n".join(lines)


def draw_charts(
    args: argparse.Namespace, rows: list[dict], s3_rows: list[dict], background_rows: list
) -> None:
    """This run's figures as the Performance page's charts (benchmarks/charts.py), into ``args.charts``."""
    from . import charts

    conditions = f"scale {args.scale}, median of {args.runs}, {os.cpu_count()} cores"
    sections = {}
    if rows:
        fields = {"data": "data", "approach": "approach", "save_s": "save_s", "load_s": "load_s"}
        sections["suite"] = charts.run_section(
            "Folder save and load on the local file backend",
            "python -m benchmarks",
            conditions,
            charts.renamed(rows, fields | {"object_mib": lambda r: r["object_bytes"] / 2**20}),
        )
    if s3_rows:
        fields = {
            "data": "data",
            "ours_save_s": "ours_save",
            "upload_s": "up_full",
            "ours_load_s": "ours_load",
        }
        sections["s3"] = charts.run_section(
            "Folder save and load on moto's S3 server, against boto3",
            "python -m benchmarks --s3",
            conditions,
            charts.renamed(s3_rows, fields | {"download_s": lambda r: min(r["down"], r["get"])}),
        )
    if background_rows:
        sections["background"] = charts.run_section(
            "Time the caller is blocked: save_background against save_sync",
            "python -m benchmarks --background",
            conditions,
            [
                {"backend": backend, "sync_s": r["sync"], "blocked_s": r["blocked"]}
                for _, backend, r in background_rows
            ],
        )
    for path in charts.draw(sections, args.charts):
        print(f"chart: {path}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    global settle_s
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    p.add_argument("--scale", type=float, default=1.0, help="data size relative to the published sizes")
    p.add_argument("--runs", type=int, default=3, help="runs per figure (the median is shown)")
    p.add_argument("--data", choices=sorted(DATASETS), nargs="*", help="data sets (default: all)")
    p.add_argument("--s3", action="store_true", help="also measure on moto's S3 server")
    p.add_argument("--no-flyte", action="store_true", help="skip the flyte package even if installed")
    p.add_argument("--cache", default=str(ROOT / ".data"), help="where generated data is kept")
    p.add_argument(
        "--only-ours", action="store_true", help="measure this library alone (peak RSS at large sizes)"
    )
    p.add_argument(
        "--in-flyte-only",
        action="store_true",
        help="only ours against flyte.ctx().checkpoint inside a Flyte task (Flyte's local mode)",
    )
    p.add_argument(
        "--background",
        action="store_true",
        help="also background saves: time blocked vs save_sync (model data), loop throughput",
    )
    p.add_argument("--background-only", action="store_true", help="only the background saves' figures")
    p.add_argument(
        "--partial",
        action="store_true",
        help="also partial restore: one 1 MiB file of the model data set's object vs a full load",
    )
    p.add_argument("--partial-only", action="store_true", help="only the partial restore's figures")
    p.add_argument(
        "--settle", type=float, default=3.0, help="seconds to wait after warming memory (default 3)"
    )
    p.add_argument(
        "--charts",
        type=Path,
        default=None,
        help="also draw this run's figures as SVG charts into this folder",
    )
    args = p.parse_args(argv)
    settle_s = args.settle

    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    with_flyte = not args.no_flyte and importlib.util.find_spec("flyte") is not None
    approaches = (
        ["ours"]
        if args.only_ours
        else ["ours", "parallel", "streamed", "reference", "tar"] + (["flyte"] if with_flyte else [])
    )
    from flyte_checkpoint.format.compression import BACKEND

    print(
        f"# flyte-checkpoint benchmarks (scale {args.scale}, median of {args.runs}, gzip via {BACKEND},"
        f" {os.cpu_count()} cores)\n"
    )
    if not can_reset_page_cache():
        print("(the page cache is not reset between operations: that needs root; see reset_page_cache)\n")
    if args.in_flyte_only and not with_flyte:
        p.error("--in-flyte-only needs the flyte package (pip install flyte==2.12.1)")
    rows, s3_rows, flyte_rows, sizes = [], [], [], {}
    work = Path(tempfile.mkdtemp(prefix="fcp-bench-", dir=cache))
    # Every operation's temporary files and restores go to this one folder (the operations
    # inherit TMPDIR), where `tar xf` and the reference extract too: in the machine's /tmp,
    # where our workspace and flyte's would otherwise go, ext4 created files 1.6-2.6 times as
    # slowly after days of runs there (the small-files load: 2.47 s, against 0.94 s for the
    # first and 1.42-1.50 s for the next loads into a new folder of the same disk).
    os.environ["TMPDIR"] = str(work)
    background_table = partial_table = ""
    background_rows: list = []
    only = args.background_only or args.partial_only
    try:
        if args.background or args.background_only:
            background_table, background_rows = background_suites(cache, work, args.scale, args.runs, args.s3)
        if args.partial or args.partial_only:
            data = DATASETS["model"](cache, args.scale)
            partial_table = partial.fmt(partial.suite(data, work, args.runs, measure, warm_bytes(data)))
        for name in [] if only else args.data or ["model", "jsonl", "small"]:
            data = DATASETS[name](cache, args.scale)
            sizes[name] = tree_bytes(data)
            print(
                f"{name}: {sizes[name] / 2**20:.0f} MiB in {sum(1 for _ in data.rglob('*'))} entries",
                file=sys.stderr,
            )
            if with_flyte and not args.only_ours:
                flyte_rows.append(in_flyte.suite(name, data, work, args.runs, measure, warm_bytes(data)))
            if args.in_flyte_only:
                continue
            rows += local_suite(name, data, work, args.runs, approaches)
            if args.s3:
                s3_rows += s3_suite(name, data, work, args.runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if rows:
        print("## Local file backend\n")
        print(fmt_table(rows, sizes))
    if rows and not args.only_ours:
        print("\n## Ratios (same run, same data)\n")
        print(fmt_ratios(rows))
    if flyte_rows:
        print(
            "\n## Inside a Flyte task (local mode): ours and flyte.ctx().checkpoint saving the same folder\n"
        )
        print(in_flyte.fmt(flyte_rows, sizes))
    if s3_rows:
        print("\n## moto S3 server (127.0.0.1), directory save and load against boto3 on the same tarball\n")
        print(
            "A save stores a full-object CRC32 by default (reads verify it), compared with upload_file"
            " given that CRC; the composite columns store per-part CRC32s, as upload_file does by default.\n"
        )
        print(fmt_s3(s3_rows))
    if background_table:
        print("\n## Background saves (model data; ratios in this run)\n")
        print(background_table)
    if partial_table:
        print("\n## Partial restore: load(members=[one 1 MiB file]) vs load() (model data + that file)\n")
        print(partial_table)
    if args.charts:
        draw_charts(args, rows, s3_rows, background_rows)
    if args.in_flyte_only or args.background_only:
        return 0
    bare, imported = import_cost(args.runs)
    print(
        f"\n`import flyte_checkpoint` adds {(imported - bare) * 1000:.0f} ms to interpreter start"
        f" ({bare * 1000:.0f} ms -> {imported * 1000:.0f} ms)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
