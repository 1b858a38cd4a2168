"""SIGTERM inside a real Flyte task (``flyte run --local``): the final save, then a re-run resumes.

``flyte run --local`` runs in a subprocess, as a user types it. The task reports each step on
stdout and waits on stdin; after the step the test picks, it sends SIGTERM to the ``flyte``
process. Flyte's local mode runs a sync task in a worker thread, so the task file installs
the handler from the main thread as it is loaded (``fc.preemption.install()``); the task
registers its state with ``fc.ctx().on_terminate``. The re-run with the same raw data path
must start from the step at which the signal arrived, which no regular save had stored.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

from conftest import require
from flyte_checkpoint.integrations.flyte import resolve_source
from flyte_checkpoint.storage.registry import store_for
from tests.childlines import Child

TASK = """
import sys

import flyte

import flyte_checkpoint as fc

fc.preemption.install()  # in the main thread: Flyte's local mode runs a sync task in another
env = flyte.TaskEnvironment(name="sigterm")


@env.task
def train(n: int) -> int:
    cp = fc.ctx().checkpoint
    path = cp.load_sync()
    start = int(path.read_bytes()) if path else 0
    print("START", start, flush=True)
    step = [start]
    fc.ctx().on_terminate(lambda: str(step[0]).encode())
    for i in range(start, n):
        step[0] = i + 1
        if step[0] % 5 == 0:
            cp.save_sync(str(step[0]).encode())  # regular saves are rare
        print("STEP", step[0], flush=True)
        sys.stdin.readline()
    return n
"""


@pytest.fixture
def project(tmp_path):
    flyte_cli = shutil.which("flyte", path=str(Path(sys.executable).parent))
    require(flyte_cli is not None, "flyte is not installed (pip install flyte==2.12.1)")
    (tmp_path / "train_sigterm.py").write_text(TASK)
    names: list[str] = []
    yield tmp_path, flyte_cli, names
    for name in names:  # Flyte's local mode keeps each run's metadata here
        shutil.rmtree(Path("/tmp/flyte/metadata") / name, ignore_errors=True)


def flyte_run(project, steps: int, stop_after: int | None) -> tuple[int, list[str], str]:
    """``flyte run --local`` the task; SIGTERM after step ``stop_after`` (else run to the end)."""
    work, flyte_cli, names = project
    names.append(f"fc-sigterm-{os.urandom(6).hex()}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLYTE_", "JOBSET_", "LOG_LEVEL"))}
    env.update(HOME=str(work / "home"), COLUMNS="200", PYTHONUNBUFFERED="1")
    cmd = [flyte_cli, "run", "--local", "--raw-data-path", str(work / "raw"), "--name", names[-1]]
    proc = Child([*cmd, "train_sigterm.py", "train", "--n", str(steps)], env, work)
    said: list[str] = []
    printed: list[str] = []
    while True:
        line = proc.next()
        printed.append(line)
        if proc.lines.ended:
            break
        if line.startswith(("START", "STEP")):
            said.append(line)
        if line == f"STEP {stop_after}":
            break  # SIGTERM below, with stdin still open: the task waits on it
        if line.startswith("STEP"):
            proc.say()
    code, rest = proc.end(signal.SIGTERM if stop_after is not None else None)
    return code, said, "\n".join([*printed, rest])


def test_sigterm_in_a_flyte_task_saves_and_the_rerun_resumes_from_that_step(project):
    code, said, output = flyte_run(project, 9, stop_after=3)
    assert code == -signal.SIGTERM, output
    assert said == ["START 0", "STEP 1", "STEP 2", "STEP 3"]
    assert "final save to" in output and "done in" in output
    raw = project[0] / "raw"
    assert (raw / "checkpoint").read_bytes() == b"3"  # no regular save had run (every 5th step)
    code, said, output = flyte_run(project, 9, stop_after=7)
    assert code == -signal.SIGTERM, output
    assert said == ["START 3", "STEP 4", "STEP 5", "STEP 6", "STEP 7"]
    code, said, output = flyte_run(project, 9, stop_after=None)
    assert code == 0, output
    assert said == ["START 7", "STEP 8", "STEP 9"]
    assert "o0=9" in output


def test_in_flytes_local_mode_a_destination_holding_a_checkpoint_is_the_one_loaded():
    """Flyte's local mode saves every attempt and re-run of one raw data path to one
    destination and copies it to the previous path only before a retry: a killed run's
    final save is in the destination, and the previous path is older or absent."""
    dest, prev = "memory://local-mode/raw/checkpoint", "memory://local-mode/raw/prev_checkpoint"
    assert resolve_source(dest, prev, local_mode=True) == prev  # nothing there yet
    store_for(dest).write_bytes(dest, b"7")
    assert resolve_source(dest, prev, local_mode=True) == dest
    assert resolve_source(dest, prev) == prev  # on a cluster each attempt has its own destination
