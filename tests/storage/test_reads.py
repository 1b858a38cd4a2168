"""The kit's RangedReader: bounded read-ahead, bytes in order, short ranges and damage refused."""

from __future__ import annotations

import io
import itertools
import os
import random
import threading
from collections.abc import Callable

import pytest

from conftest import require
from flyte_checkpoint.errors import (
    CheckpointError,
    CorruptCheckpointError,
    NotFoundError,
    OperationCancelledError,
    StoreError,
    TransientError,
)
from flyte_checkpoint.storage.kit import RangedReader, StorePool, digest
from flyte_checkpoint.util.cancellation import Scope, using

HANG_GUARD = 60.0  # seconds; only ever reached by a hang
R = 1000  # range size of every test
URI = "s3://KEY:SECRET@bucket/ckpt"
SHOWN = "s3://<redacted>@bucket/ckpt"


class Source:
    """An object of ``size`` bytes and an instrumented ``fetch`` that records every call."""

    def __init__(
        self,
        size: int,
        *,
        short_at: int | None = None,
        fail_at: tuple[int, BaseException] | None = None,
        before: Callable[[int], None] = lambda offset: None,
        after: Callable[[int], None] = lambda offset: None,
    ) -> None:
        self.data = random.Random(size).randbytes(size)
        self.short_at = short_at
        self.fail_at = fail_at
        self.before, self.after = before, after
        self.lock = threading.Lock()
        self.calls: list[tuple[int, int]] = []  # (offset, length), in call order
        self.buffers: dict[int, object] = {}  # offset -> the buffer fetch was given

    def fetch(self, offset: int, view: memoryview) -> int:
        with self.lock:
            self.calls.append((offset, len(view)))
            self.buffers[offset] = view.obj
        self.before(offset)
        if self.fail_at is not None and self.fail_at[0] == offset:
            raise self.fail_at[1]
        n = min(len(view), len(self.data) - offset)
        if offset == self.short_at:
            n //= 2
        view[:n] = self.data[offset : offset + n]
        self.after(offset)
        return n

    def fetched_end(self) -> int:
        with self.lock:
            return max((offset + n for offset, n in self.calls), default=0)


def mapped(exc: BaseException) -> CheckpointError:
    return StoreError(f"mapped: {exc}")


@pytest.fixture
def pool():
    pool = StorePool("reads", 5)
    yield pool
    pool.close()


def drain(pool: StorePool) -> None:
    """Return once every call submitted to ``pool`` before this one has ended.

    The pool's queue is first in, first out: once each of its workers runs one of these barrier
    calls, every earlier call has been taken and finished.
    """
    barrier = threading.Barrier(pool.workers + 1, timeout=HANG_GUARD)
    calls = [pool.submit(barrier.wait) for _ in range(pool.workers)]
    barrier.wait()
    for call in calls:
        call.result(HANG_GUARD)


def reader_for(src: Source, pool: StorePool, concurrency: int = 3, **kw) -> RangedReader:
    kw.setdefault("on_error", mapped)
    return RangedReader(
        URI, size=len(src.data), fetch=src.fetch, range_size=R, concurrency=concurrency, pool=pool, **kw
    )


@pytest.mark.parametrize("head", ["none", "bytes", "stream"])
def test_bytes_held_never_exceed_range_size_times_concurrency_plus_one(pool, head):
    concurrency = 3
    src = Source(10 * R + 123)
    heads = {"none": None, "bytes": src.data[:R], "stream": io.BytesIO(src.data)}
    reader = reader_for(src, pool, concurrency, head=heads[head])
    head_end = 0 if head == "none" else R

    def held() -> int:
        """Bytes of the ranges fetched from the start of the one being read, the pool at rest."""
        drain(pool)
        pos = reader.tell()
        current = (pos - 1) // R * R if pos else 0
        return max(src.fetched_end(), head_end) - current

    peak = held()
    out = bytearray()
    for n in itertools.cycle([333, 1000, 1, 2500, 777]):
        piece = reader.read1(n) if n % 2 else reader.read(n)
        if not piece:
            break
        out += piece
        now = held()
        assert now <= R * (concurrency + 1), f"{now} bytes held at {reader.tell()}"
        if head == "stream" and reader.tell() < R:  # the open stream takes one of the places
            assert now <= R * concurrency, f"{now} bytes held with the head stream open"
        peak = max(peak, now)
    assert out == src.data
    assert peak == R * (concurrency + 1)  # the read-ahead does run to its bound
    assert sorted(src.calls) == [(o, min(R, len(src.data) - o)) for o in range(head_end, len(src.data), R)]
    reader.close()


def test_ranges_come_out_in_order_whatever_order_they_arrive_in(pool):
    others_done, count, lock = threading.Event(), [0], threading.Lock()

    def before(offset: int) -> None:
        if offset == 0:  # the first range arrives last
            assert others_done.wait(HANG_GUARD)

    def after(offset: int) -> None:
        with lock:
            count[0] += offset != 0
            if count[0] == 3:
                others_done.set()

    src = Source(6 * R, before=before, after=after)
    with reader_for(src, pool, concurrency=4) as reader:
        assert reader.read() == src.data
    assert others_done.is_set()  # ranges 1-3 had arrived before range 0


