"""Inside a Flyte task our log lines follow Flyte's level and go to Flyte's handlers.

Each case runs in a fresh interpreter, as a user's script or ``flyte run`` does: logging is
process-wide, and pytest's own capture handlers on the root logger count as "set up by the
user" (in which case ours leaves logging alone).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require

try:
    import flyte
except ImportError:
    flyte = None

#: The task, as ``task.py`` (for ``flyte run``, and imported by the script below).
TASK_FILE = """
import flyte
import flyte_checkpoint as fc

env = flyte.TaskEnvironment(name="logs")


@env.task
def save() -> str:
    fc.ctx().checkpoint.save_sync(b"state")
    return "ok"
"""

#: A script that runs the task above in Flyte's local mode, logging set up as argv[1] says.
SCRIPT = """
import logging, os, sys
import flyte
from task import save


def run(level):
    flyte.init(log_level=level)
    name = "fc-logs-" + os.urandom(6).hex()
    run_ctx = flyte.with_runcontext(mode="local", name=name, raw_data_path=os.environ["RAW"] + "/" + name)
    print(run_ctx.run(save).outputs()[0], flush=True)


case = sys.argv[1]
if case == "basic-config":
    logging.basicConfig(level=logging.INFO, format="USER %(name)s %(levelname)s %(message)s")
if case == "ours-set":
    logging.getLogger("flyte_checkpoint").setLevel(logging.WARNING)
if case in ("info-then-warning", "ours-set"):
    run(logging.INFO)
print("-- next run --", file=sys.stderr, flush=True)
run(logging.WARNING)
"""


@pytest.fixture
def run_case(tmp_path):
    require(flyte is not None, "flyte is not installed (pip install flyte==2.12.1)")
    (tmp_path / "script.py").write_text(SCRIPT)
    (tmp_path / "task.py").write_text(TASK_FILE)
    env = {k: v for k, v in os.environ.items() if k not in ("LOG_LEVEL", "FLYTE_RESET_ROOT_LOGGER")}
    # Flyte's plain console handler: rich would wrap long lines at the console width.
    env.update(DISABLE_RICH_LOGGING="1", RAW=str(tmp_path / "raw"), HOME=str(tmp_path / "home"))

    def run(*argv: str) -> tuple[str, str]:
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout, proc.stderr

    run.tmp = tmp_path  # type: ignore[attr-defined]
    yield run
    for kept in (tmp_path / "raw").glob("*"):  # `flyte run --local` keeps metadata under /tmp/flyte
        shutil.rmtree(Path("/tmp/flyte/metadata") / kept.name, ignore_errors=True)


def saved_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "saved checkpoint" in line]


def test_our_info_lines_show_at_flytes_level_through_flytes_handler(run_case):
    out, err = run_case(sys.executable, "script.py", "info-then-warning")
    with_info, with_warning = err.split("-- next run --")
    [line] = saved_lines(with_info)
    # Flyte's console format: [run][action] LEVEL message, among Flyte's own INFO lines
    assert "][" in line and "INFO saved checkpoint " in line and ": 5 bytes in " in line
    assert "[flyte] INFO" in with_info
    # flyte.init(log_level=WARNING) for the next run: the level followed, the line is gone
    assert saved_lines(with_warning) == []
    assert out.split() == ["ok", "ok"]


def test_a_level_set_on_our_logger_is_kept(run_case):
    _, err = run_case(sys.executable, "script.py", "ours-set")
    assert "[flyte] INFO" in err  # Flyte's INFO lines show; ours stay at the level set for them
    assert saved_lines(err) == []


def test_logging_set_up_by_the_user_decides_and_nothing_shows_twice(run_case):
    _, err = run_case(sys.executable, "script.py", "basic-config")
    # flyte.init(log_level=WARNING), but the user asked for INFO on the root logger: theirs
    # decides, with their format (behind the [run][action] Flyte puts before root's lines)
    [line] = saved_lines(err)
    assert "USER flyte_checkpoint INFO saved checkpoint " in line


def test_flyte_cli_verbosity_shows_our_lines(run_case):
    flyte_cli = str(Path(sys.executable).with_name("flyte"))
    for verbosity, expected in (([], 0), (["-vv"], 1)):
        raw = run_case.tmp / "raw" / f"fc-logs-cli-{os.urandom(6).hex()}"
        command = [flyte_cli, *verbosity, "run", "--local", "--name", raw.name, "--raw-data-path", str(raw)]
        _, err = run_case(*command, "task.py", "save")
        assert len(saved_lines(err)) == expected, err
