"""The command line as an operator expects it: exit codes, streams in and out, help texts.

Issue 16: ``push`` of a missing path is not "no checkpoint", ``push -`` streams stdin in
bounded memory with progress, ``pull URI -`` writes the object to stdout, ``--progress`` is
offered only where a bar is drawn, and every ``--help`` describes its arguments and shows examples.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from tests.test_cli import SCRIPT, base_env, cli, cli_json, make_tree, one_line_error

COMMANDS = ("backends", "inspect", "pull", "push", "ls", "rm")
MiB = 1024 * 1024


def test_push_of_a_path_that_does_not_exist_exits_1_not_3(tmp_path):
    """Proves: exit status 3 is kept for "no checkpoint at the URI"; a missing PATH to push is
    an ordinary failure (1), with one line naming the path, in text and in --json."""
    out = cli("push", str(tmp_path / "nope"), str(tmp_path / "ckpt"), ok=False)
    assert out.returncode == 1
    assert f"nothing to push at {tmp_path / 'nope'}: the path does not exist" in one_line_error(out)
    doc = json.loads(cli("push", str(tmp_path / "nope"), str(tmp_path / "ckpt"), "--json", ok=False).stdout)
    assert (doc["exit"], doc["type"]) == (1, "NotFoundError")
    assert not (tmp_path / "ckpt").exists()


# --------------------------------------------------------------------------- push - (stdin)

CHILD = textwrap.dedent(
    """
    import resource, sys
    from flyte_checkpoint.cli import main
    code = main(sys.argv[1:])
    print("peak-kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
    sys.exit(code)
    """
)


def push_stdin_in_child(uri: str, size: int, *extra: str) -> tuple[int, int, str]:
    """Feed ``size`` pseudo-random bytes to ``push - uri`` in a child; (exit, peak RSS KiB, stderr)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, "push", "-", uri, *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=base_env(),
    )
    block = os.urandom(MiB)
    assert proc.stdin is not None
    for _ in range(size // MiB):
        proc.stdin.write(block)
    proc.stdin.close()
    err = proc.stderr.read().decode() if proc.stderr else ""
    code = proc.wait(timeout=300)
    peak = int(next(line for line in err.splitlines() if line.startswith("peak-kib")).split()[1])
    return code, peak, err


def test_push_stdin_streams_in_bounded_memory(tmp_path):
    """Proves: ``push -`` does not hold stdin in memory: pushing 256 MiB peaks within 64 MiB of
    the same child pushing 1 MiB (reading it all first would add 256 MiB), and the object holds
    every byte. Measured as the child's own peak RSS, not by time."""
    code, small, err = push_stdin_in_child(str(tmp_path / "small"), MiB)
    assert code == 0, err
    code, big, err = push_stdin_in_child(str(tmp_path / "big"), 256 * MiB)
    assert code == 0, err
    assert (tmp_path / "big").stat().st_size == 256 * MiB
    assert big - small < 64 * 1024, f"peak RSS {big} KiB pushing 256 MiB vs {small} KiB pushing 1 MiB"


def test_push_stdin_shows_progress_and_reports_the_bytes_it_stored(tmp_path):
    """Proves: a forced bar on ``push -`` counts the bytes streamed (no total: stdin has none)
    and ends with the time taken; the summary and --json give the size without another lookup."""
    data = os.urandom(3 * MiB + 5)
    out = cli("push", "-", str(tmp_path / "ckpt"), "--progress", input=data)
    frames = [f for f in out.stderr.split("\r") if f.startswith("push ")]
    assert frames and frames[-1].startswith("push 3 MiB") and " in 0:" in frames[-1], out.stderr
    assert "%" not in out.stderr
    assert out.stdout.startswith(f"saved stdin as payload {tmp_path / 'ckpt'}: {len(data)} bytes (3 MiB) in ")
    assert (tmp_path / "ckpt").read_bytes() == data
    doc = cli_json("push", "-", str(tmp_path / "ckpt2"), input=data)
    assert (doc["size"], doc["source"], doc["kind"]) == (len(data), "-", "payload")


def test_push_stdin_that_fails_midway_stores_nothing_and_keeps_the_old_checkpoint(tmp_path):
    """Proves: streaming does not weaken atomicity: a reader that breaks after 9 MiB (an
    OSError from stdin) fails the push with exit 1 and leaves the previous object whole."""
    from flyte_checkpoint.cli import _push_stream, build_parser

    uri = str(tmp_path / "ckpt")
    cli("push", "-", uri, input=b"epoch-7")

    class Breaks(io.RawIOBase):
        def __init__(self) -> None:
            self.sent = 0

        def readable(self) -> bool:
            return True

        def readinto(self, buf) -> int:
            if self.sent >= 9 * MiB:
                raise OSError("stdin broke")
            n = min(len(buf), MiB)
            buf[:n] = b"x" * n
            self.sent += n
            return n

    args = build_parser().parse_args(["push", "-", uri, "--no-progress"])
    with pytest.raises(OSError, match="stdin broke"):
        _push_stream(args, uri, io.BufferedReader(Breaks()))
    assert Path(uri).read_bytes() == b"epoch-7"
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]


