"""The INFO line of a save and the command line's push output give the same, true figures:
the object's size, the bytes sent, the files copied and sent (incremental saves), the time;
and an incremental save that a store's limit keeps from copying anything says so once."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.format import incremental
from tests.reliability.backends import backend_pool  # noqa: F401
from tests.test_cli import SCRIPT

#: ``saved checkpoint URI: SIZE bytes in S.SSs (R MB/s); sent SENT bytes and N files, copied
#: COPIED bytes and M files from BASE``
INCREMENTAL = re.compile(
    r"saved checkpoint (?P<uri>\S+): (?P<size>\d+) bytes in (?P<s>\d+\.\d\d)s \(\d+\.\d MB/s\);"
    r" sent (?P<sent>\d+) bytes and (?P<files_sent>\d+) files?,"
    r" copied (?P<copied>\d+) bytes and (?P<files_copied>\d+) files? from (?P<base>\S+)$"
)


def tree(root: Path, changed: str = "0") -> Path:
    """Two large files that stay the same, three small ones, one of them ``changed``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "big1.bin").write_bytes(os.urandom(300_000))
    (root / "big2.bin").write_bytes(os.urandom(200_000))
    for n in range(3):
        (root / f"small{n}.txt").write_text(f"{n}{changed}" * 10)
    return root


def info_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.levelno == logging.INFO and r.name == "flyte_checkpoint"
    ]


def test_the_info_line_of_an_incremental_save_names_size_sent_and_files(tmp_path, caplog):
    """Proves: the INFO line of an incremental folder save gives the object's size (the size of
    the file stored), the bytes sent and copied (adding up to it), and the files sent and
    copied; a full save's line gives the object's size, all of it sent, as before."""
    caplog.set_level(logging.INFO, logger="flyte_checkpoint")
    dest = tmp_path / "store" / "ckpt"
    state = tree(tmp_path / "state")
    with fc.Checkpoint(str(dest)) as cp:
        cp.save_sync(state)
        full = dest.stat().st_size
        (state / "small1.txt").write_text("changed")
        cp.save_sync(state)
    first, second = info_lines(caplog)
    assert re.fullmatch(
        rf"saved checkpoint {re.escape(str(dest))}: {full} bytes in \d+\.\d\ds \(\d+\.\d MB/s\)", first
    )
    found = INCREMENTAL.fullmatch(second)
    assert found, second
    size, sent, copied = (int(found[k]) for k in ("size", "sent", "copied"))
    assert size == dest.stat().st_size and sent + copied == size
    assert sent < 100_000 < copied  # the two large files were copied, not sent
    assert (found["files_sent"], found["files_copied"], found["base"]) == ("3", "2", str(dest))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def test_push_prints_the_figures_of_its_info_line(tmp_path):
    """Proves: ``push -v`` prints the same object size, bytes sent, files and seconds on its
    output line as on its INFO line (not the bytes sent on one and the object's size on the
    other, with two timings), and ``--json`` gives them too."""
    dest = tmp_path / "store" / "ckpt"
    state = tree(tmp_path / "state")
    cli("push", str(state), str(dest))
    (state / "small2.txt").write_text("changed")
    out = cli("push", str(state), str(dest), "-v")
    (info,) = [line for line in out.stderr.splitlines() if "INFO" in line]
    found = INCREMENTAL.search(info)
    assert found, info
    printed = re.fullmatch(
        rf"saved {re.escape(str(state))} as tarball {re.escape(str(dest))}: (\d+) bytes \([^)]+\);"
        r" sent (\d+) bytes \([^)]+\) and (\d+) files,"
        r" copied (\d+) bytes \([^)]+\) and (\d+) files in (\d+\.\d\d)s",
        out.stdout.strip(),
    )
    assert printed, out.stdout
    keys = ("size", "sent", "files_sent", "copied", "files_copied", "s")
    assert printed.groups() == tuple(found[k] for k in keys)
    assert int(found["size"]) == dest.stat().st_size
    (state / "small0.txt").write_text("changed again")
    pushed = json.loads(cli("push", str(state), str(dest), "--json").stdout)
    assert pushed["size"] == dest.stat().st_size and pushed["files_copied"] == 2 and pushed["files_sent"] == 3
    assert 0 < pushed["sent"] < pushed["size"]


