"""The final save on SIGTERM writes its manifest like any save (issue 37's leftovers, gap 1).

A real child process gets SIGTERM: it saved twice (step and metrics given), keeps generations,
and registered a final save. The test acts on the lines the child prints, never on time.

- ``file://``: the process ends by SIGTERM (``SIG_DFL`` below ours); then ``flyte-checkpoint
  history`` (the command, in a process of its own) lists the final save first, with its
  manifest, generation and digest, and a fallback load takes it (its digest checked).
- ``memory://``: the store lives in the child, so a Python handler below ours lets it go on; the
  child then runs the same command in-process and loads with ``fallback=True``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.lifecycle import preemption
from tests.childlines import Child
from tests.test_preemption import info_handler, previous_handler  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
FINAL = b"the final state"

CHILD = r"""
import contextlib, io, json, signal, sys
import flyte_checkpoint as fc
from flyte_checkpoint.cli import main

dest, mode = sys.argv[1], sys.argv[2]
if mode == "goes-on":  # a Python handler below ours: called after the final save, the process goes on
    signal.signal(signal.SIGTERM, lambda s, f: print("HANDLED", flush=True))
cp = fc.Checkpoint(dest, keeps_generations=True)
cp.save_sync(b"step one", step=1, metrics={"loss": 0.5})
cp.save_sync(b"step two", step=2, metrics={"loss": 0.25})
cp.on_terminate(lambda: b"the final state")
print("READY", flush=True)
for line in sys.stdin:
    if line.strip() == "history":
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["history", dest, "--json"])
        print("HISTORY", code, json.dumps(out.getvalue()), flush=True)
    elif line.strip() == "load":
        path = fc.Checkpoint(dest + "-next", dest).load_sync(fallback=True)
        print("LOADED", path.read_bytes().decode(), flush=True)
