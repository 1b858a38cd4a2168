"""SIGTERM at random points of training: the final save, then the next call resumes from that step.

A child process runs a named local run (``@fc.task(run_name=...)``) that trains a small
model folder (four incompressible layers whose bytes follow from the step) and saves it
every few steps; it registers ``fc.ctx().on_terminate`` to save the model as it is. The
test picks a point at random, the child runs until it reaches it, reports ``AT <point>`` and
waits on stdin, and the test sends SIGTERM there (never after a delay):

- ``step:N``: after step N (between regular saves, or right after one);
- ``save:N:write:W``: inside the regular save of step N, at its W-th write to the store; the
  test then lets that write go on: the handler has only noted the signal, the save ends
  (commits step N) and the final save follows it.

The final save has a 10 s budget (``FLYTE_CHECKPOINT_GRACE_SECONDS``). Then the same run is
started again: its first attempt must start from step N (when the final save fit the
budget; else from the last regular save), with every layer matching that step byte for byte
(never damaged), train to the end and leave no checkpoint behind.

CI runs :data:`RUNS` points per backend; ``FCP_SIGTERM_RUNS=50`` runs the goal's 50.
Run with ``-s`` for the summary line.
"""

from __future__ import annotations

import os
import random
import re
import signal
import sys
from collections import Counter
from pathlib import Path

from flyte_checkpoint.uri import scheme_of
from tests.childlines import Child
from tests.reliability import backends
from tests.reliability.backends import Backend

backend = backends.backend
backend_pool = backends.backend_pool

ROOT = Path(__file__).resolve().parents[2]
RUNS = int(os.environ.get("FCP_SIGTERM_RUNS", "2"))
STEPS, EVERY, WRITES = 12, 4, 20

CHILD = r"""
import os, pathlib, random, sys, threading
import flyte_checkpoint as fc
from tests.spystore import spying

STOP = os.environ.get("FCP_STOP_AT", "")
steps, every, model = int(sys.argv[1]), int(sys.argv[2]), pathlib.Path(sys.argv[3])
saves, writes, armed = [0], [0], [bool(STOP)]
lock = threading.Lock()


def wait_here(point):
    print("AT", point, flush=True)
    sys.stdin.readline()  # SIGTERM lands while this waits; inside a save, a line follows it


def hook(op, uri):
    if op != "write" or not STOP.startswith("save:"):
        return
    _, step, _, write = STOP.split(":")
    with lock:
        writes[0] += 1
        hit = armed[0] and saves[0] == int(step) and writes[0] == int(write)
        if hit:
            armed[0] = False
    if hit:
        wait_here(STOP)


def layer(step, k):
    return random.Random(f"{step}-{k}").randbytes(192 * 1024)


def write_model(step):
    model.mkdir(exist_ok=True)
    for k in range(4):
        (model / f"layer{k}.bin").write_bytes(layer(step, k))
    (model / "step").write_text(str(step))


def check(folder):
    step = int((folder / "step").read_text())
    for k in range(4):
        if (folder / f"layer{k}.bin").read_bytes() != layer(step, k):
            print("DAMAGED", step, k, flush=True)
            sys.exit(3)
    return step


@fc.task(run_name="sigterm")
def train():
    c = fc.ctx()
    cp = c.checkpoint
    path = cp.load_sync()
    start = check(path) if path else 0
    print("START", start, c.attempt_number, flush=True)
    c.on_terminate(lambda: model if model.exists() else None)
    for i in range(start + 1, steps + 1):
        write_model(i)
        if i % every == 0:
            with lock:
                saves[0], writes[0] = i, 0
            cp.save_sync(model)
        if STOP == f"step:{i}":
            wait_here(STOP)
    return steps


with spying(os.environ["FCP_TARGET"], hook):
    print("RESULT", train(), flush=True)
"""


def points(rng: random.Random, count: int) -> list[str]:
    """``count`` stop points, in turn after a step and inside a regular save, each at random."""
    chosen = []
    for n in range(count):
        if n % 2 == 0:
            chosen.append(f"step:{rng.randint(1, STEPS)}")
        else:
            save = rng.choice(range(EVERY, STEPS + 1, EVERY))
            chosen.append(f"save:{save}:write:{rng.randint(1, WRITES)}")
    return chosen


def spy_uri(uri: str) -> str:
    return "spy://" + (uri if "://" not in uri else uri.split("://", 1)[1])


def child(env: dict[str, str], model: Path, log: Path) -> Child:
    with open(log, "ab") as err:  # the child has its own copy of the file
        return Child(
            [sys.executable, "-c", CHILD, str(STEPS), str(EVERY), str(model)],
            {**env, "PYTHONPATH": str(ROOT)},
            ROOT,
            stderr=err,
        )


def test_sigterm_at_random_points_resumes_from_the_interrupted_step(backend: Backend, tmp_path: Path):
    """Proves: on every backend, a SIGTERM after any step or inside a regular save leads the
    next call of the run to start from that step (the final save fit the 10 s budget), with
    the model whole; the finished run leaves nothing behind."""
    rng = random.Random(int(os.environ.get("FCP_SIGTERM_SEED", "17")))
    log = tmp_path / "children.log"
    outcomes: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    for n, point in enumerate(points(rng, RUNS)):
        root = backend.fresh(f"runs-{n}")
        env = backend.child_env(
            FLYTE_CHECKPOINT_ROOT=spy_uri(root),
            FLYTE_CHECKPOINT_GRACE_SECONDS="10",
            FCP_TARGET=scheme_of(root) or "file",
        )
        env.pop("FLYTE_CHECKPOINT_KEEP_RUNS", None)
        model = tmp_path / f"model-{n}"
        first = child({**env, "FCP_STOP_AT": point}, model, log)
        assert first.next() == "START 0 0"
        at = first.next()
        assert at == f"AT {point}", f"{at!r}; see {log}"
        if point.startswith("save:"):
            # The signal is pending in the child before the line is written, and it is
            # handled inside the save either way (when it interrupts the wait, or at the
            # next line of Python after it).
            first.proc.send_signal(signal.SIGTERM)
            first.say()
            code, _ = first.end()
        else:
            code, _ = first.end(signal.SIGTERM)
        assert code == -signal.SIGTERM, f"{point}: exit {code}; see {log}"
        text = log.read_text()
        final = re.findall(r"final save to \S+ (done|aborted|failed)", text)[-1]
        outcomes[final] += 1
        kinds[point.split(":")[0]] += 1
        stopped_at = int(point.split(":")[1])
        last_regular = stopped_at - stopped_at % EVERY if point.startswith("step:") else stopped_at - EVERY
        want = stopped_at if final == "done" else last_regular

        second = child(env, model, log)
        start = second.next()
        assert start == f"START {want} 1", f"{point} (final save {final}): {start!r}; see {log}"
        code, out = second.end()
        assert code == 0 and f"RESULT {STEPS}" in out, f"{point}: {out!r}; see {log}"
        from flyte_checkpoint.storage.registry import store_for

        assert list(store_for(root + "/").list(root + "/sigterm/train/")) == [], "a finished run was kept"
    assert "Traceback" not in log.read_text()
    print(
        f"\nsigterm[{backend.name}]: {RUNS} SIGTERMs ({kinds['step']} after a step, {kinds['save']} inside"
        f" a regular save), budget 10 s: {outcomes['done']} final saves fit and resumed from the"
        f" interrupted step, {outcomes['aborted']} aborted, {outcomes['failed']} failed; 0 damaged"
    )
    assert outcomes["done"] == RUNS
