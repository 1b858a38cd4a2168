"""Threads between the stages of a save or a load, with bounded queues between them.

- :class:`ParallelGzipWriter`: a writable that cuts its input into blocks, compresses
  them as independent gzip members on a thread pool (the compressors release the GIL),
  and writes the members, in order, to a sink from a writer thread. Any gzip reader
  decodes the concatenation. Blocks that do not compress are stored (deflate level 0).
- :class:`ReadAhead`: a readable that fills a bounded queue of chunks from a source in
  a background thread, so reading overlaps with whatever consumes the data.

Memory stays bounded by block size x (queue depth + 3), whatever the size: the blocks in the
queue (workers + 2 for the writer), the one being written to the sink, the one waiting for a
place in the queue, and the input buffer being filled.
"""

from __future__ import annotations

import os
import queue
import struct
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, BinaryIO

from ..errors import TransientError
from ..storage.blobstore import CopyCheck
from ..storage.kit.checksums import crc32
from ..util.interrupts import finish
from .compression import DEFAULT_LEVEL, compress_member, stored_length, stored_member

if TYPE_CHECKING:
    from ..storage.blobstore import CopySource
    from .index import IndexBuilder

BLOCK_SIZE = 4 * 1024 * 1024
_SAMPLE = 64 * 1024
#: Store a block rather than compress it when a sample shrinks by less than 10%: such data
#: (model weights: about 1.08x under gzip) costs more to inflate on load than it saves.
STORE_RATIO = 0.9
_POLL = 0.2
#: How long closing a reader waits for its filler, which may be stuck in a read of the source.
_JOIN_TIMEOUT = 5.0


def default_workers() -> int:
    """Compression threads: one per available core, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


#: Use the library's best fast level when a sample shrinks at least this much.
DENSE_RATIO = 0.5


def compress_block(data: bytes | memoryview, level: int) -> list[bytes | memoryview]:
    """One gzip member holding ``data``, as pieces to write in order.

    A sample decides: data that would not shrink is stored (at memory speed and without a
    copy, see :func:`stored_member`); data that shrinks well gets ``level + 2`` (more effort
    pays back in bytes moved); the rest gets ``level``.
    """
    if len(data) > 2 * _SAMPLE:
        sample = data[:_SAMPLE]
        ratio = len(compress_member(sample, level)) / len(sample)
        if ratio > STORE_RATIO:
            return stored_member(data)
        if ratio < DENSE_RATIO:
            level += 2
    member = compress_member(data, level)
    if len(member) > stored_length(len(data)):  # never more than stored: a bound a plan can use
        return stored_member(data)
    return [member]


class _Stop:
    pass


class _Align:
    """A padding member, so that the next member starts at a multiple of the writer's ``align``."""


class _CopyItem:
    """Members of another object, copied by the store (``sink.copy``) rather than written."""

    def __init__(
        self, source: CopySource, start: int, length: int, members: list[tuple[int, int, int, int]]
    ) -> None:
        self.source, self.start, self.length, self.members = source, start, length, members


def _member(block: bytes | memoryview, level: int) -> tuple[list[bytes | memoryview], int]:
    """:func:`compress_block` and the CRC-32 of the member's bytes (its ``ccrc`` in the index:
    what a store that copies it later checks the copy against), in the compressing thread."""
    pieces = compress_block(block, level)
    value, algorithm = 0, crc32()
    for piece in pieces:
        value = algorithm.compute(piece, value)
    return pieces, value


_STOP = _Stop()
_ALIGN = _Align()


def _empty(q: queue.Queue) -> None:
    """Take everything out of ``q`` without waiting."""
    while True:
        try:
            q.get_nowait()
        except queue.Empty:
            return