@pytest.fixture
def s3(backend_pool):  # noqa: F811
    with backend_pool.get("s3").activated() as backend:
        yield backend


def test_an_incremental_save_that_the_s3_minimum_part_keeps_from_copying_says_so_once(
    tmp_path, caplog, s3, monkeypatch
):
    """Proves: on S3, where a copy must be at least 5 MiB, an incremental save from a base whose
    files are all shorter copies nothing and says so at INFO, naming the limit and the store;
    once per process (a second such save, to another URI, says nothing more), and a save from
    a base with a file long enough to copy says nothing. (Files stored in less than 5 MiB
    each are copied as runs of adjacent files: here the base's files together are shorter.)"""
    monkeypatch.setattr(incremental, "_limit_said_in", None, raising=False)
    caplog.set_level(logging.INFO, logger="flyte_checkpoint")
    state = tree(tmp_path / "state")
    for _ in range(2):
        dest = s3.fresh()
        with fc.Checkpoint(dest) as cp:
            cp.save_sync(state)
            cp.save_sync(state)
    notes = [line for line in info_lines(caplog) if "copies nothing" in line]
    assert len(notes) == 1, info_lines(caplog)
    assert re.search(
        r"an incremental save copies nothing from s3://\S+: the 2 files it could copy are stored in"
        r" less than 5 MiB \(5242880 bytes\) together, the minimum part of S3Store, so every file is"
        r" sent again",
        notes[0],
    ), notes[0]
    monkeypatch.setattr(incremental, "_limit_said_in", None, raising=False)
    caplog.clear()
    (state / "big1.bin").write_bytes(os.urandom(5 * 1024 * 1024 + 4096))
    with fc.Checkpoint(s3.fresh()) as cp:
        cp.save_sync(state)
        cp.save_sync(state)
    assert not [line for line in info_lines(caplog) if "copies nothing" in line]
    # big2.bin (200 kB) follows big1.bin in the base: copied with it, one run of two files
    assert re.search(r"copied \d+ bytes and 2 files from", info_lines(caplog)[-1]), info_lines(caplog)


@pytest.mark.parametrize("seconds", [0.0145, 0.014501, 0.0149996, 1.2349, 0.995])
def test_the_printed_seconds_are_the_info_lines_seconds_at_every_rounding(
    seconds, tmp_path, monkeypatch, capsys
):
    """Proves: the line ``push -v`` prints rounds the save's own seconds once, as its INFO line
    does (a figure first rounded to milliseconds, then to two places, printed 0.02s where the INFO
    line said 0.01s: a CI failure); ``--json`` gives the same seconds to the millisecond."""
    from flyte_checkpoint import cli as cli_module
    from flyte_checkpoint.checkpoint import Checkpoint

    transfer = Checkpoint._transfer

    def timed(self, *args, **kwargs):  # the save's own figures, with a duration on a rounding edge
        figures, _ = transfer(self, *args, **kwargs)
        return figures, seconds

    monkeypatch.setattr(Checkpoint, "_transfer", timed)
    src = tmp_path / "state.bin"
    src.write_bytes(b"state")
    assert cli_module.main(["push", str(src), str(tmp_path / "ckpt"), "-v"]) == 0
    out, err = capsys.readouterr()
    (info,) = [line for line in err.splitlines() if "INFO" in line and "saved checkpoint" in line]
    shown, logged = re.search(r" in (\d+\.\d\d)s$", out.strip()), re.search(r" in (\d+\.\d\d)s ", info)
    assert shown and logged and shown[1] == logged[1] == f"{seconds:.2f}", (out, info)
    assert cli_module.main(["push", str(src), str(tmp_path / "ckpt"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["seconds"] == round(seconds, 3)