def test_a_short_range_is_a_transient_error_and_stays_one(pool):
    src = Source(5 * R, short_at=2 * R)
    reader = reader_for(src, pool)
    assert reader.read(2 * R) == src.data[: 2 * R]
    with pytest.raises(TransientError) as caught:
        reader.read(10)
    message = str(caught.value)
    assert f"a read of {SHOWN} stopped at byte 2500 instead of 3000" in message
    assert "read it again" in message and "SECRET" not in message
    with pytest.raises(TransientError):
        reader.read(10)
    reader.close()


def test_a_head_stream_that_ends_early_is_a_transient_error(pool):
    src = Source(3 * R)
    reader = reader_for(src, pool, head=io.BytesIO(src.data[: R // 2]))
    with pytest.raises(TransientError, match=f"ended after 500 of the 3000 bytes of {SHOWN}; read it again"):
        reader.read()
    reader.close()


def test_a_head_of_bytes_is_the_first_range_and_a_stream_is_read_for_one_range_then_closed(pool):
    src = Source(3 * R + 7)
    with reader_for(src, pool, head=src.data[:10]) as reader:
        assert reader.read() == src.data
    assert sorted(o for o, _ in src.calls) == [10, 10 + R, 10 + 2 * R]
    src.calls.clear()
    stream = io.BytesIO(src.data)
    with reader_for(src, pool, head=stream) as reader:
        assert reader.read(R + 1) == src.data[: R + 1]
        assert stream.closed
        assert reader.read() == src.data[R + 1 :]
    assert sorted(o for o, _ in src.calls) == [R, 2 * R, 3 * R]


def crc32_of(data: bytes) -> str:
    d = digest("CRC32")
    d.update(data)
    return d.value()


def test_the_digest_is_checked_at_the_end(pool):
    src = Source(4 * R + 1)
    with reader_for(src, pool, digest=digest("CRC32"), expected=crc32_of(src.data)) as reader:
        assert reader.read() == src.data
    wrong = crc32_of(b"other")
    with reader_for(src, pool, digest=digest("CRC32"), expected=wrong) as reader:
        assert reader.read(4 * R) == src.data[: 4 * R]
        with pytest.raises(CorruptCheckpointError) as caught:
            reader.read()
        with pytest.raises(CorruptCheckpointError):
            reader.read()  # never an empty read that looks like a clean end
    message = str(caught.value)
    assert f"{SHOWN} is damaged: it is stored with the CRC32 {wrong}" in message
    assert "delete it or save a new one" in message and "SECRET" not in message


def test_on_mismatch_may_give_the_error_to_raise_instead(pool):
    src = Source(2 * R)
    replaced = TransientError("the object was replaced while it was read; read it again")
    first = reader_for(src, pool, digest=digest("MD5"), expected="x", on_mismatch=lambda: replaced)
    with first, pytest.raises(TransientError) as caught:
        first.read()
    assert caught.value is replaced
    second = reader_for(src, pool, digest=digest("MD5"), expected="x", on_mismatch=lambda: None)
    with second, pytest.raises(CorruptCheckpointError):
        second.read()


def test_fetch_errors_go_through_on_error_and_the_projects_own_pass_unchanged(pool):
    src = Source(3 * R, fail_at=(R, RuntimeError("sdk said no")))
    with reader_for(src, pool) as reader, pytest.raises(StoreError, match="mapped: sdk said no") as caught:
        reader.read()
    assert isinstance(caught.value.__cause__, RuntimeError)
    gone = NotFoundError("gone")
    src = Source(3 * R, fail_at=(2 * R, gone))
    with reader_for(src, pool) as reader, pytest.raises(NotFoundError) as caught2:
        reader.read()
    assert caught2.value is gone


def test_close_cancels_queued_fetches_and_waits_for_the_running_one():
    pool = StorePool("reads-close", 1)  # one worker: range 0 runs, the next two wait in the queue
    started, returned, seen = threading.Event(), threading.Event(), []

    def before(offset: int) -> None:
        started.set()
        # A close that does not wait returns meanwhile: ``returned`` is then set here.
        seen.append(returned.wait(0.3))

    src = Source(5 * R, before=before)
    try:
        reader = reader_for(src, pool, concurrency=3)
        assert started.wait(HANG_GUARD)
        reader.close()
        returned.set()
        assert seen == [False], "close returned before the running fetch had ended"
        drain(pool)
        assert src.calls == [(0, R)], "a queued fetch ran after close"
        with pytest.raises(ValueError, match=f"read of a closed reader for {SHOWN}"):
            reader.read(1)
    finally:
        pool.close()


def test_read1_gives_a_view_of_the_range_buffer_without_copying(pool):
    src = Source(3 * R)
    with reader_for(src, pool) as reader:
        first = reader.read1(100)
        assert isinstance(first, memoryview) and first.obj is src.buffers[0]
        rest = reader.read1()
        assert rest.obj is src.buffers[0] and len(rest) == R - 100
        assert reader.read1(-1).obj is src.buffers[R]
        assert bytes(first) + bytes(rest) == src.data[:R]
    head = bytearray(src.data[:R])
    with reader_for(src, pool, head=head) as reader:
        assert reader.read1(10).obj is head


def test_reads_at_the_end_are_empty_and_an_empty_object_is_verified(pool):
    src = Source(2 * R + 5)
    with reader_for(src, pool) as reader:
        assert reader.size == 2 * R + 5
        assert reader.read(10 * R) == src.data
        assert reader.tell() == 2 * R + 5
        assert reader.read(10) == b"" and reader.read1(10) == b"" and reader.readinto(bytearray(4)) == 0
    empty = Source(0)
    with reader_for(empty, pool, digest=digest("CRC32"), expected=crc32_of(b"")) as reader:
        assert reader.read() == b"" and reader.read(5) == b""
    damaged = reader_for(empty, pool, digest=digest("CRC32"), expected=crc32_of(b"x"))
    with damaged, pytest.raises(CorruptCheckpointError):
        damaged.read()
    assert empty.calls == []


def test_a_cancelled_load_stops_at_the_next_range(pool):
    src = Source(3 * R)
    scope = Scope("load")
    with using(scope), reader_for(src, pool) as reader:
        assert reader.read(R) == src.data[:R]
        scope.cancel()
        with pytest.raises(OperationCancelledError):
            reader.read(1)


class Trickle(io.RawIOBase):
    """A head stream that gives at most ``step`` bytes per read, as a socket may."""

    def __init__(self, data: bytes, step: int) -> None:
        super().__init__()
        self.data, self.step, self.pos = data, step, 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        n = self.step if n is None or n < 0 else min(n, self.step)
        piece = self.data[self.pos : self.pos + n]
        self.pos += len(piece)
        return piece


@pytest.mark.parametrize("head", ["none", "bytes", "stream"])
def test_read_n_gives_exactly_n_bytes_across_ranges_and_a_short_read_only_at_the_end(pool, head):
    """The contract of every store's stream: callers take a short read for the end of the object."""
    src = Source(5 * R + 37)
    heads = {"none": None, "bytes": src.data[: R // 3], "stream": Trickle(src.data, 7)}
    sizes = itertools.cycle([R - 1, 1, 3 * R + 5, R, 2, R // 2 + 1])
    got, pos = [], 0
    with reader_for(src, pool, head=heads[head]) as reader:
        while piece := reader.read(n := next(sizes)):
            assert len(piece) == min(n, len(src.data) - pos), f"read({n}) at {pos} gave {len(piece)}"
            got.append(piece)
            pos += len(piece)
        assert reader.read(1) == b""
    assert b"".join(got) == src.data and pos == len(src.data)


@pytest.mark.parametrize("head", ["none", "stream"])
def test_readinto_fills_the_whole_buffer_across_ranges_until_the_end(pool, head):
    src = Source(4 * R + 1)
    heads = {"none": None, "stream": Trickle(src.data, 100)}
    out = bytearray()
    with reader_for(src, pool, head=heads[head]) as reader:
        buf = bytearray(R + R // 2)
        while n := reader.readinto(buf):
            assert n == min(len(buf), len(src.data) - len(out))
            out += buf[:n]
    assert out == src.data


def test_a_cut_download_raises_and_never_reads_as_a_short_end(pool):
    """A range cut short (the connection dropped mid-body) is an error at the read that needs it,
    never a short ``read(n)`` the caller would take for the end of the object."""
    src = Source(4 * R, short_at=3 * R)
    with reader_for(src, pool) as reader:
        assert reader.read(3 * R) == src.data[: 3 * R]
        with pytest.raises(TransientError, match="stopped at byte 3500 instead of 4000"):
            reader.read(R)
    head = Trickle(src.data[: R // 2], 64)  # the first GET's body ends before its range does
    with reader_for(src, pool, head=head) as reader, pytest.raises(TransientError, match="ended after 500"):
        reader.read(R)


def resident_bytes() -> int:
    """This process's resident memory now (Linux: /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_range_buffer_costs_memory_only_for_the_bytes_written_into_it(pool):
    """Buffers are not zeroed up front (a bytearray is, which touches all of it at once): a range
    costs memory as its download arrives, and goes back to the system once released."""
    require(os.path.exists("/proc/self/statm"), "resident memory is read from /proc (Linux)")
    big = 16 * 1024 * 1024
    written: list[int] = []

    def fetch(offset: int, view: memoryview) -> int:
        view[0] = 1  # one page of the range written
        written.append(offset)
        return len(view)

    before = resident_bytes()
    reader = RangedReader(
        URI, size=4 * big, fetch=fetch, range_size=big, concurrency=4, pool=pool, on_error=mapped
    )
    drain(pool)
    assert sorted(written) == [0, big, 2 * big, 3 * big]  # four ranges of 16 MiB are held
    grown = resident_bytes() - before
    reader.close()
    assert grown < big // 2, f"resident memory grew by {grown / 2**20:.0f} MiB for 4 pages written"
