"""What the markers of a sharded save cost (issue 36, point 2), counted, never timed: threads
as ranks save through a :class:`~flyte_checkpoint.testing.counting.CountingLatencyStore`; each
rank's requests stay within the budget of :mod:`flyte_checkpoint.sharded.coordinate` for the
wait it saw (``benchmarks.coordination`` computes it, and measures the times). And a listing
that lags behind the writes never makes rank 0 call a rank missing that reported."""

from __future__ import annotations

import math
from typing import Any

import pytest

from benchmarks.coordination import follower_budget, leader_budget, save_world
from flyte_checkpoint.sharded.coordinate import _CONFIRM, Markers, StoreCoordinator
from flyte_checkpoint.sharded.identity import Caller
from flyte_checkpoint.testing.counting import CountingLatencyStore


@pytest.mark.parametrize("world", [100, 1000])
def test_each_ranks_requests_stay_within_the_budget(world):
    """Every follower: its report, and polls with backoff (a few per save, however many ranks);
    rank 0: one listing a round (one page per 1,000 reports), each report read once, the markers
    removed by one batch delete per 1,000. Counted at 100 and 1,000 ranks."""
    run = save_world(world)
    assert run.errors == []
    assert len(run.followers) == world - 1
    for requests, wait in zip(run.followers, run.follower_waits, strict=True):
        assert requests <= follower_budget(world, wait), (requests, wait, follower_budget(world, wait))
    budget = leader_budget(world, run.seconds)
    for kind, most in budget.items():
        assert run.leader.get(kind, 0) <= most, (kind, run.leader, budget)
    assert run.leader.get("get", 0) >= world - 1  # every report read (once: the budget above)
    assert run.leader.get("delete_many") == math.ceil((world - 1) / 1000)  # the reports
    assert run.kinds.get("delete", 0) == 0  # no marker deleted one by one
    assert run.kinds["part"] == world + 1 and run.kinds["complete"] == 1  # the segments and the tail


def reports_of(store: CountingLatencyStore, prefix: str, token: str, world: int) -> None:
    """The reports of ranks 1 .. world - 1, as followers write them."""
    markers = Markers(store, prefix)
    for rank in range(1, world):
        caller = Caller(rank, world, "job", {"by": "step", "n": 1})
        markers.put(f"{token}.done-{rank}.{caller.joiner}", {"ok": True, **caller.stamp()})


def leader(store: CountingLatencyStore, prefix: str, world: int) -> StoreCoordinator:
    """Rank 0 with a deadline already passed when it collects (``timeout=0``): what it decides
    then rests on its listings alone, whatever the machine's speed."""
    caller = Caller(0, world, "job", {"by": "step", "n": 1})
    return StoreCoordinator(store, "memory://lag/ckpt", prefix, caller, timeout=0, lease=30)


@pytest.mark.parametrize("hidden", range(_CONFIRM + 2))
def test_a_report_a_lagging_listing_hides_is_found_by_the_listings_after_the_deadline(hidden):
    """A store whose listings lag: rank 2's report is left out of the first ``hidden`` listings.
    Rank 0 (its deadline passed) lists ``1 + _CONFIRM`` times before it calls a rank missing:
    a report hidden from fewer listings is found and the save goes on; one hidden from them all
    is missing, named with the timeout."""
    store = CountingLatencyStore(multipart=False)
    prefix = f"memory://lag/ckpt-{hidden}.fcp-shard/"
    reports_of(store, prefix, "tok", 4)
    store.hide(f"{prefix}tok.done-2.", hidden)
    mine: dict[str, Any] = {"ok": True, "rank": 0}
    reports, problems = leader(store, prefix, 4)._collect("tok", mine)
    assert problems == []
    listings = store.total("list")
    if hidden <= _CONFIRM:
        assert [r["ok"] for r in reports] == [True] * 4
        assert listings == hidden + 1  # each report read the first time a listing showed it
        assert store.total("get") == 3
    else:
        assert [r["ok"] for r in reports] == [True, True, False, True]
        assert reports[2]["error"].startswith("rank 2 did not report within 0s")
        assert listings == 1 + _CONFIRM


def test_a_save_whose_listings_lag_commits(tmp_path):
    """Through ``save_sharded``: rank 1's report is missing from the first five listings of the
    reports; rank 0 waits for it, and the save of 3 ranks commits."""
    store = CountingLatencyStore()
    store.hide(lambda uri: ".done-1." in uri, 5)
    run = save_world(3, store=store)
    assert run.errors == []
    assert run.leader["list"] >= 6


def test_a_rank_that_never_comes_fails_the_save_within_the_budget():
    """50 ranks, the last never calls: rank 0 names it (after its timeout and its listings after
    it), every rank raises, and no rank sent more than its budget while it waited."""
    from flyte_checkpoint.errors import ShardedSaveError

    run = save_world(50, timeout=1.0, absent=(49,))
    assert sorted(run.failures) == list(range(49))
    assert all(isinstance(e, ShardedSaveError) for e in run.errors)
    assert "rank 49 did not report within 1s" in str(run.failures[0])
    for requests, wait in zip(run.followers, run.follower_waits, strict=True):
        assert requests <= follower_budget(50, wait), (requests, wait)
    assert run.leader.get("get", 0) <= leader_budget(50, run.leader_seconds)["get"]
