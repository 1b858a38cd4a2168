"""Crash mid-save: a child process saving a directory checkpoint is SIGKILLed at many moments.

For each backend (file, S3, GCS, Azure, on their test servers) a child process saves a
directory of several MiB of incompressible data in several files; the parent kills it with
SIGKILL after a delay spread evenly from 0 to 1.3 times the save's measured duration, so
kills land before, during and after the upload. Half of the kills hit a destination that
already holds a checkpoint (the previous one must stay whole), half a destination that
holds nothing (it must stay empty). After every kill the destination is loaded with
``Checkpoint`` and compared, file by file and byte by byte, with what is allowed: the
previous state, or the child's new tree whole (only if the save had committed).

Leftovers a killed writer cannot clean are counted and reported: S3 multipart uploads that
were never completed (invisible to loads; a bucket lifecycle rule removes them), and local
``.fcp-tmp-*`` files beside the destination (invisible to loads and listings; a later save
sweeps those older than an hour, which the test checks by ageing them).

Run with ``-s`` to see one summary line per backend. ``FCP_CRASH_KILLS`` sets the kills per
backend (default 24).
"""

from __future__ import annotations

import hashlib
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import flyte_checkpoint as fc
from flyte_checkpoint.registry import store_for
from tests.reliability import backends
from tests.reliability.backends import Backend, s3_open_uploads

#: The backends' fixtures (see backends.py), visible to pytest in this module.
backend = backends.backend
backend_pool = backends.backend_pool

KILLS = int(os.environ.get("FCP_CRASH_KILLS", "24"))
MIN_KILLS = 20
#: Seconds a child may take to start (imports, first request) before the test fails.
START_TIMEOUT = 60.0

#: The child: connect, say READY, wait for "go", save once, say SAVED, wait to be killed.
CHILD = r"""
import sys, time
import flyte_checkpoint as fc
from flyte_checkpoint.registry import store_for

dest, tree = sys.argv[1], sys.argv[2]
store_for(dest).stat(dest)  # the client is built and connected before the clock starts
print("READY", flush=True)
sys.stdin.readline()
started = time.monotonic()
fc.Checkpoint(dest).save_sync(tree)
print(f"SAVED {time.monotonic() - started:.4f}", flush=True)
sys.stdin.readline()
"""

Snapshot = dict[str, tuple[object, ...]]


def make_tree(root: Path, version: int) -> Snapshot:
    """A checkpoint directory of about 5 MiB in 8 files, different for every version."""
    sizes = {
        "model.bin": 2 * 1024 * 1024,
        "optim/adam.bin": 1536 * 1024,
        "optim/extra.bin": 512 * 1024,
        "shards/0.bin": 384 * 1024,
        "shards/1.bin": 384 * 1024,
        "shards/2.bin": 256 * 1024,
        "meta.json": 0,
    }
    for rel, size in sizes.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size) if size else f'{{"version": {version}}}'.encode())
    (root / "empty").write_bytes(b"")
    (root / "latest").symlink_to("model.bin")
    return snapshot(root)