class _GzipState:
    """What the writer thread shares with the :class:`ParallelGzipWriter` that feeds it.

    It never refers to the writer object itself, so a writer whose owner was interrupted
    before closing it can be collected, which stops the threads (see :func:`_abandon`).
    """

    def __init__(
        self, sink: BinaryIO, depth: int, on_member: Callable[[int, int, int, int], None] | None
    ) -> None:
        self.sink = sink
        # (compressed length, uncompressed length, CRC-32 of the data, CRC-32 of the member's
        # bytes) of each member
        self.on_member = on_member
        self.pending: queue.Queue[
            Future[tuple[list[bytes | memoryview], int]] | _CopyItem | _Align | _Stop
        ] = queue.Queue(maxsize=depth)
        self.align = 0  # place aligned members at multiples of this (0: nowhere)
        self.coff = 0  # bytes of the object so far, written or copied (a copy not yet given included)
        # [source, start, length, [(clen, ccrc) of its members]] of a copy not yet given to the sink
        self.copying: list = []
        self.copy_run: int | None = None  # hand a copy this long to the sink without waiting for more
        self.copy_keep = 0  # ... keeping at least this much of the run back (the sink's minimum piece)
        self.closing = threading.Event()  # nothing more will be queued: write the rest, then stop
        self.aborted = threading.Event()  # drop what is queued, and stop
        self.error: BaseException | None = None


def _flush_copy(state: _GzipState) -> None:
    """Give the sink the copy being gathered (adjacent copies of one object become one)."""
    if state.copying:
        source, start, length, pieces = state.copying
        state.copying = []
        state.sink.copy(source, start, length, CopyCheck(tuple(pieces)))  # type: ignore[attr-defined]


def _pad(state: _GzipState) -> None:
    """Write a padding member after what came before, so that the next member starts at a
    multiple of ``state.align`` (docs/FORMAT.md, "Block alignment")."""
    from .index import aligning, padding

    _flush_copy(state)
    for member in padding(aligning(state.coff, state.align)):
        state.sink.write(member)
        state.coff += len(member)
        if state.on_member is not None:
            state.on_member(len(member), 0, 0, crc32().compute(member))


def _take_copy(state: _GzipState, item: _CopyItem) -> None:
    run = state.copying
    pieces = [(clen, ccrc) for clen, _, _, ccrc in item.members]
    if run and run[0] == item.source and run[1] + run[2] == item.start:
        run[2] += item.length
        run[3].extend(pieces)
    else:
        _flush_copy(state)
        if state.align and item.start % state.align == 0:
            _pad(state)  # from an aligned place to an aligned place: the store may share blocks
        state.copying = [item.source, item.start, item.length, pieces]
    state.coff += item.length
    if state.copy_run is not None:
        _copy_ahead(state)
    if state.on_member is not None:
        for row in item.members:
            state.on_member(*row)


def _copy_ahead(state: _GzipState) -> None:
    """Give the sink the first members of the run being gathered once they hold a chunk
    (:func:`~.incremental.copy_chunk`), keeping back at least ``copy_keep`` bytes so that the
    run's end is never a short copy: the store copies them (in parallel, as a part of their
    own) while the packer goes on."""
    from .incremental import copy_chunk

    assert state.copy_run is not None
    source, start, length, pieces = state.copying
    chunk = copy_chunk(state.copy_run, state.coff - length)
    while length >= chunk + state.copy_keep:
        n = taken = 0
        while taken < chunk:
            taken += pieces[n][0]
            n += 1
        if length - taken < state.copy_keep:
            break  # the members do not split there: more will come, or it ends as one copy
        state.sink.copy(source, start, taken, CopyCheck(tuple(pieces[:n])))  # type: ignore[attr-defined]
        del pieces[:n]
        start, length = start + taken, length - taken
        chunk = copy_chunk(state.copy_run, state.coff - length)
    if length:
        state.copying[1:3] = [start, length]
    else:
        state.copying = []


def _drain(state: _GzipState) -> None:
    """The writer thread: write each block's gzip member to the sink, in order."""
    try:
        _drain_items(state)
        if state.error is None and not state.aborted.is_set():
            _flush_copy(state)
    except BaseException as exc:
        state.error = exc


def _drain_items(state: _GzipState) -> None:
    while True:
        try:
            item = state.pending.get(timeout=_POLL)
        except queue.Empty:
            if state.aborted.is_set() or (state.closing.is_set() and state.pending.empty()):
                return
            continue
        if isinstance(item, _Stop):
            if state.closing.is_set():
                return
            continue
        if state.error is not None or state.aborted.is_set():
            if isinstance(item, Future):
                item.cancel()
            continue
        try:
            if isinstance(item, _CopyItem):
                _take_copy(state, item)
                continue
            if isinstance(item, _Align):
                _pad(state)
                continue
            pieces, ccrc = item.result()
            _flush_copy(state)
            for piece in pieces:
                state.sink.write(piece)
                state.coff += len(piece)
            if state.on_member is not None:
                crc, isize = struct.unpack("<II", bytes(pieces[-1][-8:]))
                state.on_member(sum(len(p) for p in pieces), isize, crc, ccrc)
        except BaseException as exc:
            state.error = exc


