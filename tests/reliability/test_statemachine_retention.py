"""Retention as a hypothesis rule-based state machine: saves, crashes, resumes and clean-ups
against a reference model.

One run (``r``) of attempts ``0, 1, 2...``, each saving to ``{root}/r/{attempt}/ckpt`` with
``fc.Checkpoint(dest, previous attempt's dest, retention=policy)``; beside it another run
(``other``) whose checkpoints nothing may touch. The policy is drawn once per sequence
(``keep_last``, ``keep_best`` on a metric with NaN, missing values and ties, ``keep_every_steps``,
combined; ``earlier_attempts`` or not). Steps:

- ``save``: a unique token saved with a random step and metric; the clean-up it starts is
  waited for (``wait()``);
- ``crash``: the same, with the "process" killed before its k-th store write, commit or delete
  from now (in the save: the generation copy, the commit, the manifest; or in the clean-up that
  follows: a marking, an object's or a manifest's delete); the attempt is over, and the next
  one starts (a kill ends the process: nothing of it runs after the point);
- ``resume``: the next attempt starts, and loads the previous attempt's checkpoint;
- ``gc``: a finished run's clean-up of the whole root for run ``r`` (every attempt's objects).

The model is the set of live checkpoints (token, attempt, order, step, metric, object URI).
After each step without a crash, the checkpoints the store lists (committed manifests whose
object is there and matches) are exactly the model's, the newest loads, and the other run is
byte for byte what it was. After a crash, what the store lists must be a subset of what was
there plus the save's token, and may drop only checkpoints the policy does not keep; the
model takes what is there, and the next full clean-up must reach the policy's set exactly.

Kills are simulated in this process by raising from a store hook (tests/spystore.py) before
an operation, which leaves the store as a SIGKILL there would (tests/reliability/
test_crash_retention.py kills real processes at each step of a clean-up).

CI runs ``FCP_RETENTION_EXAMPLES`` sequences of up to ``FCP_RETENTION_STEPS`` steps on the file
and memory stores.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import flyte_checkpoint as fc
from flyte_checkpoint.history.cleanup import clean_prefix
from flyte_checkpoint.history.manifest import COMMITTED, read_manifests
from flyte_checkpoint.history.recording import digest_of_bytes
from flyte_checkpoint.history.retention import Candidate, Retention
from flyte_checkpoint.lifecycle.runs import current_attempt
from flyte_checkpoint.storage.registry import store_for
from flyte_checkpoint.taskcontext import CheckpointPaths, TaskContext
from tests.reliability import backends
from tests.spystore import spying
from tests.test_retention import reference

TALLY: Counter[str] = Counter()
EXAMPLES = int(os.environ.get("FCP_RETENTION_EXAMPLES", "4"))
STEPS = int(os.environ.get("FCP_RETENTION_STEPS", "10"))
METRICS = st.sampled_from([None, float("nan"), 0.5, 1.0, 1.0, 2.0, -3.0])


class Killed(BaseException):
    """The simulated SIGKILL: raised before a store operation, caught by nothing but the machine."""


@dataclass(frozen=True)
class Live:
    token: str
    attempt: int
    order: int  # save order within the attempt (generations are increasing in it)
    step: int
    metric: float | None
    uri: str  # where its bytes are now (the destination, or a kept generation)

    def candidate(self) -> Candidate:
        return Candidate(
            self.uri,
            self.attempt,
            self.order,
            self.step,
            {} if self.metric is None else {"m": self.metric},
            0.0,
            "r",
            True,
        )


POLICIES = st.builds(
    lambda last, best, steps, earlier: _policy(last, best, steps, earlier),
    st.one_of(st.none(), st.integers(1, 3)),
    st.one_of(st.none(), st.tuples(st.just("m"), st.sampled_from(["min", "max"]), st.integers(1, 2))),
    st.one_of(st.none(), st.integers(15, 60)),
    st.booleans(),
)


def _policy(last, best, steps, earlier) -> Retention:
    if last is None and best is None and steps is None:
        last = 1
    return Retention(keep_last=last, keep_best=best, keep_every_steps=steps, earlier_attempts=earlier)


class RetentionMachine(RuleBasedStateMachine):
    def __init__(self, backend: str, tmp: Path, cloud_root: str | None = None) -> None:
        super().__init__()
        self.backend = backend
        if backend == "file":
            folder = tmp / uuid.uuid4().hex[:8]
            folder.mkdir()
            self.real_root = str(folder)
            self.root = f"spy://{folder}"
        else:
            base = cloud_root or "memory://fcp-retention-sm"
            self.real_root = f"{base.rstrip('/')}/{uuid.uuid4().hex}"
            self.root = "spy://" + self.real_root.split("://", 1)[1]
        self.kill_at: int | None = None  # kill before this many more hooked operations
        self.kill_in = "save"  # of the save ("save") or of its clean-up ("clean-up")
        target = "file" if backend == "file" else self.real_root.split("://", 1)[0]
        self.spy_cm = spying(target, self._hook)
        self.spy_cm.__enter__()
        self.store = store_for(self.root + "/x")
        self.live: dict[str, Live] = {}
        self.attempt = -1
        self.order = 0
        self.cp: fc.Checkpoint | None = None
        self.token_now: dict[int, str] = {}  # attempt -> the token at its destination's object
        self.other = self._make_other_run()
        self.policy = Retention(keep_last=1)

    # -- plumbing ----------------------------------------------------------------------------

    def _hook(self, op: str, uri: str) -> None:
        if self.kill_at is None or op not in ("commit", "write_bytes", "delete"):
            return
        in_clean_up = threading.current_thread().name.startswith("fcp-retention")
        if self.kill_in != "any" and in_clean_up != (self.kill_in == "clean-up"):
            return
        self.kill_at -= 1
        if self.kill_at <= 0:
            self.kill_at = None
            raise Killed(f"killed before {op} {uri}")

    def dest(self, attempt: int, run: str = "r") -> str:
        return f"{self.root}/{run}/{attempt}/ckpt"

    def _context(self, attempt: int, run: str = "r"):
        src = self.dest(attempt - 1, run) if attempt else None
        return TaskContext(attempt, CheckpointPaths(self.dest(attempt, run), src), run_name=run)

    def _make_other_run(self) -> dict[str, bytes]:
        token = current_attempt.set(self._context(0, "other"))
        try:
            with fc.Checkpoint(self.dest(0, "other"), retention=Retention(keep_last=3)) as cp:
                for step in range(3):
                    cp.save_sync(f"other {step}".encode(), step=step, metrics={"m": 0.0})
        finally:
            current_attempt.reset(token)
        return self._snapshot("other")

    def _snapshot(self, run: str) -> dict[str, bytes]:
        prefix = f"{self.root}/{run}/"
        return {u: self.store.read_bytes(u) for u in self.store.list(prefix)}

    def observed(self) -> dict[str, tuple[str, int, str]]:
        """token -> (uri, attempt, state) of what the history lists: committed manifests of run
        ``r`` whose object is there with the bytes the manifest's digest names."""
        digests = {digest_of_bytes(t.encode()): t for t in self.all_tokens}
        out: dict[str, tuple[str, int, str]] = {}
        for attempt in range(self.attempt + 1):
            dest = self.dest(attempt)
            newest: dict[str, object] = {}
            for m in read_manifests(self.store, dest):
                if m.state != COMMITTED:
                    continue
                have = newest.get(m.object)
                if have is None or m.generation > have.generation:  # type: ignore[attr-defined]
                    newest[m.object] = m
            for m in newest.values():
                try:
                    data = self.store.read_bytes(m.object)  # type: ignore[attr-defined]
                except FileNotFoundError:  # a committed manifest whose object is gone: the
                    # protocol (mark, delete, unlink) never leaves one
                    raise AssertionError(f"{m} is committed, and its object is gone") from None
                if m.digest != digest_of_bytes(data) or m.digest not in digests:  # type: ignore[attr-defined]
                    continue  # no longer what it describes (replaced, or never committed)
                out[digests[m.digest]] = (m.object, attempt, m.state)  # type: ignore[attr-defined]
        return out

    # -- rules ------------------------------------------------------------------------------

    @initialize(policy=POLICIES)
    def start(self, policy: Retention) -> None:
        self.policy = policy
        self.all_tokens: set[str] = set()
        self._next_attempt(load=False)

    def _next_attempt(self, *, load: bool) -> None:
        if self.cp is not None:
            self.cp.close()
        self.attempt += 1
        self.order = 0
        self.ctx = self._context(self.attempt)
        src = self.ctx.checkpoint_paths.prev_checkpoint_path
        self.cp = fc.Checkpoint(self.dest(self.attempt), src, retention=self.policy)
        if load and src is not None:
            token = current_attempt.set(self.ctx)
            try:
                got = self.cp.load_sync()
            finally:
                current_attempt.reset(token)
            want = self.token_now.get(self.attempt - 1)
            if want is None:
                assert got is None or not got.read_bytes()
            else:
                assert got is not None and got.read_bytes() == want.encode()

    def _save(self, step: int, metric: float | None) -> str:
        assert self.cp is not None
        tok = f"{self.attempt}.{self.order}.{uuid.uuid4().hex[:8]}"
        self.all_tokens.add(tok)
        token = current_attempt.set(self.ctx)
        try:
            self.cp.save_sync(tok.encode(), step=step, metrics={} if metric is None else {"m": metric})
            self.cp.wait()
        finally:
            current_attempt.reset(token)
        return tok

    def _expected_after_save(
        self, tok: str, step: int, metric: float | None, *, clean_up: bool = True
    ) -> dict[str, Live]:
        """The model after a save that ran to its end (its clean-up included, if ``clean_up``)."""
        live = dict(self.live)
        previous = self.token_now.get(self.attempt)
        if previous is not None and previous in live:
            if self.policy.keeps_generations:
                # kept as a generation: its URI (gNNNNNNNN.obj) is read back after the save
                live[previous] = replace(
                    live[previous], uri=f"{self.dest(self.attempt)}.fcp-history/{previous}"
                )
            else:
                del live[previous]  # replaced in place: its bytes are gone
        live[tok] = Live(tok, self.attempt, self.order, step, metric, self.dest(self.attempt))
        return self._expected_clean_up(live) if clean_up else live

    def _expected_clean_up(self, live: dict[str, Live]) -> dict[str, Live]:
        """What this attempt's checkpoint's clean-up keeps of ``live``."""
        scope = {self.attempt} | ({self.attempt - 1} if self.policy.earlier_attempts else set())
        in_scope = [e for e in live.values() if e.attempt in scope]
        protected = {self.dest(self.attempt - 1)} if self.attempt else set()
        kept = reference([e.candidate() for e in in_scope], self.policy, protected, "r", None, 0.0)
        return {t: e for t, e in live.items() if e.attempt not in scope or e.uri in kept}

    @rule(step=st.integers(0, 60), metric=METRICS)
    def save(self, step: int, metric: float | None) -> None:
        self._fix_uris()
        tok = self._save(step, metric)
        expected = self._expected_after_save(tok, step, metric)
        self.token_now[self.attempt] = tok
        self.order += 1
        TALLY["save"] += 1
        got = self.observed()
        assert set(got) == set(expected), (self.policy, sorted(got), sorted(expected))
        self.live = expected
        self._take(got)

    @rule(step=st.integers(0, 60), metric=METRICS)
    def save_without_clean_up(self, step: int, metric: float | None) -> None:
        """A save whose process is killed right after its manifest: a backlog to clean."""
        self._fix_uris()
        assert self.cp is not None
        self.cp._after_commit = lambda *args: None  # type: ignore[method-assign]
        try:
            tok = self._save(step, metric)
        finally:
            del self.cp._after_commit
        expected = self._expected_after_save(tok, step, metric, clean_up=False)
        self.token_now[self.attempt] = tok
        self.order += 1
        TALLY["save without clean-up"] += 1
        got = self.observed()
        assert set(got) == set(expected), (self.policy, sorted(got), sorted(expected))
        self.live = expected
        self._take(got)

    @rule(
        backlog=st.lists(st.tuples(st.integers(0, 60), METRICS), min_size=1, max_size=3), k=st.integers(1, 4)
    )
    def crash_clean_up(self, backlog: list[tuple[int, float | None]], k: int) -> None:
        """Saves whose clean-ups did not run, then this attempt's clean-up, killed before its
        k-th write or delete; the next attempt."""
        for step, metric in backlog:
            self.save_without_clean_up(step, metric)
        self._fix_uris()
        assert self.cp is not None
        before = set(self.live)
        must = set(self._expected_clean_up(dict(self.live)))
        self.kill_at, self.kill_in = k, "any"
        try:
            self.cp._clean_up("r", True)  # as after a save of run r
            TALLY["clean-up, kill never reached"] += 1
        except Killed:
            TALLY["crash in a clean-up"] += 1
        finally:
            self.kill_at = None
        got = self.observed()
        assert must <= set(got) <= before, (self.policy, sorted(must - set(got)), sorted(set(got) - before))
        self.live = {t: e for t, e in self.live.items() if t in got}
        self._take(got)
        self.cp = None
        self._next_attempt(load=True)

    @rule(
        step=st.integers(0, 60),
        metric=METRICS,
        where=st.sampled_from(["save", "clean-up"]),
        k=st.integers(1, 4),
    )
    def crash(self, step: int, metric: float | None, where: str, k: int) -> None:
        self._fix_uris()
        before = set(self.observed())
        self.kill_at, self.kill_in = k, where
        try:
            self._save(step, metric)
        except Killed:
            TALLY["crash in the save"] += 1
        else:
            TALLY["crash in the clean-up" if self.kill_at is None else "crash never reached"] += 1
        finally:
            self.kill_at = None
        got = self.observed()
        mine = {t for t in self.all_tokens if t.startswith(f"{self.attempt}.{self.order}.")}
        assert set(got) <= before | mine, (sorted(got), sorted(before))
        # what the policy keeps after this save must all be there (but the save's own token,
        # which may not have committed, and the object it replaces in place)
        for t in mine:
            expected = self._expected_after_save(t, step, metric)
            replaced = set() if self.policy.keeps_generations else {self.token_now.get(self.attempt)}
            must = set(expected) - mine - replaced
            assert must <= set(got), (self.policy, sorted(must - set(got)))
        # what the destination holds now
        try:
            data = self.store.read_bytes(self.dest(self.attempt)).decode()
        except FileNotFoundError:
            data = None
        if data is not None:
            self.token_now[self.attempt] = data
        self._adopt(got, step, metric)
        # the process is gone: its checkpoint is abandoned (no close: nothing of it runs after)
        self.cp = None
        self._next_attempt(load=True)

    @precondition(lambda self: self.order > 0)
    @rule()
    def resume(self) -> None:
        TALLY["resume"] += 1
        self._next_attempt(load=True)

    @precondition(lambda self: self.order > 0)
    @rule()
    def gc(self) -> None:
        self._fix_uris()
        assert self.cp is not None
        self.cp.wait()
        live = dict(self.live)
        kept = reference([e.candidate() for e in live.values()], self.policy, set(), "r", None, 0.0)
        TALLY["gc"] += 1
        TALLY["gc deleted"] += clean_prefix(self.store, f"{self.root}/", self.policy, run="r")
        got = self.observed()
        assert set(got) == {t for t, e in live.items() if e.uri in kept}, (self.policy, sorted(got))
        self.live = {t: e for t, e in live.items() if t in got}
        self._take(got)

    # -- the model's bookkeeping --------------------------------------------------------------

    def _fix_uris(self) -> None:
        got = self.observed()
        assert set(got) == set(self.live), (sorted(got), sorted(self.live))
        self._take(got)

    def _take(self, got: dict[str, tuple[str, int, str]]) -> None:
        """The model's object URIs, as the store has them now (a generation's gNNNNNNNN.obj)."""
        assert set(got) == set(self.live), (sorted(got), sorted(self.live))
        self.live = {t: replace(e, uri=got[t][0]) for t, e in self.live.items()}

    def _adopt(self, got, step, metric) -> None:
        live = {}
        for t, (uri, attempt, _) in got.items():
            if t in self.live:
                live[t] = replace(self.live[t], uri=uri)
            else:  # the crashed save's, committed with its manifest
                live[t] = Live(t, attempt, self.order, step, metric, uri)
        self.live = live
        self.order += 1

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def newest_loads_and_other_run_untouched(self) -> None:
        if not hasattr(self, "all_tokens"):
            return
        assert self._snapshot("other") == self.other
        if self.live:
            newest = max(self.live.values(), key=lambda e: (e.attempt, e.order))
            assert self.store.read_bytes(newest.uri) == newest.token.encode()

    def teardown(self) -> None:
        try:
            if self.cp is not None:
                self.cp.close()
        finally:
            self.spy_cm.__exit__(None, None, None)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the simulated kills
@pytest.mark.parametrize("backend", ["file", "memory"])
def test_retention_state_machine(backend, tmp_path):
    run_state_machine_as_test(
        lambda: RetentionMachine(backend, tmp_path),
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
    print(f"\n{backend}: {dict(TALLY)}")
    TALLY.clear()


backend = backends.backend
backend_pool = backends.backend_pool


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the simulated kills
@pytest.mark.parametrize("backend", ["s3", "gcs", "azure"], indirect=True)
def test_retention_state_machine_on_cloud_stores(backend, tmp_path):
    """The same on S3, GCS and Azure (their test servers; CI=true: a missing one fails)."""
    root = backend.fresh("retention-sm")
    run_state_machine_as_test(
        lambda: RetentionMachine(backend.name, tmp_path, root),
        settings=settings(
            max_examples=int(os.environ.get("FCP_RETENTION_CLOUD_EXAMPLES", "2")),
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
    print(f"\n{backend.name}: {dict(TALLY)}")
    TALLY.clear()
