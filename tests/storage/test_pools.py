"""The kit's StorePool: bounded workers named for the backend, closed cleanly, rebuilt after a fork."""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import CancelledError

import pytest

from flyte_checkpoint.storage.kit.pools import StorePool

HANG_GUARD = 60.0  # seconds; only ever reached by a hang


def pool_threads(backend: str) -> list[threading.Thread]:
    # Before its initializer runs a thread is still called "<prefix>_0": count those too.
    return [t for t in threading.enumerate() if t.name.startswith(f"flyte-checkpoint-{backend}")]


def test_threads_are_named_for_the_backend_counting_from_one_across_its_pools():
    first, second = StorePool("names", 2), StorePool("names", 1)
    both = threading.Barrier(2, timeout=HANG_GUARD)  # both threads of the first pool at once

    def name_when_both_run() -> str:
        both.wait()
        return threading.current_thread().name

    try:
        names = {f.result(HANG_GUARD) for f in [first.submit(name_when_both_run) for _ in range(2)]}
        assert names == {"flyte-checkpoint-names-1", "flyte-checkpoint-names-2"}
        assert (
            second.submit(lambda: threading.current_thread().name).result(HANG_GUARD)
            == "flyte-checkpoint-names-3"
        )
    finally:
        first.close()
        second.close()


def test_no_more_threads_than_workers():
    pool, release = StorePool("bound", 2), threading.Event()
    try:
        futures = [pool.submit(release.wait, HANG_GUARD) for _ in range(6)]
        assert len(pool_threads("bound")) == 2  # ThreadPoolExecutor starts its threads in submit
    finally:
        release.set()
        for f in futures:
            f.result(HANG_GUARD)
        pool.close()


def test_close_cancels_queued_calls_waits_for_running_ones_and_ends_the_threads():
    pool = StorePool("close", 1)
    started, release, cancelled = threading.Event(), threading.Event(), threading.Event()

    def running() -> str:
        started.set()
        release.wait(HANG_GUARD)
        return "finished"

    first = pool.submit(running)
    assert started.wait(HANG_GUARD)
    queued = pool.submit(lambda: "never")
    queued.add_done_callback(lambda f: cancelled.set())
    closer = threading.Thread(target=pool.close)
    closer.start()
    assert cancelled.wait(HANG_GUARD) and queued.cancelled()
    assert not first.done()  # close is waiting for it
    release.set()
    closer.join(HANG_GUARD)
    assert not closer.is_alive() and first.result() == "finished"
    assert pool_threads("close") == []
    with pytest.raises(CancelledError):
        queued.result()
    pool.close()  # idempotent
    assert pool.submit(lambda: 7).result(HANG_GUARD) == 7  # a later submit builds a new executor
    pool.close()


def _child(pool: StorePool, conn) -> None:
    name = pool.submit(lambda: threading.current_thread().name).result(HANG_GUARD)
    pool.close()
    conn.send(name)


def test_a_forked_child_builds_its_own_pool_and_leaves_the_parents_alone():
    pool = StorePool("fork", 2)
    try:
        parent_names = {
            pool.submit(lambda: threading.current_thread().name).result(HANG_GUARD) for _ in range(3)
        }
        assert parent_names <= {"flyte-checkpoint-fork-1", "flyte-checkpoint-fork-2"}
        receive, send = multiprocessing.get_context("fork").Pipe(duplex=False)
        child = multiprocessing.get_context("fork").Process(target=_child, args=(pool, send))
        child.start()
        assert receive.poll(HANG_GUARD), "the forked child did not report"
        assert receive.recv() == "flyte-checkpoint-fork-1"  # a new thread, numbered afresh in the child
        child.join(HANG_GUARD)
        assert child.exitcode == 0
        executor = pool.executor
        assert pool.submit(lambda: threading.current_thread().name).result(HANG_GUARD) in parent_names | {
            "flyte-checkpoint-fork-2"
        }
        assert pool.executor is executor  # the child's close did not touch the parent's
    finally:
        pool.close()


def test_a_pool_needs_a_worker():
    with pytest.raises(ValueError, match="at least one worker"):
        StorePool("none", 0)
