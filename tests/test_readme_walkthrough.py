"""The README's Install, Quick start and command-line sections, run as written in a fresh venv.

One virtual environment for the module, as a new user would make it: in a copy of the checkout,
the Install section's first block (``make dist``, then ``pip install --find-links dist ...``)
with that venv's ``pip`` first on ``PATH``; then the Quick start's Python (against moto's S3
server on 127.0.0.1, through ``AWS_ENDPOINT_URL_S3``), the command-line walkthrough (every
console block of its section, in order, in one shell, compared with the outputs the README
shows), and last the Install section's second block (``pip install . ./plugins/s3``, from the
checkout), after which the missing-backend hint names the checkout's plugin folder.

Outputs are compared after replacing what a run cannot repeat: durations (``0.08s``), rates
(``12.9 MB/s``), ``ls -l``'s modification times, a few bytes of a tarball's size (its tar headers
hold the files' modification times, and gzip compresses them; the index after them has a
length fixed by the tree's names and layout, docs/FORMAT.md) and the walkthrough's folder
(``/tmp/cp-demo`` is this test's own). To refresh the README's outputs after a change, run with
``FCP_README_RECORD=/some/file``: the transcript of the run is written there, in the README's form.

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
from tests.test_cli import FOREIGN_ENV, s3_server

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DEMO = "/tmp/cp-demo"

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.integration]


def section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, flags=re.S | re.M)


def commands(block: str) -> list[str]:
    """The commands of a bash block, without their comments."""
    return [c for line in block.splitlines() if (c := line.split("  #", 1)[0].strip())]


def transcript(block_text: str) -> list[tuple[str, list[str]]]:
    """(command, the output lines shown under it) for each ``$ `` line of console blocks."""
    steps: list[tuple[str, list[str]]] = []
    for line in block_text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif line.strip() and steps:
            steps[-1][1].append(line)
    return steps


def normalize(lines: list[str]) -> list[str]:
    """Lines with what a rerun changes replaced: durations, rates."""
    out = []
    for line in lines:
        line = re.sub(r"\b\d+\.\d+s\b", "<t>s", line)
        line = re.sub(r"\(\d+\.\d+ MB/s\)", "(<r> MB/s)", line)
        line = re.sub(r"\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\b", "<date>", line)
        out.append(line.rstrip())
    return out


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
    """The README's first Install block run as written, in a fresh venv."""
    require(shutil.which("make") is not None, "make is not installed")
    user = User(tmp_path_factory.mktemp("readme"), s3_env)
    install = blocks(section("Install"), "bash")
    assert len(install) == 2, install
    for command in commands(install[0]):
        user.sh(command)
    assert sorted(p.name for p in (user.checkout / "dist").iterdir()) == [
        "flyte_checkpoint-0.1.0-py3-none-any.whl",
        "flyte_checkpoint_azure-0.1.0-py3-none-any.whl",
        "flyte_checkpoint_gcs-0.1.0-py3-none-any.whl",
        "flyte_checkpoint_s3-0.1.0-py3-none-any.whl",
    ]
    return user


def test_the_quick_start_runs_as_written(user: User) -> None:
    """Proves: after the Install block, the Quick start's two blocks, run as one script, print
    what the task returns and save through the S3 extra (the object holds b"state")."""
    code = "\n".join(blocks(section("Quick start"), "python"))
    (user.home / "quickstart.py").write_text(code)
    out = user.sh(f"python {user.home / 'quickstart.py'}", cwd=user.home)
    assert out.stdout == "5\n", out.stdout + out.stderr
    got = user.sh("flyte-checkpoint pull s3://my-bucket/run/attempt-2/ckpt -", cwd=user.home)
    assert got.stdout == "state"


def test_the_command_line_walkthrough_runs_top_to_bottom_with_the_outputs_shown(user: User) -> None:
    """Proves: every console block of the command-line section, run in order in one shell (cd
    carries over), prints what the README shows under each command, up to durations and rates."""
    demo = user.home / "cp-demo"
    text = "\n".join(blocks(section("The command line: `flyte-checkpoint`"), "console"))
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


def same(actual: list[str], shown: list[str]) -> bool:
    """Equal, but for byte counts of six digits or more, which may differ by a few bytes: a
    tarball's size depends on its files' modification times (whole seconds in its compressed
    tar headers)."""
    if len(actual) != len(shown):
        return False
    for got, want in zip(actual, shown, strict=True):
        got_parts, want_parts = re.split(r"(\d{6,})", got), re.split(r"(\d{6,})", want)
        if len(got_parts) != len(want_parts):
            return False
        for k, (g, w) in enumerate(zip(got_parts, want_parts, strict=True)):
            if g != w and not (k % 2 and abs(int(g) - int(w)) <= 64):
                return False
    return True


def test_installing_from_the_checkout_folders_works_and_the_hint_names_them(user: User) -> None:
    """Proves: the Install section's second block (pip install of the folders) works in the same
    venv, and then a missing backend's hint is that checkout's plugin folder, not the extra
    (which names a distribution no index holds); installed from wheels it was the extra."""
    before = user.sh("flyte-checkpoint inspect gs://my-bucket/x", check=False)
    assert "Install it with: pip install 'flyte-checkpoint[gcs]' (" in before.stderr, before.stderr
    for command in commands(blocks(section("Install"), "bash")[1]):
        user.sh(command)
    after = user.sh("flyte-checkpoint inspect gs://my-bucket/x", check=False)
    assert after.returncode == 1
    assert f"Install it with: pip install {user.checkout}/plugins/gcs (" in after.stderr, after.stderr
    assert user.sh(f"pip install -q {user.checkout}/plugins/gcs --dry-run").returncode == 0
    backends = user.sh("flyte-checkpoint backends").stdout
    assert "flyte-checkpoint-s3 0.1.0" in backends
    assert sys.executable not in user.sh("command -v python").stdout  # the user's venv, not ours
