"""Concurrency: many writers of one destination, and one ``Checkpoint`` shared by threads.

Guarantee tested (every backend): whatever the interleaving, the destination holds exactly
one whole payload, one of those written, and a reader never sees anything else (a mix, a
truncation, or ``None`` once a checkpoint exists). Every ``save_sync`` returns normally:
on Azure the loser of a block-list race gets a ``TransientError`` from the store ("another
writer..."), which ``Checkpoint.save_sync`` retries with backoff (``FLYTE_CHECKPOINT_RETRY_*``),
so with the default retry policy the contended saves here all succeed; the number of
conflicts seen is reported. Payloads span several parts/blocks/chunks, so uploads overlap.
"""

from __future__ import annotations

import hashlib
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import flyte_checkpoint as fc
from tests.reliability import backends
from tests.reliability.backends import Backend

#: The backends' fixtures (see backends.py), visible to pytest in this module.
backend = backends.backend
backend_pool = backends.backend_pool

THREADS = 4
SAVES_PER_THREAD = 3
PROCESSES = 3
SAVES_PER_PROCESS = 2
PAYLOAD_SIZE = 700 * 1024  # more than two S3 parts, Azure blocks and GCS chunks (test tuning)

CHILD = r"""
import sys
import flyte_checkpoint as fc
from flyte_checkpoint.registry import store_for

dest, tree, saves = sys.argv[1], sys.argv[2], int(sys.argv[3])
store_for(dest).stat(dest)
print("READY", flush=True)
sys.stdin.readline()
for _ in range(saves):
    fc.Checkpoint(dest).save_sync(tree)
print("DONE", flush=True)
"""


def payload(writer: str) -> bytes:
    """Incompressible bytes that name their writer at both ends."""
    tag = f"<{writer}>".encode()
    return tag + os.urandom(PAYLOAD_SIZE) + tag


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_bytes(uri: str, scratch: Path) -> bytes | None:
    with fc.Checkpoint(str(scratch / "unused"), uri) as cp:
        path = cp.load_sync()
        return None if path is None else path.read_bytes()


def run_threads(targets: list[Callable[[], None]], timeout: float = 300) -> list[BaseException]:
    """Run each target in its own thread, started together; return what they raised."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(targets))

    def wrap(fn: Callable[[], None]) -> None:
        barrier.wait()
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(fn,)) for fn in targets]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a thread hung"
    return errors


class ConflictCounter:
    """Counts the ``TransientError``s ``Checkpoint`` retried (its DEBUG retry lines)."""

    def __init__(self) -> None:
        import logging

        self.count = 0
        self._logger = logging.getLogger("flyte_checkpoint")
        self._handler = logging.Handler(logging.DEBUG)
        self._handler.emit = self._emit  # type: ignore[method-assign]
        self._saved = self._logger.level

    def _emit(self, record: object) -> None:
        if "transient error" in str(getattr(record, "msg", "")):
            self.count += 1

    def __enter__(self) -> ConflictCounter:
        self._logger.addHandler(self._handler)
        self._logger.setLevel(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self._handler)
        self._logger.setLevel(self._saved)


def test_threads_saving_one_destination_leave_one_whole_payload(backend: Backend, tmp_path: Path):
    """Proves: 4 threads, each saving its own multi-part payload 3 times to one URI while a
    fifth thread keeps loading it, never produce or observe a mixed or partial object; every
    save succeeds (Azure conflicts are retried) and the end state is one writer's payload."""
    dest = backend.fresh("threads")
    payloads = {f"t{i}": payload(f"t{i}") for i in range(THREADS)}
    allowed = {digest(p) for p in payloads.values()}
    stop = threading.Event()
    seen: list[str | None] = []
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    def writer(name: str) -> Callable[[], None]:
        def run() -> None:
            for _ in range(SAVES_PER_THREAD):
                fc.Checkpoint(dest).save_sync(payloads[name])

        return run

    reader_errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                data = load_bytes(dest, scratch)
                seen.append(None if data is None else digest(data))
        except BaseException as exc:
            reader_errors.append(exc)

    with ConflictCounter() as conflicts:
        watcher = threading.Thread(target=reader)
        watcher.start()
        try:
            errors = run_threads([writer(n) for n in payloads])
        finally:
            stop.set()
            watcher.join(120)
    assert not watcher.is_alive()
    assert not errors, errors
    assert not reader_errors, reader_errors
    final = load_bytes(dest, scratch)
    assert final is not None and digest(final) in allowed
    reads = [s for s in seen if s is not None]
    assert all(s in allowed for s in reads), "a reader saw a payload nobody wrote"
    # once a payload was seen, the checkpoint never looked absent again
    first = next((i for i, s in enumerate(seen) if s is not None), len(seen))
    assert None not in seen[first:]
    print(
        f"\nconcurrency[{backend.name}] threads: {THREADS}x{SAVES_PER_THREAD} saves of"
        f" {PAYLOAD_SIZE // 1024} KiB, {len(seen)} concurrent loads ({len(reads)} saw a payload, all whole),"
        f" {conflicts.count} transient errors retried (Azure commit races, GCS reads raced by an"
        " overwrite); final = one whole payload"
    )