"""


def _child(dest: str, mode: str) -> Child:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(preemption.GRACE_ENV, None)
    return Child([sys.executable, "-c", CHILD, dest, mode], env, ROOT)


def _check(doc: dict, dest: str) -> None:
    """The final save is listed first, with its manifest: the next generation, no step or
    metrics (its function returns only what to save), its size and digest."""
    rows = doc["checkpoints"]
    assert doc["count"] == 3, rows
    final, two, one = rows
    assert (final["manifest"], final["generation"], final["step"], final["metrics"]) == (True, 2, None, {})
    assert final["size"] == len(FINAL)
    assert final["digest"] == f"crc32:{zlib.crc32(FINAL):08x}"
    assert final["uri"].endswith("/0/ckpt") and final["attempt"] == 0
    assert [(r["generation"], r["step"], r["metrics"]) for r in (two, one)] == [
        (1, 2, {"loss": 0.25}),
        (0, 1, {"loss": 0.5}),
    ]
    assert two["uri"].endswith("ckpt.fcp-history/g00000001.obj")


def test_the_final_save_on_sigterm_writes_its_manifest_file(tmp_path):
    dest = str(tmp_path / "run-1" / "0" / "ckpt")
    child = _child(dest, "ends")
    assert child.next() == "READY"
    child.proc.send_signal(signal.SIGTERM)
    code, output = child.end()
    assert code == -signal.SIGTERM, output
    assert Path(dest).read_bytes() == FINAL
    cli = subprocess.run(
        [sys.executable, "-m", "flyte_checkpoint.cli", "history", dest, "--json"],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    _check(json.loads(cli.stdout), "file://" + dest)
    entry = fc.history(dest)[0]
    assert entry.manifest is not None and entry.manifest.made_from is None
    path = fc.Checkpoint(str(tmp_path / "next"), dest).load_sync(fallback=True)
    assert path is not None and path.read_bytes() == FINAL


@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_the_final_save_on_sigterm_writes_its_manifest_and_the_process_goes_on(scheme, tmp_path):
    name = f"hist-sigterm-{os.getpid()}-{scheme}"
    dest = f"memory://{name}/run-1/0/ckpt" if scheme == "memory" else str(tmp_path / "run-1" / "0" / "ckpt")
    child = _child(dest, "goes-on")
    assert child.next() == "READY"
    child.proc.send_signal(signal.SIGTERM)
    assert child.next() == "HANDLED"  # printed by the handler below ours, after the final save
    child.say("history")
    word, code, text = child.next().split(" ", 2)
    assert (word, code) == ("HISTORY", "0")
    _check(json.loads(json.loads(text)), dest)
    child.say("load")
    assert child.next() == f"LOADED {FINAL.decode()}"
    assert child.proc.stdin is not None
    child.proc.stdin.close()
    code, output = child.end()
    assert code == 0, output
    assert "saved, but its manifest could not be written" not in output


def test_a_manifest_the_final_save_cannot_write_is_warned_by_the_handler_not_its_worker(
    previous_handler,  # noqa: F811
    info_handler,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    """The main thread stopped by SIGTERM holds the logging handler's lock (it was writing a
    record): the final save's worker logs nothing, so it does not wait for that lock; the
    manifest it could not write is warned about by the handler's thread once the worker is
    done, and the save is done (committed)."""
    from flyte_checkpoint.storage.stores.local import LocalStore
    from tests.test_preemption import HANG, join_final_save_threads

    monkeypatch.setenv(preemption.GRACE_ENV, str(HANG))  # a deadlock fails the test, late
    dest = str(tmp_path / "run" / "0" / "ckpt")
    cp = fc.Checkpoint(dest)
    cp.save_sync(b"step 1", step=1)
    cp.on_terminate(lambda: FINAL)

    def refuse(self, uri, data):
        raise fc.errors.CheckpointPermissionError(f"denied: {uri}")

    monkeypatch.setattr(LocalStore, "write_bytes_if_absent", refuse)
    threads: list[tuple[str, str]] = []  # (thread, message) of every record, after info_handler's

    class Threads(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            threads.append((record.threadName or "", record.getMessage()))

    log = logging.getLogger("flyte_checkpoint")
    log.addHandler(seen := Threads(logging.INFO))
    try:
        with info_handler.lock:
            signal.raise_signal(signal.SIGTERM)
        join_final_save_threads()
    finally:
        log.removeHandler(seen)
    assert [t for t, m in threads if "manifest could not be written" in m] == ["MainThread"]
    [outcome] = preemption._state.outcomes
    assert outcome.status == "done", outcome
    assert Path(dest).read_bytes() == FINAL
    warned = [m for m in info_handler.messages if "manifest could not be written" in m]
    assert len(warned) == 1 and "denied" in warned[0], info_handler.messages
    assert not fc.history(dest)[0].has_manifest  # listed, without one


def test_a_budget_spent_after_the_final_commit_reports_the_save_done(
    previous_handler,  # noqa: F811
    info_handler,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    """The budget runs out while the final save writes its manifest (held here by events): the
    object is committed, so the save is reported done (not aborted, "nothing committed"), with
    a WARNING that its manifest was not written in time."""
    import threading

    from tests.test_preemption import HANG, join_final_save_threads

    dest = str(tmp_path / "run" / "0" / "ckpt")
    cp = fc.Checkpoint(dest)
    cp.save_sync(b"step 1", step=1)
    cp.on_terminate(lambda: FINAL)
    writing, go = threading.Event(), threading.Event()
    real = fc.Checkpoint._write_manifest

    def held(self, record):
        writing.set()  # committed: the manifest is next
        assert go.wait(HANG)
        return real(self, record)

    def spent(done, budget):  # the budget runs out once the worker is at its manifest
        assert writing.wait(HANG)
        return False

    monkeypatch.setattr(fc.Checkpoint, "_write_manifest", held)
    monkeypatch.setattr(preemption, "_within", spent)
    signal.raise_signal(signal.SIGTERM)
    [outcome] = preemption._state.outcomes
    assert outcome.status == "done", outcome
    assert any("committed, but its manifest was not written" in m for m in info_handler.messages)
    assert Path(dest).read_bytes() == FINAL
    go.set()
    join_final_save_threads()
    assert fc.history(dest)[0].has_manifest  # written once let go
