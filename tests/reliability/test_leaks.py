"""Leaks: many save/load cycles keep memory, file descriptors, threads and temp folders flat.

Each cycle saves a small payload or a small directory with one ``Checkpoint`` and loads it
back with another (and closes both). Measured after a warm-up (the baseline), halfway, and at
the end: resident memory (``/proc/self/statm``), open file descriptors by kind
(``/proc/self/fd``: sockets, and everything else: files, pipes, event fds), the threads, and
the workspace folders (``flyte-checkpoint-ws-*``) under ``tempfile.gettempdir()`` (a private
folder for the test); the test first checks that a live workspace is counted.

Nothing depends on the machine's speed. The baseline and the end are taken with the
registry's stores closed (their connection pools and worker threads released), so every
socket and thread a cycle opened must be gone: each new thread is joined (a generous deadline
is only a hang guard), then non-socket descriptors, sockets, threads and folders must be back
to the baseline. Halfway, with the store alive, non-socket descriptors must be at the baseline
and sockets at most the baseline plus the pool size the store declares
(``max_pooled_connections``): how many idle connections a pool happens to hold at that moment
is not fixed, but a leak of one per cycle would pass that bound long before the middle.
Memory may grow by a small bound only. 1,000 cycles on the file backend, ``CLOUD_CYCLES``
(default 200) on each cloud backend to keep CI time low; ``FCP_LEAK_CYCLES`` and
``FCP_LEAK_CLOUD_CYCLES`` raise them. A child-process test checks that workspaces are removed
on ``close()``, on leaving ``with``, when collected, and at interpreter exit; another that a
store ``configure_store`` replaced is freed (with its logging wrapper) once no one uses it.
"""

from __future__ import annotations

import gc
import logging
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.storage.registry import get_registry, store_for
from flyte_checkpoint.testing.faultproxy import HANG_GUARD
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
#: The names of ``Checkpoint`` workspace folders (``tempfile.mkdtemp`` prefix + random).
WORKSPACES = "flyte-checkpoint-ws-*"


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def open_fds() -> dict[str, int]:
    """Open file descriptors by kind: ``sockets``, and ``files`` (everything else)."""
    counts = {"sockets": 0, "files": 0}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except FileNotFoundError:  # the listing's own descriptor, closed by now
            continue
        counts["sockets" if target.startswith("socket:") else "files"] += 1
    return counts


def workspaces() -> list[str]:
    return sorted(p.name for p in Path(tempfile.gettempdir()).glob(WORKSPACES))


def measure() -> dict[str, int]:
    gc.collect()
    return {"rss": rss(), **open_fds(), "threads": threading.active_count(), "dirs": len(workspaces())}


