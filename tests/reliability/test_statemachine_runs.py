"""Named runs as a hypothesis rule-based state machine: attempts that save, fail, die.

One named run (``@fc.task(run_name=...)``) on a root, called again and again. Each step is one
call of the run, in this process or in a child process:

- in this process, a plan of one to four attempts (``retries`` = the plan's length - 1), each
  of which loads, saves 0 to 3 times (a fresh token each), then fails (``RuntimeError``: the
  next attempt), succeeds (the run ends and its checkpoints go), or is interrupted
  (``KeyboardInterrupt``, Ctrl-C twice: the call ends, the run is kept);
- in a child process (file root only: a memory root lives in one process), one attempt that
  saves 0 to 3 times and is then stopped at a point it reports (as
  :mod:`tests.reliability.killpoints` does): after its load (it saved nothing), after a save,
  or inside the next save at the store's ``open``, ``commit`` or ``committed`` point, and
  SIGKILLed there; or it gets SIGTERM after its saves and its final save
  (``fc.ctx().on_terminate``) stores one more token. While the child holds the run, a call
  in this process is refused (``RunInUseError``) and changes nothing.

The model: the last token any attempt of the run committed (a save that returned, a killed
save that passed its store's commit, a final save that logged ``done``), and the next attempt
number. Every attempt must load exactly the model's token (nothing before the first commit,
and after a run that succeeded), whatever attempts failed, died or saved nothing in between;
attempt numbers go on across calls until the run succeeds; a run that succeeded leaves no
checkpoint behind; no failure message counts negative retries.

CI runs ``FCP_RUNS_EXAMPLES`` sequences of up to ``FCP_RUNS_STEPS`` steps on the file root and
on a memory root; ``FCP_RUNS_EXAMPLES=200 FCP_RUNS_STEPS=20`` runs it longer (new sequences
each run; ``-s`` prints what the runs did).
"""

from __future__ import annotations

import os
import re
import signal
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import flyte_checkpoint as fc
from flyte_checkpoint.errors import RunInUseError
from flyte_checkpoint.storage.registry import store_for
from tests.childlines import Child
from tests.reliability.killpoints import ENV as KILL_AT
from tests.reliability.killpoints import WRITER_ENV
from tests.test_sigterm_handlers import Records

#: CI's budget, per root; raise both to run it longer (see the module's doc).
LONG_RUN = os.environ.get("FCP_RUNS_EXAMPLES")
EXAMPLES = int(LONG_RUN or "5")
STEPS = int(os.environ.get("FCP_RUNS_STEPS", "8"))
ROOT = Path(__file__).resolve().parents[2]
TALLY: Counter[str] = Counter()

#: One attempt of an in-process call: how many saves, then how it ends.
ATTEMPT = st.tuples(st.integers(0, 3), st.sampled_from(["fail", "succeed", "interrupt"]))
#: Where a child stops: after its load, after its k-th save, inside its next save at a store
#: point (``open`` and ``commit`` come before the commit, ``committed`` after), or SIGTERM.
STOPS = st.sampled_from(["loaded", "saved", "open", "commit", "committed", "sigterm"])

CHILD = r"""
import os, sys
from tests.reliability import killpoints

root, name, saves, first = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
killpoints.arm(root)
import flyte_checkpoint as fc


@fc.task(checkpoint_root=root, run_name=name)
def train():
    c = fc.ctx()
    cp = c.checkpoint
    path = cp.load_sync()
    print("ATTEMPT", c.attempt_number, "LOADED", path.read_text() if path else "-", flush=True)
    if os.environ.get("FINAL"):  # the progress made since the last save: one more token
        c.on_terminate(lambda: str(first + saves).encode())
    killpoints.reach("loaded")
    for k in range(saves):
        cp.save_sync(str(first + k).encode())
        print("SAVED", first + k, flush=True)
    killpoints.reach("saved")
    killpoints.reach("sigterm")
    return "finished"


print("RESULT", train(), flush=True)
"""


