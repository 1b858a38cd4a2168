"""The documentation's "Inside Flyte" page (docs/flyte.md), run as a Flyte user runs it.

Each Python block of the page is written to the file its first line names (``# train.py``),
and each command of its bash block runs in that folder in a subprocess, as typed: ``flyte run
--local ...`` (Flyte's command line), ``python train.py`` (``flyte.run``) and the local runner.
The page's code is not touched: a ``sitecustomize`` module on ``PYTHONPATH`` makes the first
attempt crash at its third save, and records what each attempt loaded and saved, so the test
sees the crash, the retry and the resume from the checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "flyte.md"

INJECTOR = """
import json, os, sys
import flyte_checkpoint as fc

_events, _crash_at, _saves = os.environ["FCP_EVENTS"], int(os.environ["FCP_CRASH_AT_SAVE"]), [0]
_load, _save = fc.Checkpoint.load_sync, fc.Checkpoint.save_sync


def _record(**event):
    flyte = sys.modules.get("flyte")
    event["flyte_attempt"] = flyte.ctx().attempt_number if flyte and flyte.ctx() else None
    event["attempt"] = fc.ctx().attempt_number
    event["context"] = type(fc.ctx()).__name__
    with open(_events, "a") as f:
        f.write(json.dumps(event) + "\\n")


def load_sync(self):
    path = _load(self)
    _record(event="load", value=path.read_text() if path else None, dest=self.remote_destination)
    return path


def save_sync(self, data, *args, **kwargs):
    _saves[0] += 1
    if _saves[0] == _crash_at:
        _record(event="crash")
        raise RuntimeError("injected crash before save %d" % _saves[0])
    result = _save(self, data, *args, **kwargs)
    _record(event="save", value=bytes(data).decode())
    return result


fc.Checkpoint.load_sync, fc.Checkpoint.save_sync = load_sync, save_sync
"""


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, flags=re.S | re.M)


def commands(block: str) -> list[str]:
    out = []
    for line in block.splitlines():
        command = line.split("  #", 1)[0].strip()
        if command:
            out.append(command)
    return out


def readme_section() -> tuple[dict[str, str], list[str]]:
    """The page's files (name -> code) and commands, as the page has them."""
    text = PAGE.read_text()
    files = {}
    for code in blocks(text, "python"):
        first = code.splitlines()[0]
        assert re.fullmatch(r"# \w+\.py", first), (
            f"a Flyte snippet should start with its file name: {first!r}"
        )
        files[first[2:]] = code
    cmds = [c for block in blocks(text, "bash") for c in commands(block)]
    return files, cmds


# What each kind of command the page gives runs in: Flyte's local mode, or the local runner.
KINDS = {
    "flyte run --local ": "FlyteTaskContext",
    "python train.py": "FlyteTaskContext",
    "python -c ": "TaskContext",
}


@pytest.fixture
def user_dir(tmp_path):
    require(
        shutil.which("flyte", path=str(Path(sys.executable).parent)) is not None, "flyte is not installed"
    )
    files, cmds = readme_section()
    work = tmp_path / "project"
    work.mkdir()
    for name, code in files.items():
        (work / name).write_text(code)
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(INJECTOR)
    return work, inject, cmds


def run_as_user(command: str, work: Path, inject: Path, events: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLYTE_", "JOBSET_", "LOG_LEVEL"))}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(inject),
        HOME=str(work.parent / "home"),
        COLUMNS="200",
        FLYTE_CHECKPOINT_ROOT=str(work.parent / "local-runs"),
        FCP_EVENTS=str(events),
        FCP_CRASH_AT_SAVE="3",
    )
    return subprocess.run(command, shell=True, cwd=work, env=env, capture_output=True, text=True, timeout=300)


def test_the_page_gives_a_task_file_and_the_commands_that_launch_it():
    files, cmds = readme_section()
    assert list(files) == ["train.py"]
    assert "flyte.run(" in files["train.py"] and "@env.task" in files["train.py"]
    assert sorted(kind for kind in KINDS for c in cmds if c.startswith(kind)) == sorted(KINDS)
    assert len(cmds) == len(KINDS)


@pytest.mark.parametrize("kind", list(KINDS))
def test_readme_flyte_snippet_runs_as_written_crashes_and_resumes(user_dir, kind):
    work, inject, cmds = user_dir
    [command] = [c for c in cmds if c.startswith(kind)]
    events_file = work.parent / f"events-{len(kind)}.jsonl"
    proc = run_as_user(command, work, inject, events_file)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    dest = next(e["dest"] for e in events if e["event"] == "load")
    try:
        # Attempt 1 starts fresh, saves 1 and 2 and crashes; attempt 2 resumes from 2 and finishes.
        assert [(e["event"], e.get("value")) for e in events] == [
            ("load", None),
            ("save", "1"),
            ("save", "2"),
            ("crash", None),
            ("load", "2"),
            ("save", "3"),
            ("save", "4"),
            ("save", "5"),
        ], output
        context = KINDS[kind]
        assert {e["context"] for e in events} == {context}
        loads = [e for e in events if e["event"] == "load"]
        if context == "FlyteTaskContext":
            # Flyte's local mode retried (its log says so) yet numbers every attempt 0.
            assert "failed on attempt 1/4" in output
            assert [(e["attempt"], e["flyte_attempt"]) for e in loads] == [(0, 0), (0, 0)]
            assert Path(dest).read_bytes() == b"5"  # Flyte's destination holds our last save
            assert "o0=5" in proc.stdout if kind.startswith("flyte run") else proc.stdout.split()[-1] == "5"
        else:
            # The local runner, retrying as often as the Flyte task does, numbers attempts 0, 1.
            assert [(e["attempt"], e["flyte_attempt"]) for e in loads] == [(0, None), (1, None)]
            assert "attempt 0 failed (RuntimeError: injected crash before save 3); 3 retries left" in output
            assert proc.stdout.split()[-1] == "5"
            assert dest.startswith(str(work.parent / "local-runs"))
    finally:
        if dest.startswith("/tmp/flyte/raw_data/"):  # Flyte's local mode keeps each run there
            run = Path(dest).parent.name
            for kept in (Path("/tmp/flyte/raw_data") / run, Path("/tmp/flyte/metadata") / run):
                shutil.rmtree(kept, ignore_errors=True)