def make_tree(root: Path, writer: str) -> dict[str, str]:
    """A small directory checkpoint of ~800 KiB that belongs to ``writer``; returns its digests."""
    (root / "sub").mkdir(parents=True)
    files = {"model.bin": os.urandom(500 * 1024), "sub/state.bin": os.urandom(300 * 1024)}
    files["owner.txt"] = writer.encode()
    for rel, data in files.items():
        (root / rel).write_bytes(data)
    return {rel: digest(data) for rel, data in files.items()}


def tree_digests(path: Path) -> dict[str, str]:
    return {p.relative_to(path).as_posix(): digest(p.read_bytes()) for p in path.rglob("*") if p.is_file()}


def test_processes_saving_one_destination_leave_one_whole_tree(backend: Backend, tmp_path: Path):
    """Proves: 3 processes, released together, each saving its own directory checkpoint twice
    to one URI, all succeed, and the destination then loads as exactly one of the trees, whole."""
    dest = backend.fresh("processes")
    trees = {f"p{i}": make_tree(tmp_path / f"p{i}", f"p{i}") for i in range(PROCESSES)}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name in trees:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", CHILD, dest, str(tmp_path / name), str(SAVES_PER_PROCESS)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=backend.child_env(FLYTE_CHECKPOINT_RETRY_BASE_DELAY="0.2"),
                )
            )
        for p in procs:
            assert p.stdout is not None
            ready, _, _ = select.select([p.stdout], [], [], 60)
            assert ready and p.stdout.readline().strip() == b"READY"
        for p in procs:  # release them together
            assert p.stdin is not None
            p.stdin.write(b"go\n")
            p.stdin.flush()
        for p in procs:
            out, err = p.communicate(timeout=180)
            assert p.returncode == 0 and out.strip() == b"DONE", err.decode()[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)
    with fc.Checkpoint(str(tmp_path / "unused"), dest) as cp:
        path = cp.load_sync()
        assert path is not None
        got = tree_digests(path)
    assert got in trees.values(), "the destination holds no single writer's tree"
    winner = next(name for name, t in trees.items() if t == got)
    print(
        f"\nconcurrency[{backend.name}] processes: {PROCESSES}x{SAVES_PER_PROCESS} directory saves,"
        f" all succeeded; final = {winner}'s tree, whole"
    )


def test_one_checkpoint_shared_by_threads_saves_and_loads_safely(backend: Backend, tmp_path: Path):
    """Proves: one ``Checkpoint`` used by 6 threads at once (3 loading the previous attempt's
    directory checkpoint, 3 saving their own payloads) loads once, gives every loader the same
    whole tree, and leaves one whole payload at the destination; async saves/loads too."""
    import asyncio

    src = backend.fresh("shared-src")
    dest = backend.fresh("shared-dest")
    expected = make_tree(tmp_path / "prev", "prev")
    fc.Checkpoint(src).save_sync(tmp_path / "prev")
    payloads = {f"s{i}": payload(f"s{i}") for i in range(3)}
    results: list[dict[str, str]] = []
    paths: list[Path] = []
    with fc.Checkpoint(dest, src) as cp:

        def loader() -> None:
            for _ in range(3):
                path = cp.load_sync()
                assert path is not None
                paths.append(path)
                results.append(tree_digests(path))

        def saver(name: str) -> Callable[[], None]:
            return lambda: [cp.save_sync(payloads[name]) for _ in range(2)]  # type: ignore[func-returns-value]

        errors = run_threads([loader, loader, loader, *(saver(n) for n in payloads)])
        assert not errors, errors
        assert len(set(paths)) == 1 and all(r == expected for r in results)

        async def both() -> None:
            got = await asyncio.gather(cp.load(), cp.save(b"async-a"), cp.load(), cp.save(b"async-b"))
            assert got[0] == got[2] == paths[0]

        asyncio.run(both())
    assert load_bytes(dest, tmp_path) in (b"async-a", b"async-b")
