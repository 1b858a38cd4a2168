"""The documentation's "SIGTERM and resuming runs" page (docs/preemption.md), run as written.

Its task file is written as the page gives it and run with the command the page shows:
the first run is sent SIGTERM after a step it printed; the second, the same run, must go on
from the step the first had reached (the final save's), and the finished run leaves nothing.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.childlines import HANG, Lines

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "preemption.md"


def section() -> str:
    return PAGE.read_text()


def test_the_page_gives_a_task_file_and_the_command_that_runs_it():
    text = section()
    [code] = re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)
    assert code.startswith("# preemptible.py\n")
    assert "fc.ctx().on_terminate(" in code and 'run_name="nightly"' in code
    commands = re.findall(r"^FLYTE_CHECKPOINT_ROOT=(\S+) python preemptible\.py (\d+)", text, flags=re.M)
    assert len(commands) == 2 and commands[0] == commands[1]


def run(work: Path, root: Path, n: int, stop_after: int | None) -> tuple[int, list[int], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE_CHECKPOINT_")}
    env.update(FLYTE_CHECKPOINT_ROOT=str(root), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "preemptible.py", str(n)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=work,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    lines, steps, other = Lines(proc.stdout), [], []
    try:
        while line := lines.next() or not lines.ended:
            line = str(line)
            if line.startswith("step "):
                steps.append(int(line.split()[1]))
                if steps[-1] == stop_after:
                    proc.send_signal(signal.SIGTERM)
            else:
                other.append(line)
        return proc.wait(HANG), steps, "\n".join(other) + proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_the_page_task_saves_on_sigterm_and_the_same_run_goes_on(tmp_path):
    code = re.findall(r"^```python\n(.*?)^```$", section(), flags=re.S | re.M)[0]
    (tmp_path / "preemptible.py").write_text(code)
    root = tmp_path / "runs"
    status, steps, output = run(tmp_path, root, 10**7, stop_after=50)
    assert status == -signal.SIGTERM, output
    assert "final save to" in output and "done in" in output
    last = steps[-1]  # the handler ran after this step was printed, or after the next step's +1
    assert (root / "nightly" / "train" / "0" / "_flytecheckpoints").read_bytes() in (
        str(last).encode(),
        str(last + 1).encode(),
    )
    status, steps, output = run(tmp_path, root, last + 5, stop_after=None)
    assert status == 0 and f"result {last + 5}" in output, output
    assert steps[0] in (last + 1, last + 2) and steps[-1] == last + 5
    assert not (root / "nightly" / "train").exists()
