"""Leaks: many save/load cycles keep memory, file descriptors, threads and temp folders flat.

Each cycle saves a small payload or a small directory with one ``Checkpoint`` and loads it
back with another (and closes both). After a warm-up, resident memory (``/proc/self/statm``),
open file descriptors (``/proc/self/fd``), ``threading.active_count()`` and the number of
``flyte-cp-*`` folders under ``tempfile.gettempdir()`` (a private folder for the test) are
measured, and again after the remaining cycles: fds, threads and folders must come back to
the same numbers, memory may grow by a small bound only. 1,000 cycles on the file backend,
``CLOUD_CYCLES`` (default 200) on each cloud backend to keep CI time low; ``FCP_LEAK_CYCLES``
and ``FCP_LEAK_CLOUD_CYCLES`` raise them. A child-process test checks that workspaces are
removed on ``close()``, on leaving ``with``, when collected, and at interpreter exit.
"""

from __future__ import annotations

import gc
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from tests.reliability import backends
from tests.reliability.backends import Backend

#: The backends' fixtures (see backends.py), visible to pytest in this module.
backend = backends.backend
backend_pool = backends.backend_pool

FILE_CYCLES = int(os.environ.get("FCP_LEAK_CYCLES", "1000"))
CLOUD_CYCLES = int(os.environ.get("FCP_LEAK_CLOUD_CYCLES", "200"))
WARMUP = 50
#: Resident memory may grow this much after the warm-up (allocator noise, caches).
RSS_SLACK = 24 * 1024 * 1024
PAGE = resource.getpagesize()


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def workspaces() -> list[str]:
    return sorted(p.name for p in Path(tempfile.gettempdir()).glob("flyte-cp-*"))


def measure() -> dict[str, int]:
    gc.collect()
    return {"rss": rss(), "fds": open_fds(), "threads": threading.active_count(), "dirs": len(workspaces())}


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tempfile.gettempdir()`` is a folder of this test's own (nobody else's flyte-cp-* in it)."""
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def cycle(dest: str, i: int, tree: Path, scratch: Path) -> None:
    """One save and one load, checked; both checkpoints closed."""
    if i % 2:
        (tree / "step").write_bytes(str(i).encode())
        with fc.Checkpoint(dest) as cp:
            cp.save_sync(tree)
    else:
        with fc.Checkpoint(dest) as cp:
            cp.save_sync(b"step %d" % i)
    with fc.Checkpoint(str(scratch / "unused"), dest) as cp:
        path = cp.load_sync()
        assert path is not None
        if i % 2:
            assert (path / "step").read_bytes() == str(i).encode()
            assert (path / "sub" / "weights.bin").stat().st_size == 20_000
        else:
            assert path.read_bytes() == b"step %d" % i


def test_save_load_cycles_keep_resources_flat(backend: Backend, private_tmp: Path, tmp_path: Path):
    """Proves: 1,000 save/load cycles on the file backend (200 on each cloud backend) leave
    open file descriptors, threads and flyte-cp-* temp folders exactly where they were after
    the warm-up, and resident memory within a small bound."""
    cycles = FILE_CYCLES if backend.name == "file" else CLOUD_CYCLES
    dest = backend.fresh("leaks")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "weights.bin").write_bytes(os.urandom(20_000))
    (tree / "meta.json").write_text("{}")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    before_any = len(workspaces())
    for i in range(WARMUP):
        cycle(dest, i, tree, scratch)
    start = measure()
    middle: dict[str, int] = {}
    started = time.monotonic()
    for i in range(WARMUP, cycles):
        cycle(dest, i, tree, scratch)
        if i == (WARMUP + cycles) // 2:
            middle = measure()
    end = measure()
    took = time.monotonic() - started
    deadline = time.monotonic() + 10  # pool threads of a closed store may take a moment to exit
    while end["threads"] > start["threads"] and time.monotonic() < deadline:
        time.sleep(0.1)
        end = measure()
    print(
        f"\nleaks[{backend.name}]: {cycles} save/load cycles ({cycles - WARMUP} measured, {took:.1f}s):"
        f" rss {start['rss'] / 2**20:.1f} -> {middle['rss'] / 2**20:.1f} -> {end['rss'] / 2**20:.1f} MiB,"
        f" fds {start['fds']} -> {middle['fds']} -> {end['fds']},"
        f" threads {start['threads']} -> {middle['threads']} -> {end['threads']},"
        f" flyte-cp-* dirs {start['dirs']} -> {middle['dirs']} -> {end['dirs']}"
    )
    assert before_any == start["dirs"] == end["dirs"] == 0, workspaces()
    assert end["fds"] <= start["fds"], f"file descriptors grew: {start['fds']} -> {end['fds']}"
    assert end["threads"] <= start["threads"], f"threads grew: {threading.enumerate()}"
    assert end["rss"] - start["rss"] <= RSS_SLACK, "resident memory grew"


CHILD = r"""
import gc, os, sys, tempfile
import flyte_checkpoint as fc

dest = sys.argv[1]
fc.Checkpoint(dest).save_sync(b"state")

closed = fc.Checkpoint("/nonexistent/never", dest)
closed.load_sync()
closed_root = closed.path.parent
closed.close()
assert not closed_root.exists(), "close() left the workspace"

with fc.Checkpoint("/nonexistent/never", dest) as cp:
    cp.load_sync()
    with_root = cp.path.parent
assert not with_root.exists(), "leaving with left the workspace"

collected = fc.Checkpoint("/nonexistent/never", dest)
collected.load_sync()
collected_root = collected.path.parent
del collected
gc.collect()
assert not collected_root.exists(), "a collected Checkpoint left its workspace"

kept = fc.Checkpoint("/nonexistent/never", dest)   # still referenced at exit
kept.load_sync()
cycle = fc.Checkpoint("/nonexistent/never", dest)  # in a reference cycle at exit
cycle.me = cycle
cycle.load_sync()
print(kept.path.parent, cycle.path.parent, sep="\n", flush=True)
if sys.argv[2] == "raise":
    raise SystemExit("exiting through an unhandled exception")
"""


@pytest.mark.parametrize("how", ["normal", "raise"])
def test_workspaces_are_removed_on_close_and_at_interpreter_exit(tmp_path: Path, how: str):
    """Proves: a child process's workspaces are gone after close(), after a with block, after
    garbage collection, and, for Checkpoints still alive (or in a cycle) when the interpreter
    exits normally or through an unhandled exception, after exit; no flyte-cp-* is left."""
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "ckpt"), how],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == (0 if how == "normal" else 1), out.stderr
    roots = [Path(line) for line in out.stdout.split()]
    assert len(roots) == 2 and all(r.parent == tmp for r in roots), out.stdout
    assert not any(r.exists() for r in roots), "a workspace outlived the interpreter"
    assert list(tmp.glob("flyte-cp-*")) == []