def snapshot(root: Path) -> Snapshot:
    """Every entry under ``root``: kind, and for files a SHA-256 of the bytes and the mode."""
    out: Snapshot = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            out[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            out[rel] = ("dir",)
        else:
            out[rel] = ("file", hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mode & 0o777)
    return out


def loaded(uri: str, scratch: Path) -> Snapshot | None:
    """What ``Checkpoint`` restores from ``uri`` (``None``: no checkpoint)."""
    with fc.Checkpoint(str(scratch / "never-written"), uri) as cp:
        path = cp.load_sync()
        if path is None:
            return None
        assert path == cp.path, f"a directory checkpoint loaded as a payload: {path}"
        return snapshot(path)


def read_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    """The child's next stdout line, or "" if it printed none within ``timeout`` seconds."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline().decode().strip() if ready else ""


@dataclass
class Kill:
    delay: float
    seeded: bool
    committed: bool  # the child printed SAVED before it died
    outcome: str  # "previous", "nothing" or "new"


def run_child(backend: Backend, dest: str, tree: Path, delay: float | None, log: Path) -> tuple[bool, float]:
    """Start a child saving ``tree`` to ``dest``; SIGKILL it ``delay`` s after "go" (None: let it finish).

    Returns (it printed SAVED, the save's duration it reported or 0).
    """
    with open(log, "ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, dest, str(tree)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            env=backend.child_env(),
        )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        line = read_line(proc, START_TIMEOUT)
        assert line == "READY", f"the child did not start: {line!r}; stderr:\n{log.read_text()[-3000:]}"
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        if delay is None:
            line = read_line(proc, 120)
            assert line.startswith("SAVED"), f"the save failed: {line!r}; stderr:\n{log.read_text()[-3000:]}"
            return True, float(line.split()[1])
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        rest = proc.stdout.read().decode()
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
        return "SAVED" in rest, 0.0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        proc.stdin.close()
        proc.stdout.close()


def local_temp_files(dest: str) -> list[Path]:
    """Temporary files of the local store beside ``dest``."""
    return sorted(Path(dest).parent.glob(".fcp-tmp-*"))


def test_sigkill_mid_save_leaves_the_previous_checkpoint_whole_or_nothing(backend: Backend, tmp_path: Path):
    """Proves: on every backend, a writer SIGKILLed at any moment of a directory save leaves
    the destination holding the previous checkpoint whole (nothing if there was none), or the
    new tree whole if the save had committed; each state loads and matches byte for byte.
    At least 20 kills per backend, at least a third of them while the save was running."""
    assert KILLS >= MIN_KILLS
    log = tmp_path / "children.log"
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    # How long one uninterrupted save of such a tree takes in a child, on this backend now.
    calib_tree = tmp_path / "calibration"
    calib = make_tree(calib_tree, -1)
    calib_dest = backend.fresh("calibration")
    durations = [run_child(backend, calib_dest, calib_tree, None, log)[1] for _ in range(2)]
    assert loaded(calib_dest, scratch) == calib
    duration = max(max(durations), 0.01)

    seeded_dest = backend.fresh("seeded")
    seed_tree = tmp_path / "seed"
    current: Snapshot | None = make_tree(seed_tree, 0)
    fc.Checkpoint(seeded_dest).save_sync(seed_tree)
    assert loaded(seeded_dest, scratch) == current

    kills: list[Kill] = []
    empty_dests: list[str] = []
    for i in range(KILLS):
        delay = 1.3 * duration * i / (KILLS - 1)
        seeded = i % 2 == 0
        dest = seeded_dest if seeded else backend.fresh(f"empty-{i}")
        if not seeded:
            empty_dests.append(dest)
        before = current if seeded else None
        tree = tmp_path / f"v{i + 1}"
        new = make_tree(tree, i + 1)
        committed, _ = run_child(backend, dest, tree, delay, log)
        after = loaded(dest, scratch)
        if after == new:
            outcome = "new"
        elif after is None and before is None:
            outcome = "nothing"
        elif after == before:
            outcome = "previous"
        else:
            raise AssertionError(
                f"kill {i} after {delay:.3f}s left {dest} holding neither the previous state nor the new"
                f" tree: {sorted(after or {})}"
            )
        assert not (committed and outcome != "new"), f"kill {i}: the child reported SAVED but {outcome} loads"
        if seeded:
            current = after
        kills.append(Kill(delay, seeded, committed, outcome))
        shutil.rmtree(tree)

    interrupted = [k for k in kills if k.outcome != "new"]
    leftovers = ""
    if backend.name == "s3":
        open_uploads = sum(len(s3_open_uploads(backend, d)) for d in [seeded_dest, *empty_dests])
        # A killed process cannot abort its multipart upload; only interrupted saves leave one.
        assert open_uploads <= len(interrupted)
        leftovers = f"; {open_uploads} multipart uploads left open (invisible; lifecycle rule removes them)"
    if backend.name == "file":
        temps = [t for d in [seeded_dest, *empty_dests] for t in local_temp_files(d)]
        assert len(temps) <= len(interrupted)
        for d in [seeded_dest, *empty_dests]:  # invisible to listings
            assert all(".fcp-tmp-" not in u for u in store_for(d).list(str(Path(d).parent) + "/"))
        leftovers = f"; {len(temps)} .fcp-tmp-* files left by killed writers"
        # A later save sweeps temporary files older than an hour, and only those.
        old = time.time() - 2 * 3600
        for t in temps:
            os.utime(t, (old, old))
        fresh_tmp = Path(seeded_dest).parent / ".fcp-tmp-seeded.live-writer"
        fresh_tmp.write_bytes(b"a writer still at work")
        for d in [seeded_dest, *empty_dests]:
            fc.Checkpoint(d).save_sync(b"after the crashes")
            assert local_temp_files(d) == ([fresh_tmp] if d == seeded_dest else [])
        leftovers += " (all swept by the next save once older than an hour)"

    mid_save = sum(1 for k in kills if not k.committed)
    print(
        f"\ncrash[{backend.name}]: {len(kills)} SIGKILLs over 0-{1.3 * duration:.3f}s"
        f" (save takes ~{duration:.3f}s; {sum(k.seeded for k in kills)} on a seeded destination,"
        f" {sum(not k.seeded for k in kills)} on an empty one): {mid_save} before the save finished,"
        f" {sum(k.outcome == 'previous' for k in kills)} left the previous checkpoint whole,"
        f" {sum(k.outcome == 'nothing' for k in kills)} left nothing,"
        f" {sum(k.outcome == 'new' for k in kills)} the new one whole; 0 damaged{leftovers}"
    )
    assert len(kills) == KILLS >= MIN_KILLS
    assert mid_save >= KILLS // 3, f"only {mid_save} of {KILLS} kills landed before the save finished"
    assert any(k.outcome == "previous" for k in kills) and any(k.outcome == "nothing" for k in kills)