def _abandon(state: _GzipState, pool: ThreadPoolExecutor) -> None:
    """Stop the threads of a writer collected without ``close()`` or ``abort()``."""
    state.aborted.set()
    state.closing.set()
    pool.shutdown(wait=False, cancel_futures=True)


class ParallelGzipWriter:
    """Compress everything written into ``sink`` as a series of gzip members.

    ``on_block`` (if given) is called with the size of each block of input as it is queued.
    ``close()`` flushes, waits for the writer thread and raises its error if it had one;
    ``abort()`` drops what is pending. With an ``index`` (:class:`~.index.IndexBuilder`), each
    member written is recorded there and ``close()`` appends the index after the last one;
    ``cut()`` ends a member early (so the next byte starts one); ``copy()`` puts members of
    another object next, copied by ``sink`` (a :class:`~flyte_checkpoint.storage.blobstore.BlobWriter`
    of a store with ``copy_limits``), adjacent copies joined into one; with ``copy_run``, the
    first members of a joined copy are handed to ``sink`` once they are that long (more in a
    large object: :func:`~.incremental.copy_chunk`) and at least ``copy_keep`` bytes (the
    store's minimum piece) stay in the run, so the store copies while the packer goes on and
    the run's end is never a short piece; a ``sink`` with ``expect_copies`` (the kit's
    :class:`~flyte_checkpoint.storage.kit.PartWriter`) is told, with ``copy_run``, that copies
    will come. Neither closes ``sink``.
    With ``align`` (the store's ``copy_limits.align``), ``align()`` starts the next member at a
    multiple of ``align`` bytes from the sink's first byte, after a padding member
    (:func:`~.index.padding`, recorded in the index as a member); so does a copy from such a
    place that does not continue the copy before it, so that the store copies from and to
    aligned places (a file system that shares blocks then shares them).
    Inside a cancelled operation (:mod:`flyte_checkpoint.util.cancellation`) ``write()`` raises its error.

    No interrupt leaves a thread behind: ``close()`` and ``abort()`` first tell the threads
    to end (an event they watch) and then wait for them even if interrupted (raising the
    interrupt after); a writer dropped without either stops its threads when collected.
    """

    def __init__(
        self,
        sink: BinaryIO,
        *,
        level: int = DEFAULT_LEVEL,
        block_size: int = BLOCK_SIZE,
        workers: int | None = None,
        on_block: Callable[[int], None] | None = None,
        index: IndexBuilder | None = None,
        copy_run: int | None = None,
        copy_keep: int = 0,
        align: int = 0,
    ) -> None:
        import weakref

        from ..util.cancellation import current

        self._on_block = on_block
        self._level = level
        self._block = block_size
        self._scope = current()
        n = workers or default_workers()
        self._index = index
        self._state = _GzipState(sink, n + 2, index.add_member if index is not None else None)
        self._state.copy_run = copy_run
        self._state.copy_keep = copy_keep
        expect_copies = getattr(sink, "expect_copies", None) if copy_run is not None else None
        if expect_copies is not None:  # a PartWriter: keep bytes back for the copies to come
            expect_copies()
        self._state.align = align
        self._pool = ThreadPoolExecutor(n, thread_name_prefix="fcp-gzip")
        self._finalizer = weakref.finalize(self, _abandon, self._state, self._pool)
        self._buf = bytearray()
        self._sent_since_cut = False  # a block went to the compressors since the last cut
        self._closed = False
        self.bytes_in = 0
        self._thread = threading.Thread(
            target=_drain, args=(self._state,), name="fcp-gzip-writer", daemon=True
        )
        self._thread.start()

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:
        if self._state.error is not None:
            raise self._state.error
        n = len(data)
        self.bytes_in += n
        if isinstance(data, bytes) and n >= self._block // 2:
            # a large immutable piece goes to the compressors as it is, without a copy
            if self._buf:
                self._submit(bytes(self._buf))
                self._buf = bytearray()
            view = memoryview(data)
            for start in range(0, n, self._block):
                self._submit(view[start : start + self._block])
            return n
        self._buf += data
        if len(self._buf) >= self._block:
            self._submit(bytes(self._buf))
            self._buf = bytearray()
        return n

    def flush(self) -> None:
        pass

    def cut(self) -> None:
        """End the current gzip member here: what is written next starts a new one."""
        if self._buf:
            self._submit(bytes(self._buf))
            self._buf = bytearray()
        self._sent_since_cut = False

    def align(self) -> None:
        """End the current gzip member here, and start the next one at a multiple of ``align``
        bytes of the sink (after a padding member); only :meth:`cut` without ``align``."""
        self.cut()
        if self._state.align:
            self._put(_ALIGN)

    def pending(self) -> bytes | None:
        """Everything written since the last :meth:`cut` or :meth:`copy`, if it is all still
        here (not yet compressed); else None."""
        return None if self._sent_since_cut else bytes(self._buf)

    def copy(
        self,
        source: CopySource,
        start: int,
        length: int,
        members: list[tuple[int, int, int, int]],
        *,
        replace: bool = False,
    ) -> None:
        """Put next the gzip members ``members`` (compressed length, uncompressed length,
        CRC-32 of the data and of the member's bytes, each), which are bytes ``start .. start +
        length`` of ``source``, copied by the sink, which checks them against those CRCs of
        their bytes (``expect``: :class:`~flyte_checkpoint.storage.blobstore.CopyCheck`). With
        ``replace``, they stand for what :meth:`pending` returned, which is dropped (the caller
        checked that they hold exactly it); otherwise it is cut into members first."""
        if replace:
            self._buf = bytearray()
        self.cut()
        self.bytes_in += sum(row[1] for row in members) if not replace else 0
        self._put(_CopyItem(source, start, length, members))

    def _submit(self, block: bytes | memoryview) -> None:
        self._sent_since_cut = True
        if self._on_block is not None:
            self._on_block(len(block))
        fut = self._pool.submit(_member, block, self._level)
        self._put(fut)

    def _put(self, item: Future[tuple[list[bytes | memoryview], int]] | _CopyItem | _Align) -> None:
        state = self._state
        while True:
            if state.error is not None:
                raise state.error
            if self._scope is not None:
                self._scope.check()
            try:
                state.pending.put(item, timeout=_POLL)
                return
            except queue.Full:
                continue

    def close(self) -> None:
        """Compress what is left, write everything, and raise the first error met."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._buf or self.bytes_in == 0:
                self._submit(bytes(self._buf))
                self._buf = bytearray()
        except BaseException:
            self._state.aborted.set()
            raise
        finally:
            self._state.closing.set()
            finish(self._stop_threads)
        if self._state.error is not None:
            raise self._state.error
        if self._index is not None:
            self._state.sink.write(self._index.encode())

    def abort(self) -> None:
        """Stop: pending blocks are dropped; the sink gets nothing more."""
        self._state.aborted.set()
        self._state.closing.set()
        self._closed = True
        finish(self._stop_threads)

    def _stop_threads(self) -> None:
        # The events are set: the writer thread ends by itself. The marker only wakes it now
        # rather than at its next poll; it is put once there is room, unless it has ended.
        while self._thread.is_alive():
            try:
                self._state.pending.put(_STOP, timeout=_POLL)
                break
            except queue.Full:
                continue
        while self._thread.is_alive():
            # In steps: a signal taken by another thread runs its Python handler (the final
            # save on SIGTERM) only once this thread runs Python code again.
            self._thread.join(_POLL)
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._finalizer.detach()  # stopped: nothing left for the collector to do

    def __enter__(self) -> ParallelGzipWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class _AheadState:
    """What the filler thread shares with its :class:`ReadAhead` (never the object itself)."""

    def __init__(self, source: BinaryIO, chunk: int, depth: int) -> None:
        self.source = source
        self.chunk = chunk
        self.queue: queue.Queue[bytes | BaseException] = queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.cancelled: BaseException | None = None

    def offer(self, item: bytes | BaseException) -> None:
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=_POLL)
                return
            except queue.Full:
                continue

    def cancel(self, exc: BaseException) -> None:
        """Stop reading and wake the reader with ``exc`` (from any thread)."""
        self.cancelled = exc
        self.stop.set()
        while True:  # make room (the filler puts at most one more chunk), then wake the reader
            _empty(self.queue)
            try:
                self.queue.put_nowait(exc)
                return
            except queue.Full:
                continue

    def abandon(self) -> None:
        self.stop.set()
        _empty(self.queue)


def _fill(state: _AheadState) -> None:
    """The filler thread: read chunks into the queue until the end, an error or a stop."""
    try:
        while not state.stop.is_set():
            data = state.source.read(state.chunk)
            state.offer(data)
            if not data:
                return
    except BaseException as exc:
        state.offer(exc)


class ReadAhead:
    """Read ``source`` in a background thread, ``chunk_size`` at a time, ``depth`` chunks ahead.

    ``read(n)`` serves from the chunks in order; errors of the source are raised to the
    reader at the point they happened. ``on_chunk`` (if given) is called with each chunk's
    size as the reader takes it. ``close()`` stops the thread (it does not close ``source``),
    even if interrupted; a reader dropped unclosed stops it when collected. Inside an
    operation that gets cancelled (:mod:`flyte_checkpoint.util.cancellation`), the reader is
    woken at once with the cancellation error.
    """

    def __init__(
        self,
        source: BinaryIO,
        *,
        chunk_size: int = BLOCK_SIZE,
        depth: int = 4,
        on_chunk: Callable[[int], None] | None = None,
    ) -> None:
        import weakref

        from ..util.cancellation import current

        self._state = _AheadState(source, chunk_size, depth)
        self._finalizer = weakref.finalize(self, self._state.abandon)
        self._cur = memoryview(b"")
        self._eof = False
        self._on_chunk = on_chunk
        self._scope = current()
        if self._scope is not None:
            self._scope.on_cancel(self._state.cancel)
        self._thread = threading.Thread(target=_fill, args=(self._state,), name="fcp-read-ahead", daemon=True)
        self._thread.start()

    def _next(self) -> bool:
        if self._eof:
            return False
        item = self._state.queue.get()
        if self._state.cancelled is not None:
            item = self._state.cancelled
        if isinstance(item, BaseException):
            self._eof = True
            raise item
        if not item:
            self._eof = True
            return False
        if self._on_chunk is not None:
            self._on_chunk(len(item))
        self._cur = memoryview(item)
        return True

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            parts = [bytes(self._cur)]
            self._cur = memoryview(b"")
            while self._next():
                parts.append(bytes(self._cur))
            self._cur = memoryview(b"")
            return b"".join(parts)
        if not self._cur and not self._next():
            return b""
        if len(self._cur) >= n:
            out = self._cur[:n]
            self._cur = self._cur[n:]
            return bytes(out)
        parts = [bytes(self._cur)]
        got = len(self._cur)
        self._cur = memoryview(b"")
        while got < n and self._next():
            take = self._cur[: n - got]
            parts.append(bytes(take))
            got += len(take)
            self._cur = self._cur[len(take) :]
        return b"".join(parts)

    def read1(self, n: int = -1) -> memoryview:
        """Up to ``n`` bytes of the current chunk, as a view (no copy); empty at the end.

        The view stays valid after later reads (it keeps its chunk alive).
        """
        if not self._cur and not self._next():
            return memoryview(b"")
        if n is None or n < 0:
            n = len(self._cur)
        out = self._cur[:n]
        self._cur = self._cur[n:]
        return out

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._state.stop.set()
        if self._scope is not None:
            self._scope.forget(self._state.cancel)
        finish(self._stop_filler)

    def _stop_filler(self) -> None:
        _empty(self._state.queue)  # unblock the filler if it waits on a full queue
        # A filler stuck in a read of the source ends when that read returns.
        self._thread.join(timeout=_JOIN_TIMEOUT)
        self._finalizer.detach()

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def length_error(got: int, expected: int) -> TransientError:
    """The error for an object whose length differs from what the store reported."""
    return TransientError(
        f"read {got} bytes where the store reported {expected}: the object changed or the connection was cut"
    )
