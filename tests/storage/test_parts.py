"""The kit's PartWriter: bounded parts in flight, the caller's buffer never kept, one request for
a small object, failures and aborts that cancel after the running parts, files read by pread."""

from __future__ import annotations

import os
import random
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from flyte_checkpoint.errors import OperationCancelledError, SourceChangedError, StoreError, TransientError
from flyte_checkpoint.storage.kit import PartWriter, StorePool, part_size_for
from flyte_checkpoint.util.cancellation import Scope, using

HANG_GUARD = 60.0  # seconds; only ever reached by a hang
P = 1000  # part size of every test
URI = "s3://KEY:SECRET@bucket/ckpt"
SHOWN = "s3://<redacted>@bucket/ckpt"


def blob(n: int) -> bytes:
    return random.Random(n).randbytes(n)


class Recorder(PartWriter):
    """A backend that records what the hooks are given; ``on_part(number)`` runs inside each send."""

    def __init__(
        self, pool: StorePool, *, on_part: Callable[[int], None] = lambda number: None, **kw: Any
    ) -> None:
        kw.setdefault("part_size", P)
        kw.setdefault("max_concurrency", 3)
        kw.setdefault("double_every", 1000)
        kw.setdefault("max_parts", 10_000)
        kw.setdefault("max_part_size", 1 << 30)
        super().__init__(URI, pool=pool, **kw)
        self.on_part = on_part
        self.lock = threading.Lock()
        self.events: list[tuple[str, Any]] = []
        self.parts: dict[int, bytes | bytearray] = {}  # number -> the very object the hook was given
        self.order: list[int] = []  # part numbers in the order their sends began
        self.running = 0
        self.max_running = 0
        self.running_at_cancel: list[int] = []
        self.fail_complete: BaseException | None = None

    def _put_whole(self, data):
        self.events.append(("put_whole", data))

    def _start(self):
        self.events.append(("start", None))

    def _send_part(self, number, data):
        with self.lock:
            self.order.append(number)
            self.parts[number] = data
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        try:
            self.on_part(number)
            return f"etag-{number}"
        finally:
            with self.lock:
                self.running -= 1

    def _complete(self, results, tail):
        if self.fail_complete is not None:
            raise self.fail_complete
        self.events.append(("complete", (results, None if tail is None else bytes(tail))))

    def _cancel(self):
        with self.lock:
            self.running_at_cancel.append(self.running)
        self.events.append(("cancel", None))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]

    def sent(self) -> bytes:
        return b"".join(bytes(self.parts[n]) for n in sorted(self.parts))


@pytest.fixture
def pool():
    pool = StorePool("parts", 6)
    yield pool
    pool.close()


def drain(pool: StorePool, free: int) -> None:
    """Return once every call submitted to ``pool`` before has started, given that ``free`` of
    its workers are not busy with a call that waits on the test (first in, first out)."""
    barrier = threading.Barrier(free + 1, timeout=HANG_GUARD)
    calls = [pool.submit(barrier.wait) for _ in range(free)]
    barrier.wait()
    for call in calls:
        call.result(HANG_GUARD)


