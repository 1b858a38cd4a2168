"""Coordination of sharded saves at scale (issue 36, point 2): requests and time of the markers.

    python -m benchmarks.coordination [--ranks 100 1000] [--latency-ms 20] [--giveup 2000]

Every rank is a thread of this process, saving an empty folder through a
:class:`~flyte_checkpoint.testing.counting.CountingLatencyStore` (the memory store, every
request counted and delayed by ``--latency-ms``; listings of 1,000 keys a page, batch deletes
of 1,000 keys, and S3's multipart requests for the segments). It prints, per world size, the
wall time of the save (from the start of the first thread to the return of the last) and
the requests: rank 0's (its lease and report readers included), per listing round, and the
followers' (the largest, the median, and the bound of ``coordinate``'s budget for the wait
they saw). ``--giveup N`` also times a save of ``N`` ranks with ``timeout=3`` whose last rank
never comes: how long until every rank has raised (through the same store).

The threads share this machine's cores (and Python's lock): the times are an upper bound of
what ranks on their own machines see; the counts do not depend on it.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LEADER_THREADS = ("rank-0", "flyte-checkpoint-shard-lease", "flyte-checkpoint-shard-reports")


@dataclass
class Run:
    """What one save of ``world`` thread ranks sent and how long it took."""

    world: int
    seconds: float
    errors: list[BaseException]
    leader: dict[str, int]  # kind: requests of rank 0 (and its helper threads)
    followers: list[int]  # requests of each other rank
    follower_waits: list[float] = field(
        default_factory=list
    )  # seconds each follower waited (found + outcome)
    kinds: dict[str, int] = field(default_factory=dict)
    leader_seconds: float = 0.0  # rank 0's call, from the start
    failures: dict[int, BaseException] = field(default_factory=dict)  # what each rank raised

    @property
    def leader_total(self) -> int:
        return sum(self.leader.values())


def save_world(
    world: int,
    *,
    latency: float = 0.0,
    timeout: float = 120.0,
    absent: tuple[int, ...] = (),
    store: Any = None,
) -> Run:
    """One sharded save of ``world`` empty ranks, each a thread, through a counting store
    registered for the scheme ``counted`` (the ranks in ``absent`` never call)."""
    from flyte_checkpoint.sharded import save_sharded
    from flyte_checkpoint.storage.registry import register_store, unregister_store
    from flyte_checkpoint.testing.counting import CountingLatencyStore

    if store is None:
        store = CountingLatencyStore(latency=latency)
    register_store("counted-bench", "counted", lambda: store)
    dest = f"counted://bench/{uuid.uuid4().hex}/ckpt"
    errors: list[BaseException] = []
    failures: dict[int, BaseException] = {}
    lock = threading.Lock()
    waits: dict[int, float] = {}
    empty = Path(tempfile.mkdtemp(prefix="coordination-"))
    go = threading.Event()

    def rank(r: int) -> None:
        go.wait()
        began = time.monotonic()
        try:
            save_sharded(dest, empty, rank=r, world_size=world, job="bench", step=1, timeout=timeout)
        except BaseException as exc:
            with lock:
                errors.append(exc)
                failures[r] = exc
        finally:
            with lock:
                waits[r] = time.monotonic() - began

    threads = [
        threading.Thread(target=rank, args=(r,), name=f"rank-{r}", daemon=True)
        for r in range(world)
        if r not in absent
    ]
    try:
        for t in threads:
            t.start()
        started = time.monotonic()
        go.set()
        for t in threads:
            t.join()
        seconds = time.monotonic() - started
    finally:
        unregister_store("counted-bench")
        empty.rmdir()
    leader: dict[str, int] = {}
    followers = []
    for (who, kind), n in store.counts.items():
        if who.startswith(LEADER_THREADS):
            leader[kind] = leader.get(kind, 0) + n
    per = store.by_caller()
    for r in range(1, world):
        if r not in absent:
            followers.append(per.get(f"rank-{r}", 0))
    kinds: dict[str, int] = {}
    for (_, kind), n in store.counts.items():
        kinds[kind] = kinds.get(kind, 0) + n
    return Run(
        world,
        seconds,
        errors,
        leader,
        followers,
        [waits[r] for r in sorted(waits) if r],
        kinds,
        waits.get(0, 0.0),
        failures,
    )


def follower_budget(world: int, wait: float) -> int:
    """The most requests a follower makes in a save in which it waited ``wait`` seconds in all
    (finding the session, then the outcome): its report, and per wait of ``W`` seconds at most
    ``2 + ceil(log1.5(cap / first)) + W / cap`` polls of one read (the outcome's wait reads
    ``open`` too, every fourth poll); see :mod:`flyte_checkpoint.sharded.coordinate`."""
    from flyte_checkpoint.sharded.coordinate import _GROWTH, _OPEN_EVERY, follower_pauses

    first, cap = follower_pauses(world)
    ramp = math.ceil(math.log(cap / first, _GROWTH))
    # A wait: a poll, then one after each pause; the pauses of the ramp, then pauses of at least
    # ``cap`` (the last one maybe cut short by the deadline). Two waits, each with its ramp.
    polls = 2 * (2 + ramp) + math.ceil(wait / cap)
    return 1 + polls + math.ceil(polls / _OPEN_EVERY)


def leader_rounds(world: int, wait: float) -> int:
    """The most listing rounds of rank 0 in a wait of ``wait`` seconds for the reports: the
    ramp of its pauses, then one a cap, then the listings after the deadline."""
    from flyte_checkpoint.sharded.coordinate import _CONFIRM, _GROWTH, _POLL_FIRST, leader_cap

    cap = leader_cap(world)
    return 2 + math.ceil(math.log(cap / _POLL_FIRST, _GROWTH)) + math.ceil(wait / cap) + _CONFIRM


def pages(keys: int) -> int:
    """Listing pages of ``keys`` keys (S3: 1,000 a page)."""
    return max(1, math.ceil(keys / 1000))


def leader_budget(world: int, wait: float, lease: float = 30.0) -> dict[str, int]:
    """The most requests of rank 0, per kind, in a save that took it ``wait`` seconds: a listing
    per round of ``pages(world)`` pages (and one of the prefix to sweep it), each report read
    once, the markers removed in batches of 1,000; the session read and written a few times
    (open, collecting, finished; and a renewal, one read and one write, every ``lease / 3`` s);
    after the commit, the save's history: its manifest and its destination's summary
    (docs/history.md), two writes at most."""
    renewals = math.ceil(wait / (lease / 3))
    return {
        "list": pages(world) * (leader_rounds(world, wait) + 1),
        "get": (world - 1) + 3 + renewals,
        "put": 4 + renewals + 2,
        "delete_many": pages(world + 2),
        "delete": 0,
    }


def report(run: Run, latency: float) -> str:
    f = sorted(run.followers)
    worst_budget = max(follower_budget(run.world, w) for w in run.follower_waits) if run.follower_waits else 0
    lines = [
        f"## {run.world} ranks, {latency * 1000:g} ms a request",
        "",
        f"- wall time: {run.seconds:.2f} s ({len(run.errors)} ranks raised)",
        f"- rank 0: {run.leader_total} requests: "
        + ", ".join(f"{k} {v}" for k, v in sorted(run.leader.items())),
        f"- other ranks: at most {f[-1] if f else 0} requests each, median {statistics.median(f) if f else 0:g},"
        f" {sum(f)} in all (budget for the longest wait, {max(run.follower_waits, default=0):.1f} s: {worst_budget})",
        "- every request: " + ", ".join(f"{k} {v}" for k, v in sorted(run.kinds.items())),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    import logging
    import os

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--giveup", type=int, default=2000, help="ranks of the give-up run (0: none)")
    args = parser.parse_args(argv)
    logging.getLogger("flyte_checkpoint").setLevel(logging.CRITICAL)  # 2,000 ranks raising, each logged
    latency = args.latency_ms / 1000
    print(f"# Sharded save coordination (load {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores)\n")
    for world in args.ranks:
        run = save_world(world, latency=latency)
        if run.errors:
            raise SystemExit(f"the save of {world} ranks failed: {run.errors[0]}")
        print(report(run, latency), flush=True)
    if args.giveup:
        from flyte_checkpoint.testing.counting import CountingLatencyStore

        store = CountingLatencyStore(latency=latency)
        run = save_world(args.giveup, timeout=3.0, absent=(args.giveup - 1,), store=store)
        print(
            f"## {args.giveup} ranks, timeout=3, rank {args.giveup - 1} never comes, {latency * 1000:g} ms a request\n"
        )
        print(
            f"- every rank raised after {run.seconds:.2f} s ({len(run.errors)} of {args.giveup - 1} raised;"
            f" rank 0 after {run.leader_seconds:.2f} s)"
        )
        print(f"- rank 0: {run.leader_total} requests; other ranks: at most {max(run.followers)} each\n")


if __name__ == "__main__":
    main()