def close_stores_and_join(known: set[threading.Thread]) -> list[threading.Thread]:
    """Close the registry's stores (pools, worker threads), then join every thread not in
    ``known``; return those still alive at the hang guard."""
    get_registry().close()
    deadline = time.monotonic() + HANG_GUARD
    for t in threading.enumerate():
        if t not in known and t is not threading.current_thread():
            t.join(max(0.0, deadline - time.monotonic()))
    return [t for t in threading.enumerate() if t not in known and t.is_alive()]


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tempfile.gettempdir()`` is a folder of this test's own (nobody else's workspace in it)."""
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


@pytest.mark.timeout(1800)
def test_save_load_cycles_keep_resources_flat(backend: Backend, private_tmp: Path, tmp_path: Path):
    """Proves: 1,000 save/load cycles on the file backend (200 on each cloud backend) leave no
    thread, socket, other descriptor or workspace folder behind once the stores are closed,
    keep non-socket descriptors at the baseline and sockets within the store's declared pool
    while it is open, and keep resident memory within a small bound."""
    cycles = FILE_CYCLES if backend.name == "file" else CLOUD_CYCLES
    dest = backend.fresh("leaks")
    pool = getattr(store_for(dest), "max_pooled_connections", 0)
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "weights.bin").write_bytes(os.urandom(20_000))
    (tree / "meta.json").write_text("{}")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    before_any = len(workspaces())
    with fc.Checkpoint(dest) as probe:  # the count sees a live workspace
        live = probe.path.parent.name
        assert workspaces() == [live]
    for i in range(WARMUP):
        cycle(dest, i, tree, scratch)
    known = set(threading.enumerate())
    assert close_stores_and_join(known) == []
    start = measure()
    middle: dict[str, int] = {}
    started = time.monotonic()
    for i in range(WARMUP, cycles):
        cycle(dest, i, tree, scratch)
        if i == (WARMUP + cycles) // 2:
            middle = measure()
    took = time.monotonic() - started
    alive = close_stores_and_join(known)
    end = measure()
    print(
        f"\nleaks[{backend.name}]: {cycles} save/load cycles ({cycles - WARMUP} measured, {took:.1f}s):"
        f" rss {start['rss'] / 2**20:.1f} -> {middle['rss'] / 2**20:.1f} -> {end['rss'] / 2**20:.1f} MiB,"
        f" other fds {start['files']} -> {middle['files']} -> {end['files']},"
        f" sockets {start['sockets']} -> {middle['sockets']} (pool {pool}) -> {end['sockets']},"
        f" threads {start['threads']} -> {middle['threads']} -> {end['threads']},"
        f" workspaces {start['dirs']} -> {middle['dirs']} -> {end['dirs']}"
    )
    assert alive == [], f"threads that never ended: {alive}"
    assert before_any == start["dirs"] == middle["dirs"] == end["dirs"] == 0, workspaces()
    assert middle["files"] <= start["files"] and end["files"] <= start["files"], (start, middle, end)
    assert middle["sockets"] <= start["sockets"] + pool, f"sockets beyond the pool of {pool}: {middle}"
    assert end["sockets"] <= start["sockets"], f"sockets left open: {start} -> {end}"
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


@pytest.mark.parametrize("level", [logging.WARNING, logging.DEBUG], ids=["WARNING", "DEBUG"])
def test_a_store_replaced_by_configure_store_is_freed(backend: Backend, level: int, caplog, tmp_path: Path):
    """Proves (leftovers, item 4): on every backend, a store that ``configure_store`` replaced
    is freed (with its ``LoggedStore`` at DEBUG) once the saves and loads that used it are
    done: nothing of this library keeps it, its client or its pools alive."""
    from flyte_checkpoint.storage.storelog import unwrapped

    caplog.set_level(level, logger="flyte_checkpoint")
    uri = backend.fresh("ckpt")
    store = store_for(uri)
    with fc.Checkpoint(uri) as cp:
        cp.save_sync(b"x" * 300_000)
    with fc.Checkpoint(str(tmp_path / "next"), uri) as cp:
        assert cp.load_sync() is not None
    refs = [weakref.ref(unwrapped(store)), weakref.ref(store)]
    name = get_registry().backend_for(uri).name
    del store, cp
    fc.configure_store(name)  # no settings: the backend's stores are dropped
    gc.collect()
    assert [ref() for ref in refs] == [None, None], "a replaced store was kept"
    with fc.Checkpoint(str(tmp_path / "again"), uri) as cp:  # a new store serves the backend
        assert cp.load_sync() is not None


@pytest.mark.parametrize("how", ["normal", "raise"])
def test_workspaces_are_removed_on_close_and_at_interpreter_exit(tmp_path: Path, how: str):
    """Proves: a child process's workspaces are gone after close(), after a with block, after
    garbage collection, and, for Checkpoints still alive (or in a cycle) when the interpreter
    exits normally or through an unhandled exception, after exit; no workspace folder is left."""
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "ckpt"), how],
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_GUARD,
    )
    assert out.returncode == (0 if how == "normal" else 1), out.stderr
    roots = [Path(line) for line in out.stdout.split()]
    assert len(roots) == 2 and all(r.parent == tmp and r.match(WORKSPACES) for r in roots), out.stdout
    assert not any(r.exists() for r in roots), "a workspace outlived the interpreter"
    assert list(tmp.glob(WORKSPACES)) == []
