"""``await load()`` and ``await save()`` never block the event loop.

Shown without any clock: every store call of the transfer (each write, read, stat, commit)
goes through a store that makes the call wait until a coroutine running on the event loop
answers it. A transfer that blocked the loop could not get a single answer (the test's hang
guard then reports it), and one that ran on the loop's own thread is caught at its first
store call. So each answered call is an event-loop turn taken in the middle of the transfer.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from tests.spystore import spying

SIZE = 16 * 1024 * 1024
#: How long a store call waits for the loop's answer before the test counts it as blocked:
#: a hang guard (a free loop answers at once; a blocked one never does).
HANG_GUARD = 120.0


class LoopGate:
    """A store hook: each call waits until the :meth:`serve` coroutine, running on the event
    loop, has answered it."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()
        self.queue: asyncio.Queue[threading.Event] = asyncio.Queue()
        self.ops: list[str] = []
        self.answered = 0
        self.on_loop_thread: list[str] = []
        self.unanswered: list[str] = []

    def __call__(self, op: str, uri: str) -> None:
        self.ops.append(op)
        if threading.get_ident() == self.loop_thread:
            self.on_loop_thread.append(op)  # the transfer runs on the loop itself
            return
        if self.unanswered:
            return  # the loop is known to be blocked: do not wait again
        answer = threading.Event()
        self.loop.call_soon_threadsafe(self.queue.put_nowait, answer)
        if not answer.wait(HANG_GUARD):
            self.unanswered.append(op)

    async def serve(self) -> None:
        while True:
            answer = await self.queue.get()
            self.answered += 1
            answer.set()

    async def run(self, transfer):
        """Await ``transfer`` while :meth:`serve` answers; return its result."""
        server = asyncio.create_task(self.serve())
        try:
            return await transfer
        finally:
            server.cancel()

    def check(self, what: str, at_least: int) -> None:
        assert not self.on_loop_thread, f"{what} made store calls on the loop's thread: {self.on_loop_thread}"
        assert not self.unanswered, f"{what} blocked the event loop: {self.unanswered} never answered"
        assert len(self.ops) >= at_least, f"{what} made too few store calls to show anything: {self.ops}"
        assert self.answered == len(self.ops), (self.answered, self.ops)


def _data(kind: str, tmp_path: Path) -> tuple[object, bytes]:
    """What to save for ``kind``, and the bytes ``load()`` must give back."""
    blob = os.urandom(SIZE)
    if kind == "bytes":
        return blob, blob
    if kind == "file":
        (tmp_path / "weights.bin").write_bytes(blob)
        return tmp_path / "weights.bin", blob
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "weights.bin").write_bytes(blob)
    return tmp_path / "tree", blob


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["directory", "file", "bytes"])
def test_save_and_load_answer_the_event_loop_at_every_store_call(tmp_path: Path, kind: str):
    """Proves: while ``await save(...)`` and ``await load()`` run, the event loop keeps running
    other coroutines: each of the transfer's store calls (at least 3 for a directory save of
    16 MiB, the one upload call of a file or bytes, 5 for a load) went on only after a
    coroutine on the loop answered it, from a thread other than the loop's."""
    data, expected = _data(kind, tmp_path)

    async def main() -> tuple[LoopGate, LoopGate, bytes]:
        with spying("file") as spy:
            dest = spy.uri_for(str(tmp_path / "obj"))
            spy.hook = saving = LoopGate()
            await saving.run(fc.Checkpoint(dest).save(data))
            spy.hook = loading = LoopGate()
            with fc.Checkpoint(str(tmp_path / "next"), dest) as nxt:
                path = await loading.run(nxt.load())
                got = path / "weights.bin" if kind == "directory" else path
                return saving, loading, got.read_bytes()

    saving, loading, got = asyncio.run(main())
    assert got == expected
    # a save: open_write, writes, commit (write_bytes or upload_file for bytes and files);
    # a load: stat, open_read, a read per 4 MiB and one at the end
    saving.check(f"save of {kind}", at_least=3 if kind == "directory" else 1)
    loading.check(f"load of {kind}", at_least=5)


def test_async_bytes_round_trip(tmp_path):
    async def main():
        cp = fc.Checkpoint(str(tmp_path / "a"))
        await cp.save(b"async")
        nxt = fc.Checkpoint(str(tmp_path / "b"), str(tmp_path / "a"))
        path = await nxt.load()
        return path.read_bytes()

    assert asyncio.run(main()) == b"async"
