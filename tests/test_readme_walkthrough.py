"""The README's Install, first task and command line, and the site's install and command-line
walkthrough, run as written in one fresh venv, as a new user would.

One virtual environment for the module, as a new user would make it: in a copy of the checkout,
the README's Install block (``make dist``, then ``pip install --find-links dist ...``; the Quick
start page shows the same block) with that venv's ``pip`` first on ``PATH``; then the README's
task (``train.py``) run on S3 as its three lines say, against moto's S3 server on 127.0.0.1
(through ``AWS_ENDPOINT_URL_S3``); the README's five command lines; the command-line walkthrough
of docs/cli.md (every console block of the page, in order, in one shell, compared with the
outputs the page shows); and last the Quick start page's second Install block (``pip install .
./plugins/s3``, from the checkout), after which the missing-backend hint names the checkout's
plugin folder. ``tests/test_docs_blocks.py`` runs the pages' other blocks.

Outputs are compared after replacing what a run cannot repeat: durations (``0.08s``), rates
(``12.9 MB/s``), ``ls -l``'s modification times, a few bytes of a tarball's size (its tar headers
hold the files' modification times, and gzip compresses them; the index after them has a
length fixed by the tree's names and layout, docs/FORMAT.md) and the walkthrough's folder
(``/tmp/cp-demo`` is this test's own). To refresh the page's outputs after a change, run with
``FCP_README_RECORD=/some/file``: the transcript of the run is written there, in the page's form.

Needs the package index (pip installs the extras' dependencies and fetches the build backend):
marked ``network``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import make_venv, require
from tests.docblocks import commands, normalize, same, transcript
from tests.test_cli import FOREIGN_ENV, s3_server

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
QUICKSTART = ROOT / "docs" / "quickstart.md"
CLI_PAGE = ROOT / "docs" / "cli.md"
DEMO = "/tmp/cp-demo"

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.integration]


def section(title: str, path: Path = README) -> str:
    text = path.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, flags=re.S | re.M)


def copy_checkout(dest: Path) -> Path:
    """The checkout's files as git sees them (tracked, and new ones not ignored), nothing built."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        src = ROOT / os.fsdecode(name)
        if src.is_file() and not src.is_symlink():
            (dest / os.fsdecode(name)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / os.fsdecode(name))
    return dest


class User:
    """A fresh venv first on PATH, a checkout copy, and moto's S3 server with ``my-bucket``."""

    def __init__(self, home: Path, aws_env: dict[str, str]) -> None:
        self.home = home
        self.checkout = copy_checkout(home / "checkout")
        self.venv = home / "venv"
        make_venv(self.venv)
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in FOREIGN_ENV and not k.startswith(("PYTHON", "VIRTUAL_ENV", "FLYTE_CHECKPOINT_"))
        }
        env.update(
            PATH=f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            VIRTUAL_ENV=str(self.venv),
            VENV=str(self.venv),  # make's venv is the user's own, not a second one
            COLUMNS="200",
            **aws_env,
        )
        self.env = env

    def sh(
        self, script: str, cwd: Path | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            ["bash", "-c", script],
            cwd=cwd or self.checkout,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if check:
            assert out.returncode == 0, f"{script}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        return out


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    """The AWS_* variables that point the S3 plugin at moto's server, where my-bucket exists."""
    servers = s3_server("my-bucket")
    env, _ = next(servers)
    yield {k: v for k, v in env.items() if k.startswith("AWS_")}
    servers.close()


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory, s3_env: dict[str, str]) -> User:
    """The README's Install block run as written, in a fresh venv."""
    require(shutil.which("make") is not None, "make is not installed")
    user = User(tmp_path_factory.mktemp("readme"), s3_env)
    [install] = blocks(section("Install"), "bash")
    assert blocks(section("Install", QUICKSTART), "bash")[0] == install  # the page shows the same block
    for command in commands(install):
        user.sh(command)
    assert sorted(p.name for p in (user.checkout / "dist").iterdir()) == [
        "flyte_checkpoint-0.1.0-py3-none-any.whl",
        "flyte_checkpoint_azure-0.1.0-py3-none-any.whl",
        "flyte_checkpoint_gcs-0.1.0-py3-none-any.whl",
        "flyte_checkpoint_s3-0.1.0-py3-none-any.whl",
    ]
    return user


def test_the_readme_task_crashes_resumes_and_runs_on_s3_as_its_three_lines_say(user: User) -> None:
    """Proves: the README's task, run by its S3 block (the extra installed, FLYTE_CHECKPOINT_ROOT
    on S3) in the fresh venv, prints what the README shows (attempt 0 crashes, attempt 1 resumes
    at step 3, 5), and its checkpoints are objects on the S3 server."""
    text = section("Crash, retry, resume")
    [code] = blocks(text, "python")
    assert code.startswith("# train.py\n")
    (user.checkout / "train.py").write_text(code)
    [console] = blocks(text, "console")
    [(command, shown)] = transcript(console)
    assert command == "python train.py"
    s3_block = blocks(text, "bash")[0]
    assert commands(s3_block)[-1] == "python train.py", s3_block
    # Kept, to be listed: a finished run's checkpoints are removed otherwise.
    out = user.sh(f"export FLYTE_CHECKPOINT_KEEP_RUNS=1\n{s3_block}", cwd=user.checkout)
    expected = [line for line in shown if not line.startswith("task train")]  # that one is on stderr
    assert out.stdout.splitlines()[-len(expected) :] == expected, out.stdout  # after pip's lines
    assert "task train attempt 0 failed (RuntimeError: the machine was lost); 3 retries left" in out.stderr
    listed = user.sh("flyte-checkpoint ls s3://my-bucket/runs/").stdout.split()
    attempts = [uri.split("/train/", 1)[1] for uri in listed if uri.endswith("/_flytecheckpoints")]
    assert attempts == ["0/_flytecheckpoints", "1/_flytecheckpoints"], listed


