"""Cancellation and ordering: a cancelled save never lands, saves commit in call order, and
``close()`` after a cancelled load returns at once.

Each test stops a transfer at a point the code reports (the spy store of tests/spystore.py
over the backend's store, with a gate as its hook: see gates.py),
cancels or calls there, then lets everything settle (the worker threads are joined) and
checks what the destination holds, how each upload ended, and that no thread or folder
is left. No outcome depends on the machine's speed.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.lifecycle import saveorder
from flyte_checkpoint.uri import scheme_of
from tests.reliability import backends
from tests.reliability.backends import Backend, s3_open_uploads
from tests.reliability.gates import HANG, Gate, cancel_then_close
from tests.reliability.trees import make_tree, snapshot
from tests.spystore import spying

backend = backends.backend
backend_pool = backends.backend_pool


def pipeline_threads() -> list[threading.Thread]:
    """Threads of this project's pipelines and of the plugins' per-transfer pools."""
    return [t for t in threading.enumerate() if t.name.startswith("fcp-")]


def assert_threads_end() -> None:
    for thread in pipeline_threads():
        thread.join(HANG)
        assert not thread.is_alive(), f"{thread.name} did not end"


def payload_at(uri: str, scratch: Path) -> bytes | None:
    with fc.Checkpoint(str(scratch / "unused"), uri) as cp:
        path = cp.load_sync()
        return None if path is None else path.read_bytes()


def test_a_cancelled_async_save_never_lands_after_a_later_one(backend: Backend, tmp_path: Path):
    """Proves (issue 14, item 3): ``save()`` cancelled while its upload is under way commits
    nothing (its writer is aborted, S3 leaves no multipart upload), and a save called after
    it commits last, though the cancelled one's thread was still writing when it was called."""
    real = backend.fresh("cancelled")
    tree = tmp_path / "tree"
    make_tree(tree, 1)
    gate = Gate(writes=2)

    async def main() -> None:
        with spying(scheme_of(real), gate.hook) as spy:
            dest = spy.uri_for(real)
            first = asyncio.create_task(fc.Checkpoint(dest).save(tree))
            await asyncio.to_thread(gate.wait_reached)  # its first bytes are in the store's writer
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            second = asyncio.create_task(fc.Checkpoint(dest).save(b"epoch-2"))
            gate.release.set()  # the cancelled save's writer goes on from where it was held
            await second
            assert saveorder.waiting(dest) == 0

    asyncio.run(main())  # returns once the worker threads have ended
    assert_threads_end()
    assert gate.endings == ["abort", "write_bytes"], gate.endings  # the tree's writer, then epoch-2
    assert payload_at(real, tmp_path) == b"epoch-2"
    if backend.name == "s3":
        assert s3_open_uploads(backend, real) == []


def test_saves_from_threads_commit_in_the_order_they_were_called(backend: Backend, tmp_path: Path):
    """Proves: with one save held mid-upload, a save called after it by another thread and
    another ``Checkpoint`` waits its turn and commits after it, so the later one is what stays."""
    real = backend.fresh("ordered")
    tree = tmp_path / "tree"
    make_tree(tree, 1)
    gate = Gate(writes=2)
    errors: list[BaseException] = []

    def run(dest: str, data: object) -> None:
        try:
            fc.Checkpoint(dest).save_sync(data)  # type: ignore[arg-type]
        except BaseException as exc:
            errors.append(exc)

    with spying(scheme_of(real), gate.hook) as spy:
        dest = spy.uri_for(real)
        older = threading.Thread(target=run, args=(dest, tree))
        older.start()
        gate.wait_reached()
        newer = threading.Thread(target=run, args=(dest, b"newer"))
        newer.start()
        # Let the held save go once the newer one got as far as it can meanwhile: in line
        # behind it (the line counts both), or, were there no line, committed.
        settled = threading.Event()
        for _ in range(int(HANG * 100)):
            if saveorder.waiting(dest) == 2 or gate.endings:
                settled.set()
                break
            settled.wait(0.01)
        assert settled.is_set(), "the newer save neither joined the destination's line nor ended"
        gate.release.set()
        older.join(HANG)
        newer.join(HANG)
    assert not older.is_alive() and not newer.is_alive() and not errors, errors
    assert gate.endings == ["commit", "write_bytes"], gate.endings
    assert payload_at(real, tmp_path) == b"newer"


def test_close_after_a_cancelled_load_returns_while_the_download_is_held(backend: Backend, tmp_path: Path):
    """Proves: ``close()`` after cancelling ``load()`` returns without waiting for the rest of
    the download (held at the gate until ``close()`` has returned), and once the download
    has stopped its half-restored staging folder and the workspace are gone; the checkpoint
    then loads again normally."""
    real = backend.fresh("source")
    tree = tmp_path / "tree"
    want = make_tree(tree, 1)
    fc.Checkpoint(real).save_sync(tree)
    gate = Gate(reads=2)
    watchdog = threading.Timer(HANG, gate.release.set)  # only a hang guard: a hang fails below
    closed_before_release: list[bool] = []
    roots: list[Path] = []

    async def main() -> None:
        with spying(scheme_of(real), gate.hook) as spy:
            cp = fc.Checkpoint(str(tmp_path / "unused"), spy.uri_for(real))
            roots.append(cp.path.parent)
            load = asyncio.create_task(cp.load())
            await asyncio.to_thread(gate.wait_reached)  # the first chunk is restoring
            closed_before_release.append(await cancel_then_close(load, cp, gate, watchdog))

    try:
        asyncio.run(main())  # returns once the worker threads have ended
    finally:
        watchdog.cancel()
    assert closed_before_release == [True], "close() waited for the cancelled download"
    assert_threads_end()
    assert not roots[0].exists(), f"the closed workspace {roots[0]} (with its staging folder) remains"
    with fc.Checkpoint(str(tmp_path / "unused"), real) as cp:
        path = cp.load_sync()
        assert path is not None and path.parent != roots[0]
        assert snapshot(path) == want
