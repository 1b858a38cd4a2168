"""Sharded saves of many actors, as a hypothesis rule-based state machine (issue 32).

Ranks are threads of this process (``rank=``/``world_size=``/``job=`` given, markers on the
store: the file store's own sharded writes, and the gathering fallback on the memory store).
Each step is an episode: one job, or two jobs at once on the same URI, saves one or two rounds
in a row. Drawn per episode and rank: the job (new, or one seen before; named, or for one job
alone unnamed; saves counted by call or named by ``step=``), a world size that differs from
rank 0's (a rank inside rank 0's world, or one outside it), a rank that comes late (it starts
once rank 0's first call has ended, so that it either times out or meets rank 0's next save),
and a rank that dies at a step of a round (its observer raises :class:`Died`, a
``BaseException`` nothing catches: the thread stops there, as a killed process would; the job
is then restarted: its calls are counted from 1 again, and a job named by steps may save the
dead round's step again). Every wait is short (:data:`TIMEOUT`, the lease :data:`LEASE`), so
that ranks that never come cost little; a machine too busy for them makes more calls fail,
which the model allows, never a mix.

After each episode (every thread ended), the model:

- the object is byte for byte the previous one if no rank 0 returned normally, else the union
  of the folders of a round whose rank 0 returned normally: one session's whole union, every
  rank's ``load_sharded(own=True)`` its own folder;
- a rank that returned normally had its files committed: its rank 0 returned normally in the
  same round, with the same world size;
- a rank 0 that returned normally had every rank of its world on time, alive until it
  reported, and of its world size; a late rank's first call never returns normally;
- every failure is a ``ShardedSaveError`` that names the destination.

CI's budget: ``FCP_SHARD_STATE_EXAMPLES`` sequences (default 3) of ``FCP_SHARD_STATE_STEPS``
steps (default 5) per backend; RELIABILITY.md gives the long run.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

import flyte_checkpoint as fc
from flyte_checkpoint.errors import ShardedSaveError
from flyte_checkpoint.sharded import coordinate, load_sharded, save_sharded
from flyte_checkpoint.sharded.identity import LEASE_ENV, forget_saves
from flyte_checkpoint.storage.registry import store_for
from tests import shardranks as sr

LONG_RUN = os.environ.get("FCP_SHARD_STATE_EXAMPLES")
EXAMPLES = int(LONG_RUN or "3")
STEPS = int(os.environ.get("FCP_SHARD_STATE_STEPS", "5"))
BACKEND_NAMES = ("file", "memory")
#: How long each rank waits for the others (a rank that never comes costs this).
TIMEOUT = 1.0
LEASE = "3s"  # renewed every second: a busy machine (fsync of a marker on the file store) renews late
#: A thread that has not ended after this long is a hang (a guard, not a timing).
HANG = 120.0
LEADER_STEPS = ("session", "packing", "segment", "committing", "outcome")
FOLLOWER_STEPS = ("session", "packing", "segment", "reported")
TALLY: Counter[str] = Counter()
#: CI runs the same sequences every time; a long run (FCP_SHARD_STATE_EXAMPLES set), new ones.
BUDGET = settings(
    derandomize=LONG_RUN is None,
    suppress_health_check=list(HealthCheck),
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
)


class Died(BaseException):
    """A rank's process killed at a step: raised by its observer, caught by nothing in the library."""


@dataclass(eq=False)
class Job:
    name: str | None
    world: int
    by_step: bool
    next_step: int = 0


@dataclass(eq=False)
class Rank:
    """One rank thread of an episode: its calls, one per round, and their results."""

    job: Job
    rank: int
    world: int
    late: bool
    dies: tuple[int, str] | None
    folders: list[Path]
    steps: list[int | None]
    round: int = 0
    #: Per round reached: "ok", "died", or the error's text ("UNEXPECTED ..." for any other).
    results: list[str] = field(default_factory=list)
    #: The (round, step) points its calls passed.
    reached: set[tuple[int, str]] = field(default_factory=set)

    def result(self, k: int) -> str | None:
        return self.results[k] if k < len(self.results) else None

    def reported_in(self, k: int) -> bool:
        """Whether this rank lived until it reported in round ``k``."""
        if self.dies is None or self.dies[0] != k:
            return self.result(k) is not None
        return self.dies[1] in ("reported", "outcome")

    def may_have_committed(self, k: int) -> bool:
        """For rank 0: whether it died after it began committing round ``k`` (it did, or failed)."""
        return self.dies == (k, "outcome") and (k, "committing") in self.reached