class Runs(RuleBasedStateMachine):
    """One named run on a root, its model: the last token committed and the next attempt number."""

    root: str  # set per root (a class attribute)
    children: bool  # whether child processes can share the root
    log: Path  # the children's stderr

    def __init__(self) -> None:
        super().__init__()
        self.name = f"run-{uuid.uuid4().hex[:8]}"
        self.committed: str | None = None
        self.next_attempt = 0
        self.token = 0
        self.mismatches: list[str] = []
        TALLY["sequences"] += 1

    def fresh(self) -> int:
        self.token += 1
        return self.token

    def expect(self, attempt: int, loaded: str | None, where: str) -> None:
        """An attempt numbered ``attempt`` loaded ``loaded``: the model's token, and its number."""
        if loaded != self.committed or attempt != self.next_attempt:
            self.mismatches.append(
                f"{where}: attempt {attempt} loaded {loaded!r}; the model: attempt {self.next_attempt},"
                f" last committed {self.committed!r}"
            )
        TALLY["attempts resumed" if loaded is not None else "attempts from nothing"] += 1
        if loaded is not None and self.last_saver not in (None, attempt - 1):
            TALLY["attempts resumed past one that saved nothing"] += 1
        self.next_attempt = attempt + 1

    last_saver: int | None = None

    def committed_by(self, attempt: int, token: str) -> None:
        self.committed, self.last_saver = token, attempt

    def finished(self) -> None:
        """The run succeeded: its checkpoints are removed, the next call starts at attempt 0."""
        self.committed, self.next_attempt, self.last_saver = None, 0, None
        prefix = f"{self.root}/{self.name}/train/"
        left = list(store_for(prefix).list(prefix))
        assert left == [], f"a finished run left {left}"
        TALLY["runs finished"] += 1

    # -- a call in this process -------------------------------------------------------------

    @rule(plan=st.lists(ATTEMPT, min_size=1, max_size=4))
    def call(self, plan: list[tuple[int, str]]) -> None:
        machine = self

        def train() -> str:
            c = fc.ctx()
            cp = c.checkpoint
            path = cp.load_sync()
            machine.expect(c.attempt_number, path.read_text() if path else None, f"plan {plan}")
            saves, end = plan[min(len(calls), len(plan) - 1)]
            calls.append(c.attempt_number)
            for _ in range(saves):
                token = str(machine.fresh())
                cp.save_sync(token.encode())
                machine.committed_by(c.attempt_number, token)
            if end == "interrupt":
                raise KeyboardInterrupt
            if end == "fail":
                raise RuntimeError("planned failure")
            return "finished"

        calls: list[int] = []
        ends = [end for _, end in plan]
        stop = next((i for i, end in enumerate(ends) if end != "fail"), len(plan) - 1)
        task = fc.task(retries=len(plan) - 1, checkpoint_root=self.root, run_name=self.name)(train)
        with Records() as lines:
            try:
                outcome = task()
            except KeyboardInterrupt:
                outcome = "interrupted"
            except RuntimeError:
                outcome = "failed"
        assert len(calls) == stop + 1, (plan, calls)
        want = {"succeed": "finished", "interrupt": "interrupted", "fail": "failed"}[ends[stop]]
        assert outcome == want, (plan, outcome)
        left = [m for _, m in lines.lines if re.search(r"-\d+ retr", m)]
        assert left == [], left
        if outcome == "finished":
            self.finished()
        TALLY[f"calls {outcome}"] += 1

    # -- a call in a child process that dies ----------------------------------------------------

    @precondition(lambda self: self.children)
    @rule(saves=st.integers(0, 3), stop=STOPS, refused=st.booleans())
    def die(self, saves: int, stop: str, refused: bool) -> None:
        if stop in ("open", "commit", "committed") and saves == 0:
            saves = 1  # a stop inside a save needs a save
        first = self.token + 1
        self.token += saves + 1  # the tokens the child may use: its saves, and a final save
        env = {**os.environ, "PYTHONPATH": str(ROOT), "FLYTE_CHECKPOINT_GRACE_SECONDS": "30"}
        env.pop("FLYTE_CHECKPOINT_KEEP_RUNS", None)
        if stop == "sigterm":
            env.update(FINAL="1", **{KILL_AT: "sigterm"})
        elif stop in ("loaded", "saved"):
            env[KILL_AT] = stop
        else:  # inside the last save: writer 1 is the attempt's marker, saves come after
            env.update({KILL_AT: stop, WRITER_ENV: str(1 + saves)})
        argv = [sys.executable, "-c", CHILD, self.root, self.name, str(saves), str(first)]
        with open(self.log, "ab") as err:
            child = Child(argv, env, ROOT, stderr=err)
        try:
            line = child.next()
            m = re.fullmatch(r"ATTEMPT (\d+) LOADED (\S+)", line)
            assert m, (line, self.log.read_text()[-2000:])
            attempt = int(m.group(1))
            self.expect(attempt, None if m.group(2) == "-" else m.group(2), f"child stopping at {stop}")
            saved = []
            while True:
                line = child.next()
                if not line.startswith("SAVED "):
                    break
                saved.append(line.split()[1])
            assert line == f"AT {stop}", (line, stop, self.log.read_text()[-2000:])
            if refused:
                self.refused_while_held()
            if stop == "sigterm":
                code, _ = child.end(signal.SIGTERM)
                assert code == -signal.SIGTERM, code
                finals = re.findall(r"final save to \S+ (done|aborted|failed)", self.log.read_text())
                if finals[-1] == "done":
                    saved.append(str(first + saves))
                TALLY[f"final saves {finals[-1]}"] += 1
            else:
                code, _ = child.end(signal.SIGKILL)
                assert code == -signal.SIGKILL, code
                if stop == "committed":
                    saved.append(str(first + saves - 1))  # its store had committed it
            expected = [str(first + k) for k in range(saves)] if stop != "loaded" else []
            if stop in ("open", "commit", "committed"):
                expected = expected[:-1] + (expected[-1:] if stop == "committed" else [])
            if stop == "sigterm" and len(saved) > saves:
                expected.append(str(first + saves))
            assert saved == expected, (stop, saves, saved, expected)
            if saved:
                self.committed_by(attempt, saved[-1])
            TALLY[f"children stopped at {stop}"] += 1
        finally:
            if child.proc.poll() is None:
                child.proc.kill()
                child.proc.wait()

    def refused_while_held(self) -> None:
        """A call while a child holds the run: refused, and nothing of the run changes."""
        ran: list[int] = []

        def train() -> None:
            ran.append(1)

        try:
            fc.task(checkpoint_root=self.root, run_name=self.name)(train)()
        except RunInUseError:
            TALLY["calls refused while a child held the run"] += 1
        else:
            raise AssertionError("a call ran while a child held the run")
        assert ran == []

    @invariant()
    def every_attempt_loaded_the_newest_commit(self) -> None:
        assert self.mismatches == [], self.mismatches


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_every_attempt_resumes_from_the_newest_state_any_earlier_attempt_committed(
    kind, tmp_path, monkeypatch
):
    """See the module's doc."""
    monkeypatch.delenv("FLYTE_CHECKPOINT_KEEP_RUNS", raising=False)
    root = str(tmp_path / "root") if kind == "file" else f"memory://fcp-runs-{uuid.uuid4().hex[:8]}"
    machine = type(
        f"Runs_{kind}", (Runs,), {"root": root, "children": kind == "file", "log": tmp_path / "children.log"}
    )
    TALLY.clear()
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=LONG_RUN is None,  # CI: the same sequences every run; longer runs: new ones
        ),
    )
    log = tmp_path / "children.log"
    assert not log.exists() or "Traceback" not in log.read_text()
    print(f"\nnamed runs on {kind}: " + ", ".join(f"{k} {v}" for k, v in sorted(TALLY.items())))
