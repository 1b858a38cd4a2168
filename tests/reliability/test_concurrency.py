"""Concurrency: many writers of one destination, and one ``Checkpoint`` shared by threads.

Guarantee tested (every backend): whatever the interleaving, the destination holds exactly
one whole payload, one of those written, and a reader never sees anything else (a mix, a
truncation, or ``None`` once a checkpoint exists). Every ``save_sync`` returns normally:
on Azure the loser of a block-list race gets a ``TransientError`` from the store ("another
writer..."), which ``Checkpoint.save_sync`` retries. Payloads span several
parts/blocks/chunks, so uploads overlap.

Nothing here depends on the machine's speed. The retry budgets are counts: a try of a save
fails on a block-list race only when another save committed during it, and a load only when
an overwrite landed during it, each time a different one, so ``attempts`` = saves + 1 always
suffices (no time limit but a hang guard). The Azure race itself is made to happen, not hoped for: a proxy in
front of Azurite holds both writers' commit requests (sent once every block is staged) and
releases them one after the other. "Loads once" is counted by a pass-through store.
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import re
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import TransientError
from flyte_checkpoint.storage.registry import store_for
from flyte_checkpoint.testing.faultproxy import HANG_GUARD, FaultProxy
from flyte_checkpoint.util.retry import RetryPolicy
from tests.reliability import backends
from tests.reliability.backends import Backend, BackendPool
from tests.spystore import spying

#: The backends' fixtures (see backends.py), visible to pytest in this module.
backend = backends.backend
backend_pool = backends.backend_pool

THREADS = 4
SAVES_PER_THREAD = 3
PROCESSES = 3
SAVES_PER_PROCESS = 2
PAYLOAD_SIZE = 700 * 1024  # more than two S3 parts, Azure blocks and GCS chunks (test tuning)


def contended(saves: int) -> RetryPolicy:
    """Enough tries for any interleaving of ``saves`` saves (see the module docstring): a
    count bound; the total time limit is only a hang guard."""
    return RetryPolicy(attempts=saves + 1, base_delay=0.01, max_delay=0.05, total_timeout=HANG_GUARD * 5)


THREAD_POLICY = contended(THREADS * SAVES_PER_THREAD)

CHILD = r"""
import sys
import flyte_checkpoint as fc
from flyte_checkpoint.storage.registry import store_for

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


def load_bytes(uri: str, scratch: Path, retry: RetryPolicy | None = None) -> bytes | None:
    with fc.Checkpoint(str(scratch / "unused"), uri, retry=retry) as cp:
        path = cp.load_sync()
        return None if path is None else path.read_bytes()


def run_threads(targets: list[Callable[[], None]], timeout: float = HANG_GUARD * 5) -> list[BaseException]:
    """Run each target in its own thread, started together; return what they raised
    (``timeout`` is a hang guard)."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(targets))

    def wrap(fn: Callable[[], None]) -> None:
        barrier.wait(HANG_GUARD)
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
    """Collects the ``TransientError``s ``Checkpoint`` retried (its DEBUG retry lines)."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self._logger = logging.getLogger("flyte_checkpoint")
        self._handler = logging.Handler(logging.DEBUG)
        self._handler.emit = self._emit  # type: ignore[method-assign]
        self._saved = self._logger.level

    @property
    def count(self) -> int:
        return len(self.messages)

    def _emit(self, record: logging.LogRecord) -> None:
        if "transient error" in str(record.msg):
            self.messages.append(record.getMessage())

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
    save succeeds (Azure conflicts are retried, within a count-bound number of tries) and the
    end state is one writer's payload."""
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
                fc.Checkpoint(dest, retry=THREAD_POLICY).save_sync(payloads[name])

        return run

    reader_errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                data = load_bytes(dest, scratch, THREAD_POLICY)
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
            watcher.join(HANG_GUARD)
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


#: The children's retry policy (``contended`` as environment variables).
PROCESS_RETRY_ENV = {
    "FLYTE_CHECKPOINT_RETRY_ATTEMPTS": str(PROCESSES * SAVES_PER_PROCESS + 1),
    "FLYTE_CHECKPOINT_RETRY_BASE_DELAY": "0.01",
    "FLYTE_CHECKPOINT_RETRY_MAX_DELAY": "0.05",
    "FLYTE_CHECKPOINT_RETRY_TOTAL_TIMEOUT": str(HANG_GUARD * 5),
}


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
                    env=backend.child_env(**PROCESS_RETRY_ENV),
                )
            )
        for p in procs:
            assert p.stdout is not None
            ready, _, _ = select.select([p.stdout], [], [], HANG_GUARD)
            assert ready and p.stdout.readline().strip() == b"READY"
        for p in procs:  # release them together
            assert p.stdin is not None
            p.stdin.write(b"go\n")
            p.stdin.flush()
        for p in procs:
            out, err = p.communicate(timeout=HANG_GUARD * 5)
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