#: The rank each running thread plays (the observer's way to find it).
_playing: dict[int, Rank] = {}


def _observer(rank: int, step: str) -> None:
    me = _playing.get(threading.get_ident())
    if me is not None:
        me.reached.add((me.round, step))
        if me.dies == (me.round, step):
            raise Died()


class ShardedSaves(RuleBasedStateMachine):
    dest: str
    base: Path
    backend: str

    @initialize()
    def start(self) -> None:
        self.jobs: list[Job] = []
        self.names = 0
        self.episode = 0
        self.previous: bytes | None = None  # the object's bytes (None: none yet)

    # -- plans ------------------------------------------------------------------------------

    def _job(self, data: st.DataObject, *, named: bool, other_than: Job | None = None) -> Job:
        known = [j for j in self.jobs if (j.name is not None or not named) and j is not other_than]
        if known and data.draw(st.booleans(), label="a job seen before"):
            return data.draw(st.sampled_from(known), label="job")
        self.names += 1
        # One job at most has no name: two would be one job to the library (their ranks count
        # their saves together), which no two real processes are.
        unnamed = not named and all(j.name is not None for j in self.jobs)
        name = None if unnamed and data.draw(st.booleans(), label="unnamed") else f"job{self.names}"
        world = data.draw(st.integers(2, 4), label="world")
        job = Job(name, world, data.draw(st.booleans(), label="by step"))
        self.jobs.append(job)
        return job

    def _ranks(self, data: st.DataObject, job: Job, rounds: int, late: int | None = None) -> list[Rank]:
        steps: list[int | None] = [None] * rounds
        if job.by_step:
            if job.next_step and data.draw(st.booleans(), label="a step saved before again"):
                job.next_step -= 1  # as a job restarted from an earlier checkpoint does
            steps = [job.next_step + k for k in range(rounds)]
            job.next_step += rounds
        count = job.world + (1 if data.draw(st.integers(0, 5), label="an extra rank") == 0 else 0)
        ranks = []
        for r in range(count):
            world = job.world if r < job.world else r + 1
            if data.draw(st.integers(0, 7), label=f"rank {r}'s world differs") == 0:
                world = data.draw(st.integers(r + 1, 6).filter(lambda w, old=world: w != old), label="world")
            if late is None:
                is_late = r > 0 and data.draw(st.integers(0, 5), label=f"rank {r} late") == 0
            else:
                is_late = r == late
            dies = None
            if data.draw(st.integers(0, 7), label=f"rank {r} dies") == 0:
                dies = (
                    data.draw(st.integers(0, rounds - 1), label="round"),
                    data.draw(st.sampled_from(LEADER_STEPS if r == 0 else FOLLOWER_STEPS), label="step"),
                )
            tag = f"e{self.episode}-{job.name}-r{r}"
            folders = [self._folder(data, f"{tag}-k{k}", r) for k in range(rounds)]
            ranks.append(Rank(job, r, world, is_late, dies, folders, steps))
        return ranks

    def _folder(self, data: st.DataObject, tag: str, rank: int) -> Path:
        """A rank's folder: its own files (one maybe empty, last, at its segment's edge) and a
        folder every rank shares; the contents name the episode, job, rank and round."""
        folder = self.base / tag
        (folder / "shared").mkdir(parents=True)
        for i in range(data.draw(st.integers(1, 3), label="files")):
            (folder / f"rank{rank}-{i}.bin").write_bytes(tag.encode() * data.draw(st.integers(1, 2000)))
        (folder / "shared" / f"rank{rank}.json").write_text(tag)
        if data.draw(st.booleans(), label="an empty file last"):
            (folder / f"rank{rank}-zz").write_bytes(b"")
        return folder

    # -- rules ------------------------------------------------------------------------------

    @rule(data=st.data())
    def one_job_saves(self, data: st.DataObject) -> None:
        job = self._job(data, named=False)
        self._episode([self._ranks(data, job, data.draw(st.integers(1, 2), label="rounds"))])

    @rule(data=st.data())
    def a_rank_comes_late(self, data: st.DataObject) -> None:
        """Issue 32's item 2: rank 0 saves twice in a row; a rank's first call starts once rank
        0's first save has ended (without it), while rank 0's second save is open."""
        job = self._job(data, named=False)
        late = data.draw(st.integers(1, job.world - 1), label="late")
        self._episode([self._ranks(data, job, 2, late=late)])

    @rule(data=st.data())
    def two_jobs_save_at_once(self, data: st.DataObject) -> None:
        first = self._job(data, named=True)
        second = self._job(data, named=True, other_than=first)
        self._episode(
            [self._ranks(data, job, data.draw(st.integers(1, 2), label="rounds")) for job in (first, second)]
        )

    # -- one episode ------------------------------------------------------------------------

    def _episode(self, plans: list[list[Rank]]) -> None:
        self.episode += 1
        threads = []
        for ranks in plans:
            first_done = threading.Event()
            for r in ranks:
                threads.append(threading.Thread(target=self._play, args=(r, first_done), daemon=True))
        for t in threads:
            t.start()
        for t in threads:
            t.join(HANG)
        assert not any(t.is_alive() for t in threads), "a rank hangs"
        self._check(plans)
        for ranks in plans:
            if any(r.dies is not None for r in ranks):
                forget_saves(self.dest, [ranks[0].job.name])  # the job is restarted
                TALLY["jobs restarted after a death"] += 1

    def _play(self, me: Rank, first_done: threading.Event) -> None:
        _playing[threading.get_ident()] = me
        try:
            if me.late:
                first_done.wait(HANG)
            for k, folder in enumerate(me.folders):
                me.round = k
                try:
                    save_sharded(
                        self.dest,
                        folder,
                        rank=me.rank,
                        world_size=me.world,
                        job=me.job.name,
                        step=me.steps[k],
                        timeout=TIMEOUT,
                    )
                    me.results.append("ok")
                except Died:
                    me.results.append("died")
                    return
                except ShardedSaveError as exc:
                    me.results.append(str(exc))
                except BaseException as exc:  # reported by the model
                    me.results.append(f"UNEXPECTED {exc!r}")
                finally:
                    if me.rank == 0 and k == 0:
                        first_done.set()
        finally:
            del _playing[threading.get_ident()]

    # -- the model --------------------------------------------------------------------------

    def _check(self, plans: list[list[Rank]]) -> None:
        sure: list[dict[str, bytes]] = []  # unions of the rounds whose rank 0 returned normally
        maybe: list[dict[str, bytes]] = []  # and of those whose rank 0 died as it committed
        for ranks in plans:
            leader = ranks[0]
            for r in ranks:
                for result in r.results:
                    if result in ("ok", "died"):
                        TALLY[f"calls {result}"] += 1
                        continue
                    assert not result.startswith("UNEXPECTED"), result
                    assert self.dest in result, f"an error that does not name the destination: {result}"
                    TALLY["calls raised: " + _kind(result)] += 1
            for k in range(len(leader.folders)):
                members = [r for r in ranks if r.rank < leader.world]
                union = sr.union([r.folders[k] for r in members])
                returned = [r.rank for r in ranks[1:] if r.result(k) == "ok"]
                if returned:
                    assert leader.result(k) == "ok" or leader.may_have_committed(k), (
                        f"ranks {returned} returned from round {k}, whose rank 0 did not commit"
                    )
                if leader.result(k) == "ok" or (returned and leader.may_have_committed(k)):
                    TALLY["rounds committed"] += 1
                    for r in members[1:]:
                        assert r.world == leader.world, f"committed with rank {r.rank} of world {r.world}"
                        assert not (r.late and k == 0), f"committed without late rank {r.rank}"
                        assert r.reported_in(k), f"committed though rank {r.rank} died before it reported"
                if leader.result(k) == "ok":
                    sure.append(union)
                elif leader.may_have_committed(k):
                    maybe.append(union)
                for r in ranks[1:]:
                    if r.result(k) == "ok":
                        assert r.world == leader.world and r.rank < leader.world
                    if r.late and k == 0:
                        assert r.result(k) != "ok", f"late rank {r.rank} returned normally"
        body = self._body()
        if body == self.previous and not sure:
            return
        assert sure or maybe, "the object changed, though no rank 0 committed"
        tree = self._restore()
        assert tree in sure + maybe, "the object is not one session's whole union (a mix, or a part)"
        self._check_own(tree, plans)
        self.previous = body

    def _body(self) -> bytes | None:
        store = store_for(self.dest)
        return store.read_bytes(self.dest) if store.stat(self.dest) is not None else None

    def _restore(self) -> dict[str, bytes]:
        with fc.Checkpoint(str(self.base / f"restore-{uuid.uuid4().hex}"), self.dest) as cp:
            path = cp.load_sync()
            assert path is not None
            return sr.tree(path)

    def _check_own(self, tree: dict[str, bytes], plans: list[list[Rank]]) -> None:
        """Each rank of the round committed restores exactly its own folder with own=True."""
        for ranks in plans:
            leader = ranks[0]
            for k in range(len(leader.folders)):
                members = [r for r in ranks if r.rank < leader.world]
                if sr.union([r.folders[k] for r in members]) != tree:
                    continue
                for r in members:
                    with fc.Checkpoint(str(self.base / f"own-{uuid.uuid4().hex}"), self.dest) as cp:
                        assert sr.tree(load_sharded(cp, own=True, rank=r.rank)) == sr.tree(r.folders[k])  # type: ignore[arg-type]
                return

    def teardown(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)