# --------------------------------------------------------------------------- pull URI -


def test_pull_to_stdout_writes_the_object_as_stored(tmp_path):
    """Proves: ``pull URI -`` writes a payload's bytes, and a tarball's gzip tar stream (which
    ``tar`` reads), to stdout with nothing else there; missing is exit 3; --json is refused."""
    payload = os.urandom(2 * MiB + 3)
    cli("push", "-", str(tmp_path / "step"), input=payload)
    out = subprocess.run(
        [str(SCRIPT), "pull", str(tmp_path / "step"), "-"], capture_output=True, env=base_env()
    )
    assert out.returncode == 0 and out.stderr == b"", out.stderr
    assert out.stdout == payload

    tree = make_tree(tmp_path / "state")
    cli("push", str(tree), str(tmp_path / "ckpt"))
    out = subprocess.run(
        [str(SCRIPT), "pull", str(tmp_path / "ckpt"), "-"], capture_output=True, env=base_env()
    )
    assert out.returncode == 0
    assert out.stdout == (tmp_path / "ckpt").read_bytes()
    with tarfile.open(fileobj=io.BytesIO(out.stdout), mode="r:gz") as tf:
        assert tf.extractfile("model.bin").read() == (tree / "model.bin").read_bytes()  # type: ignore[union-attr]

    missing = cli("pull", str(tmp_path / "absent"), "-", ok=False)
    assert missing.returncode == 3 and missing.stdout == ""
    assert "there is no object there" in one_line_error(missing)
    refused = cli("pull", str(tmp_path / "step"), "-", "--json", ok=False)
    assert refused.returncode == 2 and refused.stdout == ""
    assert "--json cannot share it" in one_line_error(refused)


def test_pull_to_stdout_draws_its_bar_on_stderr_only(tmp_path):
    payload = os.urandom(MiB)
    cli("push", "-", str(tmp_path / "step"), input=payload)
    out = subprocess.run(
        [str(SCRIPT), "pull", str(tmp_path / "step"), "-", "--progress"], capture_output=True, env=base_env()
    )
    assert out.returncode == 0 and out.stdout == payload
    assert b"\rpull [" in out.stderr and b"100%" in out.stderr


# --------------------------------------------------------------------------- help texts


def help_text(*args: str) -> str:
    return cli(*args, "--help").stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_describes_its_arguments_and_ends_with_examples_that_parse(command):
    """Proves: each command's --help describes every positional argument and ends with examples
    of that command, each of which the parser accepts as written."""
    from flyte_checkpoint.cli import build_parser

    text = help_text(command)
    positional = text.split("positional arguments:\n", 1)
    if command != "backends":
        assert len(positional) == 2, text
        for line in positional[1].split("\n\n", 1)[0].splitlines():
            if line.startswith("  ") and not line.startswith("    "):
                name, _, description = line.strip().partition(" ")
                assert description.strip(), f"{command}: {name} has no description\n{text}"
    examples = text.split("examples:\n", 1)[1].strip().splitlines()
    assert examples, text
    for example in examples:
        words = example.split()
        words = words[words.index("flyte-checkpoint") :]  # after "echo 1200 |"
        assert words[1] == command, example
        cut = next((i for i, w in enumerate(words) if w in (">", "|")), len(words))
        build_parser().parse_args(words[1:cut])
    top = help_text().split("examples:\n", 1)[1].split()
    assert command in top, top


def test_progress_is_offered_only_where_a_bar_is_drawn(tmp_path):
    """Proves: --progress/--no-progress belong to push, pull and inspect (they move an object's
    bytes and draw a bar when asked); backends, ls and rm refuse them as a usage error."""
    for command in ("push", "pull", "inspect"):
        assert "--progress, --no-progress" in help_text(command), command
    for command in ("backends", "ls", "rm"):
        assert "--progress" not in help_text(command), command
        args = {"backends": [], "ls": [str(tmp_path) + "/"], "rm": ["-f", str(tmp_path / "x")]}[command]
        out = cli(command, *args, "--progress", ok=False)
        assert out.returncode == 2 and "unrecognized arguments: --progress" in one_line_error(out)
    cli("push", str(make_tree(tmp_path / "state")), str(tmp_path / "ckpt"))
    drawn = cli("inspect", str(tmp_path / "ckpt"), "--progress").stderr
    assert "\rinspect [" in drawn and "100%" in drawn