class Gate:
    """Parts wait here until released; ``reached(n)`` once n of them are waiting."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.cond = threading.Condition()
        self.waiting = 0

    def __call__(self, number: int) -> None:
        with self.cond:
            self.waiting += 1
            self.cond.notify_all()
        assert self.release.wait(HANG_GUARD)

    def reached(self, n: int) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.waiting >= n, HANG_GUARD)


def test_part_size_for_doubles_every_n_parts_up_to_the_maximum():
    sizes = [part_size_for(n, 8, double_every=1000, maximum=40) for n in (1, 1000, 1001, 2001, 3001, 9000)]
    assert sizes == [8, 8, 16, 32, 40, 40]
    with pytest.raises(ValueError, match="numbered from 1"):
        part_size_for(0, 8, double_every=1000, maximum=40)


def test_no_more_than_max_concurrency_parts_are_in_flight(pool):
    gate = Gate()
    writer = Recorder(pool, on_part=gate, max_concurrency=3)
    data = blob(10 * P + 1)
    done = threading.Event()

    def write() -> None:
        for i in range(0, len(data), 250):
            writer.write(data[i : i + 250])
        writer.close()
        done.set()

    thread = threading.Thread(target=write)
    thread.start()
    try:
        gate.reached(3)
        drain(pool, free=3)  # a fourth part, had it been submitted, has started by now
        assert writer.running == 3 and writer.peak_in_flight == 3
        assert not done.is_set()
    finally:
        gate.release.set()
        thread.join(HANG_GUARD)
    assert done.is_set()
    assert writer.max_running == 3 and writer.peak_in_flight == 3
    assert writer.sent() == data
    assert writer.kinds() == ["start", "complete"]
    results, tail = writer.events[1][1]
    assert results == [f"etag-{n}" for n in range(1, 12)] and tail is None


def test_the_callers_buffer_may_be_reused_once_write_returns(pool):
    written = threading.Event()

    def late(number: int) -> None:  # parts are looked at only after every write has returned
        assert written.wait(HANG_GUARD)

    writer = Recorder(pool, on_part=late, max_concurrency=20)
    data = blob(7 * P + 321)
    buffer = bytearray(777)
    sender = threading.Thread(target=lambda: writer.close())
    for i in range(0, len(data), len(buffer)):
        chunk = data[i : i + len(buffer)]
        buffer[: len(chunk)] = chunk
        writer.write(memoryview(buffer)[: len(chunk)])
        buffer[:] = b"\xee" * len(buffer)  # the caller reuses its buffer
    written.set()
    sender.start()
    sender.join(HANG_GUARD)
    assert writer.sent() == data
    assert all(part is not buffer for part in writer.parts.values())


def test_the_callers_buffer_is_not_kept_for_a_single_request_either(pool):
    writer = Recorder(pool)
    buffer = bytearray(b"abc")
    writer.write(buffer)
    buffer[:] = b"xyz"
    writer.close()
    assert writer.events == [("put_whole", b"abc")]


@pytest.mark.parametrize("size", [0, 1, P - 1, P])
def test_an_object_of_at_most_one_part_is_one_put_whole(pool, size):
    writer = Recorder(pool)
    data = blob(size)
    for i in range(0, size, 100):
        writer.write(data[i : i + 100])
    writer.close()
    assert writer.kinds() == ["put_whole"] and bytes(writer.events[0][1]) == data
    assert writer.parts == {}


def test_one_byte_more_than_a_part_is_a_multipart_upload(pool):
    writer = Recorder(pool)
    data = blob(P + 1)
    writer.write(data)
    writer.close()
    assert writer.kinds() == ["start", "complete"] and writer.sent() == data
    assert sorted(writer.parts) == [1, 2]


def test_a_small_object_costs_its_own_size_not_a_part(pool):
    writer = Recorder(pool, part_size=64 * 1024 * 1024)
    for _ in range(10):
        writer.write(b"0123456789")
    writer.close()
    kind, data = writer.events[0]
    assert kind == "put_whole" and data == b"0123456789" * 10
    assert sys.getsizeof(data) < 1024  # allocated, not just used: the buffer grew by doubling


def test_a_parts_error_is_raised_at_the_next_write_after_the_running_parts_end(pool):
    failed = TransientError("part 2 failed")

    def on_part(number: int) -> None:
        if number == 2:
            raise failed

    writer = Recorder(pool, on_part=on_part, max_concurrency=1)  # part 3 waits for part 2's end
    writer.write(blob(2 * P + 1))  # parts 1 and 2 sent
    with pytest.raises(TransientError) as caught:
        writer.write(blob(P))  # sending part 3 finds part 2's error
    assert caught.value is failed
    assert writer.running_at_cancel == [0]
    assert sorted(writer.parts) == [1, 2]
    writer.abort()
    assert writer.kinds() == ["start", "cancel"]


def test_a_parts_error_is_raised_at_close_and_nothing_is_committed(pool):
    failed, written = TransientError("part 1 failed"), threading.Event()

    def on_part(number: int) -> None:
        if number == 1:
            assert written.wait(HANG_GUARD)  # fails once every write has returned
            raise failed

    writer = Recorder(pool, on_part=on_part, max_concurrency=4)
    writer.write(blob(3 * P + 1))
    written.set()
    with pytest.raises(TransientError) as caught:
        writer.close()
    assert caught.value is failed
    assert "complete" not in writer.kinds() and writer.kinds().count("cancel") == 1
    assert writer.running_at_cancel == [0]


def test_a_failed_commit_cancels_the_upload(pool):
    writer = Recorder(pool)
    writer.fail_complete = StoreError("commit refused")
    writer.write(blob(2 * P + 1))
    with pytest.raises(StoreError, match="commit refused"):
        writer.close()
    assert writer.kinds() == ["start", "cancel"]


def test_a_failed_single_request_is_raised_with_nothing_to_cancel(pool):
    class Refused(Recorder):
        def _put_whole(self, data):
            raise TransientError("put refused")

    writer = Refused(pool)
    writer.write(b"small")
    with pytest.raises(TransientError, match="put refused"):
        writer.close()
    assert writer.kinds() == []


def test_abort_drops_queued_parts_waits_for_the_running_one_then_cancels():
    pool = StorePool("parts-abort", 1)  # part 1 runs, parts 2 and 3 wait in the queue
    started, cancelled = threading.Event(), threading.Event()

    def on_part(number: int) -> None:
        started.set()
        # An abort that does not wait cancels meanwhile: ``cancelled`` is then set here.
        assert not cancelled.wait(0.3), "_cancel ran while a part was running"

    class Watched(Recorder):
        def _cancel(self):
            super()._cancel()
            cancelled.set()

    try:
        writer = Watched(pool, on_part=on_part, max_concurrency=3)
        writer.write(blob(3 * P + 1))
        assert started.wait(HANG_GUARD)
        writer.abort()
        assert writer.running_at_cancel == [0]
        assert sorted(writer.parts) == [1], "a queued part was sent after abort"
        assert writer.kinds() == ["start", "cancel"]
        writer.abort()
        writer.close()
        assert writer.kinds() == ["start", "cancel"]  # abort and cancel happen once
    finally:
        pool.close()


def test_too_many_parts_is_a_store_error_naming_the_object(pool):
    writer = Recorder(pool, max_parts=2)
    writer.write(blob(3 * P))  # parts 1 and 2 sent, the third buffered
    with pytest.raises(StoreError) as caught:
        writer.write(b"x")
    assert str(caught.value) == f"{SHOWN} needs more than 2 parts: raise the store's part_size"
    writer.abort()


def test_ordered_sends_one_part_at_a_time_in_order_and_gives_the_tail_to_complete(pool):
    writer = Recorder(pool, ordered=True, max_concurrency=8)
    data = blob(9 * P + 50)
    for i in range(0, len(data), 333):
        writer.write(data[i : i + 333])
    writer.close()
    assert writer.max_running == 1 and writer.peak_in_flight == 1
    assert writer.order == list(range(1, 10))
    kind, (results, tail) = writer.events[-1]
    assert kind == "complete" and results == [f"etag-{n}" for n in range(1, 10)]
    assert writer.sent() + tail == data and len(tail) == 50


def test_ordered_keeps_a_whole_last_part_as_the_tail(pool):
    writer = Recorder(pool, ordered=True)
    data = blob(3 * P)
    writer.write(data)
    writer.close()
    _, (results, tail) = writer.events[-1]
    assert len(results) == 2 and tail == data[2 * P :]


def test_a_cancelled_save_sends_no_more_parts_and_never_commits(pool):
    scope = Scope("save")
    with using(scope):
        writer = Recorder(pool)
        writer.write(blob(P + 1))
        scope.cancel()
        with pytest.raises(OperationCancelledError):
            writer.write(blob(P))
        with pytest.raises(OperationCancelledError):
            writer.close()
    assert "complete" not in writer.kinds() and writer.kinds()[-1] == "cancel"


def test_a_save_cancelled_while_its_last_part_is_sent_never_commits(pool):
    """close() checks the save at its start; a cancel that lands while the last parts are still
    being sent must stop the commit too, and the upload is cancelled."""
    scope = Scope("save")
    with using(scope):
        writer = Recorder(pool, on_part=lambda number: number == 3 and scope.cancel())
        writer.write(blob(2 * P + 1))  # parts 1 and 2 are full; part 3 is sent by close()
        with pytest.raises(OperationCancelledError):
            writer.close()
    assert writer.order and max(writer.order) == 3  # the cancel came from the last part's send
    assert "complete" not in writer.kinds() and writer.kinds()[-1] == "cancel"


# -- upload_file ------------------------------------------------------------------------------


@pytest.fixture
def preads(monkeypatch):
    """The thread of every os.pread, and a hook run after each."""
    threads: list[str] = []
    after: list[Callable[[int], None]] = []
    real = os.pread

    def pread(fd: int, n: int, offset: int) -> bytes:
        threads.append(threading.current_thread().name)
        data = real(fd, n, offset)
        for hook in after:
            hook(offset)
        return data

    monkeypatch.setattr(os, "pread", pread)
    return threads, after


def test_upload_file_reads_parts_in_pool_threads_with_a_bounded_number_in_memory(pool, tmp_path, preads):
    threads, _ = preads
    gate = Gate()
    data = blob(10 * P + 7)
    (tmp_path / "f").write_bytes(data)
    writer = Recorder(pool, on_part=gate, max_concurrency=3)
    uploader = threading.Thread(target=writer.upload_file, args=(tmp_path / "f",))
    uploader.start()
    try:
        gate.reached(3)
        drain(pool, free=3)
        assert len(threads) == 3, "a part was read while three were held"
    finally:
        gate.release.set()
        uploader.join(HANG_GUARD)
    assert writer.closed and writer.kinds() == ["start", "complete"]
    assert writer.sent() == data and writer.peak_in_flight == 3 and writer.bytes_written == len(data)
    assert len(threads) == 11 and all(t.startswith("flyte-checkpoint-parts-") for t in threads)


@pytest.mark.parametrize("size", [0, 10, P])
def test_upload_file_sends_a_small_file_in_one_put_whole(pool, tmp_path, size):
    data = blob(size)
    (tmp_path / "f").write_bytes(data)
    writer = Recorder(pool)
    writer.upload_file(tmp_path / "f")
    assert writer.kinds() == ["put_whole"] and bytes(writer.events[0][1]) == data


def test_upload_file_ordered_reads_the_tail_for_complete(pool, tmp_path):
    data = blob(4 * P + 3)
    (tmp_path / "f").write_bytes(data)
    writer = Recorder(pool, ordered=True)
    writer.upload_file(tmp_path / "f")
    _, (results, tail) = writer.events[-1]
    assert len(results) == 4 and writer.sent() + tail == data and writer.max_running == 1


@pytest.mark.parametrize("size", [P // 2, 5 * P])
def test_upload_file_refuses_a_file_that_changed_while_it_was_read(pool, tmp_path, preads, size):
    _, after = preads
    path = tmp_path / "f"
    path.write_bytes(blob(size))
    after.append(lambda offset: path.open("ab").write(b"more") if offset == 0 else None)
    writer = Recorder(pool)
    with pytest.raises(SourceChangedError, match="changed while it was being saved"):
        writer.upload_file(path)
    assert "complete" not in writer.kinds() and "put_whole" not in writer.kinds()
    assert writer.closed


def test_upload_file_stops_when_the_save_is_cancelled(pool, tmp_path):
    (tmp_path / "f").write_bytes(blob(6 * P))
    scope = Scope("save")
    writer_box: list[Recorder] = []

    def on_part(number: int) -> None:
        if number == 1:
            scope.cancel()

    with using(scope):
        writer = Recorder(pool, on_part=on_part, max_concurrency=1)
        writer_box.append(writer)
        with pytest.raises(OperationCancelledError):
            writer.upload_file(tmp_path / "f")
    assert "complete" not in writer.kinds() and writer.kinds()[-1] == "cancel"
    assert len(writer.parts) < 6


def test_upload_file_needs_a_new_writer(pool, tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    writer = Recorder(pool)
    writer.write(b"already")
    with pytest.raises(ValueError, match=f"upload_file needs a new writer for {SHOWN}"):
        writer.upload_file(tmp_path / "f")