def test_the_readme_command_lines_run_as_written(user: User) -> None:
    """Proves: the README's six command lines, run in order in a folder holding ``state``, all
    succeed against S3, restore the folder, and list the checkpoint's history."""
    work = user.home / "cli"
    (work / "state" / "optim").mkdir(parents=True)
    (work / "state" / "model.pt").write_bytes(os.urandom(100_000))
    (work / "state" / "optim" / "adam.bin").write_bytes(b"adam")
    [block] = blocks(section("The command line"), "bash")
    lines = commands(block)
    assert len(lines) == 6 and all(c.startswith("flyte-checkpoint ") for c in lines)
    try:
        outputs = [user.sh(command, cwd=work).stdout for command in lines]
    finally:  # the walkthrough below lists the same prefix
        user.sh("flyte-checkpoint rm -f s3://my-bucket/run-7/ckpt")
    assert (work / "restored" / "model.pt").read_bytes() == (work / "state" / "model.pt").read_bytes()
    assert (work / "restored" / "optim" / "adam.bin").read_bytes() == b"adam"
    assert "s3://my-bucket/run-7/ckpt" in outputs[1] and "tarball" in outputs[2] and "s3" in outputs[5]
    assert outputs[4].split()[:4] == ["ATTEMPT", "GEN", "STEP", "SIZE"] and "run-7/ckpt" in outputs[4]


def test_the_command_line_walkthrough_runs_top_to_bottom_with_the_outputs_shown(user: User) -> None:
    """Proves: every console block of docs/cli.md, run in order in one shell (cd carries over),
    prints what the page shows under each command, up to durations and rates."""
    demo = user.home / "cp-demo"
    text = "\n".join(blocks(CLI_PAGE.read_text(), "console"))
    steps = transcript(text)
    assert len(steps) >= 20, steps
    script = ["__s=0"]
    for i, (command, _) in enumerate(steps):
        # A marker between commands, keeping $? for a following 'echo $?'.
        script.append(
            f"echo '@@step {i}@@'; (exit $__s); {{ {command.replace(DEMO, str(demo))} ; }} 2>&1; __s=$?"
        )
    run = user.sh("\n".join(script), cwd=user.home)
    parts = re.split(r"^@@step (\d+)@@\n", run.stdout, flags=re.M)[1:]
    outputs = {
        int(parts[i]): parts[i + 1].replace(str(demo), DEMO).splitlines() for i in range(0, len(parts), 2)
    }
    record = os.environ.get("FCP_README_RECORD")
    if record:
        Path(record).write_text(
            "".join(
                f"$ {c}\n" + "".join(f"{line}\n" for line in outputs.get(i, []))
                for i, (c, _) in enumerate(steps)
            )
        )
    assert sorted(outputs) == list(range(len(steps))), run.stdout[-2000:]
    for i, (command, shown) in enumerate(steps):
        assert same(normalize(outputs[i]), normalize(shown)), f"$ {command}\n" + "\n".join(outputs[i])


def test_installing_from_the_checkout_folders_works_and_the_hint_names_them(user: User) -> None:
    """Proves: the Quick start page's second Install block (pip install of the folders) works in
    the same venv, and then a missing backend's hint is that checkout's plugin folder, not the extra
    (which names a distribution no index holds); installed from wheels it was the extra."""
    before = user.sh("flyte-checkpoint inspect gs://my-bucket/x", check=False)
    assert "Install it with: pip install 'flyte-checkpoint[gcs]' (" in before.stderr, before.stderr
    # installed with --find-links dist: the hint's second form is the command that works there
    assert "pip install --find-links DIR 'flyte-checkpoint[gcs]'" in before.stderr, before.stderr
    assert user.sh("pip install -q --find-links dist 'flyte-checkpoint[gcs]' --dry-run").returncode == 0
    for command in commands(blocks(section("Install", QUICKSTART), "bash")[1]):
        user.sh(command)
    after = user.sh("flyte-checkpoint inspect gs://my-bucket/x", check=False)
    assert after.returncode == 1
    assert f"Install it with: pip install {user.checkout}/plugins/gcs (" in after.stderr, after.stderr
    assert user.sh(f"pip install -q {user.checkout}/plugins/gcs --dry-run").returncode == 0
    backends = user.sh("flyte-checkpoint backends").stdout
    assert "flyte-checkpoint-s3 0.1.0" in backends
    assert sys.executable not in user.sh("command -v python").stdout  # the user's venv, not ours