def _kind(error: str) -> str:
    """What kind of failure a message tells (for the tally)."""
    for needle, kind in (
        ("out of step", "out of step"),
        ("needs the same world size", "world sizes differ"),
        ("another sharded save is in progress", "another job's save in progress"),
        ("another sharded save took over", "another job took over"),
        ("two processes reported as rank", "two processes as one rank"),
        ("another process's part", "another process's part committed"),
        ("without this rank (", "rank 0 committed without this rank"),
        ("did not report within", "a rank did not report"),
        ("did not open", "rank 0 did not open"),
        ("announced no outcome", "no outcome"),
        ("ended ", "rank 0 ended the save without this rank"),
    ):
        if needle in error:
            return kind
    return "other: " + error[:120]


@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_sharded_saves_of_many_actors_never_mix(name, tmp_path, monkeypatch):
    """See the module docstring: ``FCP_SHARD_STATE_EXAMPLES`` sequences of
    ``FCP_SHARD_STATE_STEPS`` episodes on ``name``'s store."""
    monkeypatch.setenv(LEASE_ENV, LEASE)
    coordinate.observers.append(_observer)
    TALLY.clear()
    try:

        class Machine(ShardedSaves):
            def __init__(self) -> None:
                super().__init__()
                run = uuid.uuid4().hex
                self.base = tmp_path / run
                self.base.mkdir()
                if name == "memory":
                    self.dest = f"memory://fcp-shard-state/{run}/ckpt"
                else:
                    (tmp_path / "store" / run).mkdir(parents=True)
                    self.dest = str(tmp_path / "store" / run / "ckpt")

        run_state_machine_as_test(Machine, settings=BUDGET)
    finally:
        coordinate.observers.remove(_observer)
    print(f"\nsharded state machine on {name}: " + ", ".join(f"{k} {v}" for k, v in sorted(TALLY.items())))
