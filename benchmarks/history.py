"""``fc.history`` of many checkpoints on moto's S3 server, and what a manifest costs a save.

    python -m benchmarks.history                     # 1,000 checkpoints: 10 attempts x 100 generations
    python -m benchmarks.history --attempts 2 --generations 5 --runs 1   # a quick check

Issue 37's goal: 1,000 checkpoints listed in under 2 s on the S3 test server. The checkpoints are
made by real saves (``Checkpoint(..., keeps_generations=True)``: each save keeps the one it
replaces by a server-side copy), so the listing holds what a run leaves: per checkpoint its
object (or kept ``.obj``) and its manifest. Reported: the median and fastest of ``--runs``
``fc.history`` calls, with the store calls of one (counted), and the digest's cost: CRC-32
(what a manifest records) against SHA-256 over the same bytes in memory.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time
import uuid
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def digest_rates(nbytes: int) -> tuple[float, float]:
    """(CRC-32, SHA-256) throughput in MB/s over ``nbytes`` of random bytes, best of 3."""
    data = os.urandom(nbytes)
    rates = []
    for fn in (lambda: zlib.crc32(data), lambda: hashlib.sha256(data).digest()):
        best = min(_timed(fn) for _ in range(3))
        rates.append(nbytes / best / 1e6)
    return rates[0], rates[1]


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def made_directly(store, run: str, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    """The objects, manifests and summaries that ``attempts x generations`` saves with
    generations kept leave, written directly (16 at a time): the same listing and the same reads
    for a history, in seconds instead of minutes of saves."""
    from concurrent.futures import ThreadPoolExecutor

    from flyte_checkpoint.history.manifest import Manifest, generation_uri, write_manifest, write_summary

    last = args.generations - 1
    objects = {}
    for a in range(args.attempts):
        dest = f"{run}/{a}/_flytecheckpoints"
        for g in range(args.generations):
            objects[(dest, a, g)] = dest if g == last else generation_uri(dest, g)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda uri: store.write_bytes(uri, os.urandom(args.size)), objects.values()))
        listed = {i.uri: i for i in store.list_details(run)}
        manifests = [
            Manifest(
                generation=g,
                object=uri,
                size=args.size,
                attempt=a,
                step=a * args.generations + g,
                metrics={"loss": 1 / (g + 1)},
                time=time.time(),
                modified=listed[uri].modified.isoformat() if listed[uri].modified else None,
                dest=dest,
            )
            for (dest, a, g), uri in objects.items()
        ]
        list(pool.map(lambda m: write_manifest(store, m), manifests))
    by_dest: dict[str, list] = {}
    for m in manifests:
        by_dest.setdefault(m.dest or m.object, []).append((m, len(m.to_json().encode())))
    for dest, rows in by_dest.items():
        write_summary(store, dest, rows)
    return len(objects)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempts", type=int, default=10)
    parser.add_argument("--generations", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--size", type=int, default=4096, help="bytes of each checkpoint")
    parser.add_argument(
        "--direct",
        action="store_true",
        help="write the objects, manifests and summaries the saves would leave directly (fast setup)",
    )
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT / "plugins" / "s3"))
    from flyte_checkpoint_s3_tests.server import run_server

    with run_server(min_part_size=None) as server:
        from .__main__ import moto_bench

        env, _ = moto_bench(server.endpoint)
        os.environ.update(env)
        import flyte_checkpoint as fc
        from flyte_checkpoint.history.listing import history
        from flyte_checkpoint.storage.registry import store_for
        from flyte_checkpoint.testing.history import CountingStore

        run = f"s3://bench/{uuid.uuid4().hex}/run"
        started = time.perf_counter()
        if args.direct:
            saves = made_directly(store_for(run), run, args)
        else:
            saves = 0
            for attempt in range(args.attempts):
                cp = fc.Checkpoint(f"{run}/{attempt}/_flytecheckpoints", keeps_generations=True)
                for g in range(args.generations):
                    step = attempt * args.generations + g
                    cp.save_sync(os.urandom(args.size), step=step, metrics={"loss": 1 / (g + 1)})
                    saves += 1
        made = time.perf_counter() - started
        counting = CountingStore(store_for(run))
        entries = history(run + "/", store=counting)
        assert len(entries) == saves, (len(entries), saves)
        times = []
        for _ in range(args.runs):
            t = time.perf_counter()
            found = fc.history(run + "/")
            times.append(time.perf_counter() - t)
            assert len(found) == saves
        calls = counting.ops()
        store = store_for(run)
        listings = []
        for _ in range(args.runs):
            t = time.perf_counter()
            listed = list(store.list_details(run + "/"))
            listings.append(time.perf_counter() - t)

    crc, sha = digest_rates(256 * 1024 * 1024)
    print(f"## fc.history on moto's S3 server ({saves} checkpoints, {args.runs} runs)\n")
    print(
        "| checkpoints | median s | fastest s | listings | manifest reads | other calls | the listing alone: objects, median s |"
    )
    print("|---|---|---|---|---|---|---|")
    others = sum(n for op, n in calls.items() if op not in ("list_details", "read_bytes"))
    print(
        f"| {saves} | {statistics.median(times):.3f} | {min(times):.3f} | {calls['list_details']}"
        f" | {calls['read_bytes']} | {others} | {len(listed)}, {statistics.median(listings):.3f} |"
    )
    how = "written directly (--direct)" if args.direct else "saves (each keeping the one before)"
    print(f"\nMaking them: {saves} {how} in {made:.1f} s, {made / saves * 1000:.1f} ms each.\n")
    print("## The manifest's digest, in memory (256 MiB, best of 3)\n")
    print("| CRC-32 (zlib) MB/s | SHA-256 MB/s | ratio |")
    print("|---|---|---|")
    print(f"| {crc:.0f} | {sha:.0f} | {crc / sha:.1f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