def test_one_checkpoint_shared_by_threads_loads_once_and_saves_safely(backend: Backend, tmp_path: Path):
    """Proves: one ``Checkpoint`` used by 6 threads at once (3 loading the previous attempt's
    directory checkpoint 3 times each, 3 saving their own payloads twice) downloads it exactly
    once (one ``stat`` and one ``open_read`` of the source, counted by a pass-through store),
    gives every loader the same path and whole tree, and leaves one whole payload; async loads
    and saves gathered afterwards download nothing more."""
    import asyncio

    from flyte_checkpoint.uri import normalize, scheme_of

    src_real = backend.fresh("shared-src")
    dest_real = backend.fresh("shared-dest")
    expected = make_tree(tmp_path / "prev", "prev")
    fc.Checkpoint(src_real).save_sync(tmp_path / "prev")
    payloads = {f"s{i}": payload(f"s{i}") for i in range(3)}
    results: list[dict[str, str]] = []
    paths: list[Path] = []
    with spying(scheme_of(normalize(src_real))) as spy:
        src, dest = spy.uri_for(src_real), spy.uri_for(dest_real)
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
            assert len(paths) == 9 and len(set(paths)) == 1 and all(r == expected for r in results)

            async def both() -> None:
                got = await asyncio.gather(cp.load(), cp.save(b"async-a"), cp.load(), cp.save(b"async-b"))
                assert got[0] == got[2] == paths[0]

            asyncio.run(both())
        downloads = {op: n for (op, uri), n in spy.calls.items() if uri == src}
    # one load: its version (pin: the size), its trailer (one ranged read: does it carry an
    # index?), one download
    assert downloads == {"pin": 1, "read_range": 1, "open_read": 1, "read": downloads.get("read", 0)}, (
        downloads
    )
    assert spy.count("write_bytes", dest) == 8  # 3 x 2 threaded saves + 2 async ones
    assert load_bytes(dest_real, tmp_path) in (b"async-a", b"async-b")


# -- the Azure block-list race, made to happen -------------------------------------------

#: What the Azure SDK's commit request (Put Block List) carries in its request line.
COMMIT = b"comp=blocklist"


@pytest.fixture
def azure_via_proxy(backend_pool: BackendPool) -> Iterator[tuple[Backend, FaultProxy]]:
    """Azurite, with the plugin pointed at a :class:`FaultProxy` in front of it. Commits wait at
    the proxy, so the read timeout is as long as the hang guard."""
    azure = backend_pool.get("azure")
    with FaultProxy(azure.details["blob_endpoint"]) as proxy:
        via = re.sub(r"BlobEndpoint=[^;]*", f"BlobEndpoint={proxy.url}", azure.details["connection_string"])
        with azure.activated(
            AZURE_STORAGE_CONNECTION_STRING=via, FLYTE_CHECKPOINT_AZURE_READ_TIMEOUT=str(HANG_GUARD)
        ):
            yield azure, proxy


def race_commits(
    proxy: FaultProxy, run: Callable[[str], None], names: tuple[str, str]
) -> list[tuple[str, BaseException | None]]:
    """Run ``run(name)`` for both names in threads while the proxy holds their first commit
    requests until both are held (both writers have staged every block), then lets one commit
    finish before releasing the other. Returns (name, what it raised) in the order they ended."""
    hold = proxy.hold(COMMIT, times=2)
    ended: queue.Queue[tuple[str, BaseException | None]] = queue.Queue()

    def target(name: str) -> None:
        try:
            run(name)
        except BaseException as exc:
            ended.put((name, exc))
        else:
            ended.put((name, None))

    threads = [threading.Thread(target=target, args=(n,)) for n in names]
    for t in threads:
        t.start()
    try:
        hold.wait_held(2)
        hold.release(1)
        order = [ended.get(timeout=HANG_GUARD)]
        hold.release(1)
        order.append(ended.get(timeout=HANG_GUARD))
    finally:
        hold.release_all()
        for t in threads:
            t.join(HANG_GUARD)
    assert not any(t.is_alive() for t in threads), "a writer hung"
    return order


def test_azure_block_list_race_fails_the_later_commit_and_keeps_the_earlier_whole(
    azure_via_proxy: tuple[Backend, FaultProxy],
):
    """Proves (Azure): two writers of one blob, each with every block staged, commit one after
    the other: the later commit raises ``TransientError`` saying another writer committed, and
    the blob is the earlier writer's payload, whole."""
    azure, proxy = azure_via_proxy
    uri = azure.fresh("race")
    payloads = {n: payload(n) for n in ("a", "b")}
    store = store_for(uri)

    def write(name: str) -> None:
        with store.open_write(uri) as w:
            w.write(payloads[name])

    (first, first_error), (_second, second_error) = race_commits(proxy, write, ("a", "b"))
    assert first_error is None
    assert isinstance(second_error, TransientError), second_error
    assert "another writer" in str(second_error)
    assert store.read_bytes(uri) == payloads[first]
    assert sum(COMMIT.decode() in r for r in proxy.requests) == 2


def test_azure_block_list_race_loser_save_is_retried_once_and_wins(
    azure_via_proxy: tuple[Backend, FaultProxy], tmp_path: Path
):
    """Proves (Azure): two ``save_sync`` of one URI whose commits race: both return normally;
    the loser's commit failed once and ``Checkpoint`` retried its save (exactly 3 commit
    requests reached the server, one retry logged, naming another writer), so the blob ends
    as the loser's payload, whole (its commit came last)."""
    azure, proxy = azure_via_proxy
    uri = azure.fresh("race")
    payloads = {n: payload(n) for n in ("a", "b")}
    policy = RetryPolicy(attempts=2, base_delay=0, max_delay=0, total_timeout=HANG_GUARD)

    # Saves to one URI from one process run in call order (flyte_checkpoint.lifecycle.saveorder), so
    # this process races itself as two processes would: "b" names the blob by its abfs:// form.
    spelling = {"a": uri, "b": "abfs://" + uri.removeprefix("az://")}

    def save(name: str) -> None:
        fc.Checkpoint(spelling[name], retry=policy).save_sync(payloads[name])

    with ConflictCounter() as conflicts:
        (_winner, winner_error), (loser, loser_error) = race_commits(proxy, save, ("a", "b"))
    assert winner_error is None and loser_error is None, (winner_error, loser_error)
    assert conflicts.count == 1 and "another writer" in conflicts.messages[0], conflicts.messages
    assert sum(COMMIT.decode() in r for r in proxy.requests) == 3
    assert load_bytes(uri, tmp_path) == payloads[loser]
