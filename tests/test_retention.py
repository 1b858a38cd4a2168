"""Retention policies and the pure selection, checked against a brute-force reference."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flyte_checkpoint.errors import ConfigurationError
from flyte_checkpoint.history.retention import Candidate, Retention, decide, select


def cand(gen: int, *, attempt: int | None = 0, step=None, metrics=None, time=0.0, run="r", managed=True):
    return Candidate(f"mem://x/g{attempt}-{gen}", attempt, gen, step, metrics or {}, time, run, managed)


# -- validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({}, "at least one rule"),
        ({"keep_last": 0}, "keep_last=0"),
        ({"keep_last": -2}, "keep_last=-2"),
        ({"keep_last": True}, "keep_last=True"),
        ({"keep_last": 1.5}, "keep_last=1.5"),
        ({"keep_every_steps": 0}, "keep_every_steps=0"),
        ({"keep_every": 5}, "timedelta"),
        ({"keep_every": timedelta(0)}, "positive"),
        ({"keep_newer_than": timedelta(seconds=-1)}, "positive"),
        ({"keep_best": ("loss", "lowest", 1)}, "use 'min'"),
        ({"keep_best": ("loss", "min", 0)}, "at least 1"),
        ({"keep_best": ("", "min", 1)}, "non-empty"),
        ({"keep_best": "loss"}, "(metric, 'min' or 'max', k)"),
        ({"keep_best": [("loss", "min")]}, "(metric, 'min' or 'max', k)"),
        ({"keep_last": 1, "earlier_attempts": "yes"}, "True or False"),
    ],
)
def test_invalid_policies_say_what_is_wrong(kwargs, words):
    with pytest.raises(ConfigurationError, match=None) as info:
        Retention(**kwargs)
    assert words in str(info.value)
    assert isinstance(info.value, ValueError)


def test_keep_best_takes_one_rule_or_several():
    assert Retention(keep_best=("loss", "min", 2)).best == (("loss", "min", 2),)
    two = Retention(keep_best=[("loss", "min", 2), ("acc", "max", 1)])
    assert two.best == (("loss", "min", 2), ("acc", "max", 1))
    assert Retention(keep_last=3) == Retention(keep_last=3)
    assert Retention(keep_best=[["loss", "min", 2]]) == Retention(keep_best=("loss", "min", 2))
    assert len({two, Retention(keep_best=[("loss", "min", 2), ("acc", "max", 1)])}) == 1  # hashable
    assert "keep_last=3" in Retention(keep_last=3).describe()


def test_only_keep_last_1_keeps_no_generations():
    assert not Retention(keep_last=1).keeps_generations
    assert Retention(keep_last=2).keeps_generations
    assert Retention(keep_best=("loss", "min", 1)).keeps_generations
    assert Retention(keep_last=1, keep_every_steps=100).keeps_generations


# -- the rules, by example ---------------------------------------------------------------


def test_keep_last_orders_by_attempt_and_generation_not_names_or_times():
    # names sort the other way (g10 < g9 as text) and times go backwards (a clock set back)
    cs = [cand(g, time=100.0 - g) for g in (8, 9, 10, 11)]
    assert select(cs, Retention(keep_last=2)) == {cs[2].uri, cs[3].uri}
    # a later attempt is newer than any generation of an earlier one
    late = cand(0, attempt=1)
    assert select([*cs, late], Retention(keep_last=1)) == {late.uri}


def test_best_k_never_evicts_the_newest():
    cs = [cand(g, metrics={"loss": float(10 - g)}) for g in range(5)]  # newest is best...
    worst_newest = cand(5, metrics={"loss": 99.0})
    kept = select([*cs, worst_newest], Retention(keep_best=("loss", "min", 1)))
    assert kept == {cs[-1].uri, worst_newest.uri}


def test_nan_and_missing_metrics_are_worst_and_ties_go_to_the_newer():
    a = cand(0, metrics={"acc": float("nan")})
    b = cand(1, metrics={})
    c = cand(2, metrics={"acc": 0.5})
    d = cand(3, metrics={"acc": 0.5})
    e = cand(4, metrics={"acc": 0.1})
    kept = select([a, b, c, d, e], Retention(keep_best=("acc", "max", 1)))
    assert kept == {d.uri, e.uri}  # d: the newer of the tie; e: the newest
    kept = select([a, b, c, d, e], Retention(keep_best=("acc", "min", 1)))
    assert kept == {e.uri}  # NaN is not "lowest"
    kept = select([a, b, c], Retention(keep_best=("acc", "min", 2)))
    assert kept == {c.uri, b.uri}  # the worst fill what is left, newer first


def test_milestones_keep_the_first_of_each_window():
    cs = [cand(g, step=s) for g, s in enumerate([0, 30, 60, 90, 120, 150, 180, 210, 240])]
    kept = select(cs, Retention(keep_every_steps=100))
    assert {c.step for c in cs if c.uri in kept} == {0, 120, 210, 240}  # 240: the newest
    hours = [cand(g, time=g * 1800.0) for g in range(6)]
    kept = select(hours, Retention(keep_every=timedelta(hours=1)))
    assert {c.generation for c in hours if c.uri in kept} == {0, 2, 4, 5}


def test_keep_newer_than_uses_manifest_times():
    cs = [cand(g, time=1000.0 + g * 60) for g in range(5)]
    kept = select(cs, Retention(keep_newer_than=timedelta(minutes=2)), now=1000.0 + 4 * 60 + 1)
    assert {c.generation for c in cs if c.uri in kept} == {3, 4}


def test_what_no_policy_may_delete():
    mine = [cand(g, metrics={"loss": 1.0}) for g in range(6)]
    other = cand(0, attempt=5, run="someone-else")
    bare = cand(1, attempt=7, managed=False)
    protected = {mine[0].uri}
    decisions = decide([*mine, other, bare], Retention(keep_last=1), protected, run="r", trigger=(0, 3))
    kept = {d.candidate.uri for d in decisions if d.keep}
    # other run and no manifest (even though newer), the loaded one, newer than the trigger
    assert kept == {other.uri, bare.uri, mine[0].uri, mine[4].uri, mine[5].uri}
    why = {d.candidate.uri: d.reasons for d in decisions}
    assert any("another run" in r for r in why[other.uri])
    assert any("no committed manifest" in r for r in why[bare.uri])
    assert any("newest committed" in r for r in why[mine[5].uri])
    assert why[mine[1].uri] == ()


# -- properties against a brute-force reference ------------------------------------------

METRIC = st.one_of(
    st.none(),
    st.just(float("nan")),
    st.sampled_from([0.0, 1.0, 2.0, 2.0, -1.0]),  # ties likely
    st.floats(-1e6, 1e6, allow_nan=False),
)


@st.composite
def candidates(draw):
    n = draw(st.integers(0, 14))
    keys = draw(
        st.lists(st.tuples(st.integers(0, 3), st.integers(0, 30)), min_size=n, max_size=n, unique=True)
    )
    out = []
    for attempt, gen in keys:
        value = draw(METRIC)
        out.append(
            Candidate(
                uri=f"mem://r/{attempt}/g{gen:08d}",
                attempt=attempt,
                generation=gen,
                step=draw(st.one_of(st.none(), st.integers(0, 500))),
                metrics={} if value is None else {"m": value},
                time=draw(st.floats(0, 10_000)),
                run=draw(st.sampled_from(["r", "r", "r", "other"])),
                managed=draw(st.booleans()) or draw(st.booleans()),
            )
        )
    return out


POLICIES = st.builds(
    lambda last, best, steps, every, newer: _policy(last, best, steps, every, newer),
    st.one_of(st.none(), st.integers(1, 5)),
    st.one_of(st.none(), st.tuples(st.just("m"), st.sampled_from(["min", "max"]), st.integers(1, 4))),
    st.one_of(st.none(), st.integers(1, 200)),
    st.one_of(st.none(), st.integers(1, 5000)),
    st.one_of(st.none(), st.integers(1, 5000)),
)


def _policy(last, best, steps, every, newer):
    try:
        return Retention(
            keep_last=last,
            keep_best=best,
            keep_every_steps=steps,
            keep_every=None if every is None else timedelta(seconds=every),
            keep_newer_than=None if newer is None else timedelta(seconds=newer),
        )
    except ConfigurationError:
        return Retention(keep_last=1)


def reference(cs, policy, protected, run, trigger, now):
    """Each rule stated on its own, candidate by candidate, by counting."""
    elig = [c for c in cs if c.managed and c.run == run]

    def newer(a, b):  # a is newer than b
        return a.order > b.order

    def value(c):
        v = c.metrics.get("m")
        return None if v is None or math.isnan(v) else v

    def better(a, b, mode):  # a ranks before b under keep_best
        va, vb = value(a), value(b)
        if va is None and vb is None:
            return newer(a, b)
        if va is None or vb is None:
            return vb is None
        if va == vb:
            return newer(a, b)
        return va < vb if mode == "min" else va > vb

    kept = set()
    for c in cs:
        if not c.managed or c.run != run or c.uri in protected:
            kept.add(c.uri)
            continue
        if trigger is not None and c.order > trigger:
            kept.add(c.uri)
        if not any(newer(o, c) for o in elig):
            kept.add(c.uri)
        if policy.keep_last is not None and sum(newer(o, c) for o in elig) < policy.keep_last:
            kept.add(c.uri)
        for _, mode, k in policy.best:
            if sum(better(o, c, mode) for o in elig) < k:
                kept.add(c.uri)
        s = policy.keep_every_steps
        same_window = (
            o for o in elig if s and c.step is not None and o.step is not None and o.step // s == c.step // s
        )
        if s is not None and c.step is not None and not any(newer(c, o) for o in same_window):
            kept.add(c.uri)
        if policy.keep_every is not None:
            w = policy.keep_every.total_seconds()
            if not any(math.floor(o.time / w) == math.floor(c.time / w) and newer(c, o) for o in elig):
                kept.add(c.uri)
        if policy.keep_newer_than is not None and now - c.time < policy.keep_newer_than.total_seconds():
            kept.add(c.uri)
    return kept


@settings(max_examples=400, deadline=None)
@given(
    cs=candidates(),
    policy=POLICIES,
    data=st.data(),
    trigger=st.one_of(st.none(), st.tuples(st.integers(0, 3), st.integers(0, 30))),
    now=st.floats(0, 20_000),
)
def test_select_matches_the_reference(cs, policy, data, trigger, now):
    protected = set(data.draw(st.lists(st.sampled_from([c.uri for c in cs]), max_size=2))) if cs else set()
    got = select(cs, policy, protected, run="r", trigger=trigger, now=now)
    assert got == reference(cs, policy, protected, "r", trigger, now)


@settings(max_examples=300, deadline=None)
@given(cs=candidates(), policy=POLICIES, now=st.floats(0, 20_000))
def test_select_is_stable_once_applied(cs, policy, now):
    """Deleting what it drops changes nothing it keeps: selecting again keeps the same."""
    kept = select(cs, policy, run="r", now=now)
    again = select([c for c in cs if c.uri in kept], policy, run="r", now=now)
    assert again == kept


@settings(max_examples=300, deadline=None)
@given(cs=candidates(), policy=POLICIES, now=st.floats(0, 20_000))
def test_the_newest_committed_and_everything_foreign_survive(cs, policy, now):
    kept = select(cs, policy, run="r", now=now)
    mine = [c for c in cs if c.managed and c.run == "r"]
    if mine:
        assert max(mine, key=lambda c: c.order).uri in kept
    assert {c.uri for c in cs if not c.managed or c.run != "r"} <= kept
