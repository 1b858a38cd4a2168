"""Writing one object in parts: buffered, sent from the store's pool a bounded number at a time.

Every cloud writes the same way: buffer a part, send full parts from worker threads with a
bounded number in flight, send an object of at most one part in a single request, commit at
close, and cancel everything on any failure. :class:`PartWriter` is that skeleton, written once;
a backend subclasses it with its upload protocol in five hooks (see the class).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, wait
from functools import partial
from typing import Any

from ...errors import StoreError
from ...uri import redact
from ...util import cancellation
from ..blobstore import CHECK_CHUNK, BlobWriter, CopyCheck, CopyLimits, CopySource
from .checksums import crc32
from .pools import StorePool

Buffer = bytes | bytearray | memoryview


def part_size_for(number: int, base: int, *, double_every: int, maximum: int) -> int:
    """The size of part ``number`` (from 1): ``base`` for the first ``double_every`` parts, then
    doubled every ``double_every`` parts, never more than ``maximum``.

    With S3's numbers (8 MiB, doubled every 1,000 parts, at most 5 GiB) the 10,000 parts S3
    allows hold more than its 5 TiB object limit, so a stream of unknown length never runs out.
    """
    if number < 1:
        raise ValueError(f"parts are numbered from 1, not {number}")
    return min(base << ((number - 1) // double_every), maximum)


class PartWriter(BlobWriter):
    """A :class:`~flyte_checkpoint.storage.blobstore.BlobWriter` that sends its object in parts.

    It promises:

    - at most ``max_concurrency`` parts in flight (one with ``ordered=True``): a ``write`` that
      fills another part waits for a place, so the writer holds at most
      ``part_size * (max_concurrency + 1)`` bytes (plus ``min_part`` kept back, once told
      :meth:`expect_copies`); ``peak_in_flight`` records the most at once;
    - the caller's buffer is copied, never kept: it may be reused once ``write`` returns;
    - the first part's buffer grows by doubling as data arrives, so a small object costs its own
      size; a full part is sent only when more bytes follow, so an object of at most one part
      goes up in one :meth:`_put_whole` at commit (an empty object too);
    - a part's first error is raised by the next ``write`` or ``close`` (after the running parts
      have finished and :meth:`_cancel` has run); any failure and :meth:`abort` wait for the
      running parts, drop the queued ones, then call :meth:`_cancel`;
    - a cancelled save (:mod:`flyte_checkpoint.util.cancellation`) never commits: the commit checks
      it after the last part has been sent, just before :meth:`_complete` (or :meth:`_put_whole`);
    - ``ordered=True`` (GCS's resumable session) sends one part at a time, in order, and hands the
      object's last bytes to :meth:`_complete` as ``tail`` instead of sending them as a part;
    - :meth:`upload_file` sends a local file the same way, each part read with ``os.pread`` in the
      pool thread that sends it, and raises ``SourceChangedError`` if the file changed meanwhile.

    Hooks (the backend's protocol; each may raise the project's errors, mapped from its SDK's):

    - ``_put_whole(data)``: store ``data`` (the whole object, at most one part; the hook may keep
      it) in one request;
    - ``_start()``: begin a multipart upload, in the caller's thread, before the first part;
    - ``_send_part(number, data) -> result``: send part ``number`` (from 1), in a pool thread;
      ``data`` is the hook's to keep; the result goes to :meth:`_complete`;
    - ``_complete(results, tail)``: commit, with every part's result in part order (and with
      ``ordered=True`` the last bytes, else ``None``);
    - ``_cancel()``: best effort, idempotent: discard what :meth:`_start` began (it is called
      only once ``_start`` has been, even if ``_start`` raised, and never while a part runs).

    Server-side copies (:meth:`BlobWriter.copy`), for a writer given ``copy_limits``: a copy is
    one part (or several, of at most ``max_copy`` bytes) sent by ``_copy_part``, so it ends the
    part being filled. With a ``min_part``, a writer told :meth:`expect_copies` before its first
    byte keeps the last ``min_part`` bytes written back from each full part it sends (the part
    sent is ``part_size``; the next one starts with them), so the written bytes before a copy
    make a part of at least ``min_part`` whenever there are that many (the tail of a long
    written run absorbs its short end: nothing is read). Where fewer were written since the
    last copy, the first bytes of the copy are read (``_read_source``, in the pool thread that
    sends the part, not the caller's) and added to them; a copy shorter than ``min_part`` (or
    than ``min_copy``) with what precedes it is read and written whole. Hooks, for such a
    writer:

    - ``_copy_part(number, source, start, length) -> result``: make part ``number`` from bytes
      ``start .. start + length`` of ``source`` on the server, only while ``source.version``
      still holds (else :class:`~flyte_checkpoint.errors.CopySourceChangedError`); in a pool
      thread; the result goes to :meth:`_complete` with the others;
    - ``_read_source(source, start, length) -> bytes``: those bytes, by a ranged read that
      checks the version the same way;
    - ``_copied_crc32(result) -> int | None``: the CRC-32 the server computed of a copied part
      (from ``_copy_part``'s result), or None where it gave none (the default).

    A copy with ``expect`` (:class:`~flyte_checkpoint.storage.blobstore.CopyCheck`) is checked
    before the commit: the CRC-32s of its bytes read and sent here and of its copied parts
    (the server's, else computed by reading the part's range of the source in the job that
    copied it) are combined in order and compared with ``expect``'s; where they differ, the
    source is read to find the damaged pieces, and the commit raises ``CopyDamagedError``
    (before :meth:`_complete`) naming them.

    Parts are numbered in the order their bytes come; each is one job on the pool (parts
    numbered from elsewhere for several writers committing one object, issue 19, would be
    further jobs of the same kind: :meth:`_submit` takes any callable that returns a part's
    result).
    """

    def __init__(
        self,
        uri: str,
        *,
        part_size: int,
        max_concurrency: int,
        pool: StorePool,
        double_every: int,
        max_parts: int,
        max_part_size: int,
        ordered: bool = False,
        copy_limits: CopyLimits | None = None,
    ) -> None:
        super().__init__(uri)
        if part_size < 1 or max_concurrency < 1:
            raise ValueError(
                f"part_size and max_concurrency must be at least 1, not {part_size}, {max_concurrency}"
            )
        self.part_size = part_size
        self.max_concurrency = 1 if ordered else max_concurrency
        self.pool = pool
        self.double_every = double_every
        self.max_parts = max_parts
        self.max_part_size = max_part_size
        self.ordered = ordered
        self.copy_limits = copy_limits
        #: The most parts that were in flight at once.
        self.peak_in_flight = 0
        self._in_flight = 0
        self._count_lock = threading.Lock()
        self._places = threading.Semaphore(self.max_concurrency)
        self._buf: bytearray | bytes = bytearray()
        self._fill = 0
        self._next_part = 1
        self._futures: list[Future[Any]] = []
        self._error: BaseException | None = None
        self._started = False
        self._cancelled = False
        self._checks: list[_Checked] = []  # copies given an ``expect``, checked before the commit
        # Bytes kept back from each full part sent, so that the written bytes before a copy make
        # a part of at least ``min_part`` (S3) without reading any of the copy.
        self._reserve = 0
        #: Bytes of copies read from their source and sent, because too few were written before
        #: them or the copy was too short (for tests and logs).
        self.bytes_read_back = 0

    # -- hooks ------------------------------------------------------------------------------

    def _put_whole(self, data: bytes | bytearray) -> None:
        """Store ``data`` as the whole object in one request."""
        raise NotImplementedError

    def _start(self) -> None:
        """Begin a multipart upload (called once, before the first part)."""
        raise NotImplementedError

    def _send_part(self, number: int, data: bytes | bytearray) -> Any:
        """Send part ``number``; runs in a pool thread; returns what :meth:`_complete` needs of it."""
        raise NotImplementedError

    def _complete(self, results: list[Any], tail: memoryview | None) -> None:
        """Commit the object from the parts' results (and the last bytes when ``ordered``)."""
        raise NotImplementedError

    def _cancel(self) -> None:
        """Discard the upload begun by :meth:`_start` (best effort, idempotent)."""

    def _copy_part(self, number: int, source: CopySource, start: int, length: int) -> Any:
        """Make part ``number`` from a range of ``source`` on the server; runs in a pool thread."""
        raise NotImplementedError

    def _read_source(self, source: CopySource, start: int, length: int) -> bytes:
        """Bytes of ``source`` (a ranged read that checks ``source.version``)."""
        raise NotImplementedError

    def _copied_crc32(self, result: Any) -> int | None:
        """The CRC-32 the server computed of the part ``_copy_part`` made (None: it gave none)."""
        return None

    def expect_copies(self) -> None:
        """Say, before the first byte, that :meth:`copy` calls will come (an incremental save):
        a writer whose pieces have a minimum (``copy_limits.min_part``) then keeps that many
        bytes back from each full part it sends, so that the written bytes before a copy make a
        long enough part without reading the copy. Nothing for any other writer."""
        if self.copy_limits is not None and not self.ordered and not self.bytes_written:
            self._reserve = self.copy_limits.min_part

    # -- BlobWriter ---------------------------------------------------------------------------

    def _write(self, data: Buffer) -> None:
        self._raise_failed()
        view = memoryview(data).cast("B")
        while view:
            size = self._capacity(self._next_part)
            if self._fill == size:
                # Full, and more bytes follow: send it (an object of one part stays one request),
                # but the bytes kept back, which start the next part.
                self._send_buffer(keep=self._reserve)
                size = self._capacity(self._next_part)
            if self._fill == len(self._buf):
                self._make_room(size, len(view))
            n = min(len(view), len(self._buf) - self._fill)
            self._buf[self._fill : self._fill + n] = view[:n]  # type: ignore[index]
            self._fill += n
            view = view[n:]

    def _copy(self, source: CopySource, start: int, length: int, expect: CopyCheck | None) -> None:
        limits = self.copy_limits
        if limits is None or self.ordered:
            raise NotImplementedError(f"{type(self).__name__} cannot copy ranges on the server")
        self._raise_failed()
        check = None if expect is None else _Checked(source, start, expect)
        if check is not None:
            self._checks.append(check)
        shortest = max(limits.min_part, limits.min_copy, 1)
        if 0 < self._fill < limits.min_part:
            # The part being filled would be too short to precede a copied one: fill it from the
            # copy, read in the pool thread that sends the part, when the rest is still long.
            take = min(limits.min_part - self._fill, length)
            if length - take < shortest:
                self._write(self._read_checked(source, start, length, check))
                return
            data = self._take()
            self._submit(self._filled_job(data, source, start, take, check))
            start, length = start + take, length - take
        if length < shortest:
            if length:
                self._write(self._read_checked(source, start, length, check))
            return
        if self._fill:
            self._send_buffer()
        pieces = -(-length // limits.max_copy) if limits.max_copy else 1
        for i in range(pieces):
            a, b = length * i // pieces, length * (i + 1) // pieces
            cancellation.check()
            self._submit(self._copy_job(source, start + a, b - a, check))

    def _read_checked(self, source: CopySource, start: int, length: int, check: _Checked | None) -> bytes:
        data = self._read_source(source, start, length)
        with self._count_lock:
            self.bytes_read_back += length
        if check is not None:
            check.add(crc32().compute(data), length)
        return data

    def _filled_job(
        self, data: bytearray | bytes, source: CopySource, start: int, take: int, check: _Checked | None
    ) -> Callable[[int], Any]:
        """The job that sends ``data`` followed by ``take`` bytes of ``source`` read from ``start``
        (in the pool thread), as one part."""
        slot = None if check is None else check.slot(take)

        def job(number: int) -> Any:
            got = self._read_source(source, start, take)
            with self._count_lock:
                self.bytes_read_back += take
            if check is not None and slot is not None:
                check.fill(slot, crc32().compute(got))
            part = data if isinstance(data, bytearray) else bytearray(data)
            part += got
            return self._send_part(number, part)

        return job

    def _copy_job(
        self, source: CopySource, start: int, length: int, check: _Checked | None = None
    ) -> Callable[[int], Any]:
        if check is None:
            return lambda number: self._copy_part(number, source, start, length)
        slot = check.slot(length)

        def job(number: int) -> Any:
            result = self._copy_part(number, source, start, length)
            value = self._copied_crc32(result)
            if value is None:  # the server gave none: read what it copied from, checked the same way
                value = _crc_of(partial(self._read_source, source), start, length)
            check.fill(slot, value)
            return result

        return job

    def _check_copies(self) -> None:
        """Compare each checked copy with its ``expect`` (every part has ended); find the
        damaged pieces of those that differ, and raise ``CopyDamagedError`` if any."""
        for check in self._checks:
            if check.value() != check.expect.crc32():
                read = partial(self._read_source, check.source)
                damaged = check.expect.damaged(check.start, read)
                if not damaged:
                    # Every piece reads back as it should, yet the server's CRC of what it copied
                    # is not theirs: the copy is trusted no more than the source, and is sent.
                    logging.getLogger("flyte_checkpoint").warning(
                        "the server's CRC-32 of bytes %d..%d of %s, copied into %s, is not that of"
                        " the bytes read back from it: the copy is not trusted, and those bytes are"
                        " sent instead",
                        check.start,
                        check.start + check.expect.length,
                        redact(check.source.uri),
                        redact(self.uri),
                    )
                    damaged = [(check.start, check.expect.length)]
                self.copy_damage.add(check.source, damaged)
        self.copy_damage.raise_found(self.uri)

    def _commit(self) -> None:
        if not self._started:
            data = self._take()
            self._check_cancelled()
            self._put_whole(data)
            return
        tail: memoryview | None = None
        if self.ordered:
            tail = memoryview(self._take())
        elif self._fill:
            self._send_buffer()
        results = self._wait_parts()
        self._check_copies()
        self._check_cancelled()  # a save cancelled while its last parts were sent never commits
        self._complete(results, tail)

    def _abort(self) -> None:
        self._buf, self._fill = bytearray(), 0
        self._drain()
        self._cancel_once()

    # -- files --------------------------------------------------------------------------------

    def upload_file(self, path: str | os.PathLike[str]) -> None:
        """Write the local file at ``path`` as the whole object and commit it.

        An object of at most one part is read here and sent with :meth:`_put_whole`; a larger one
        is sent in parts, each read with ``os.pread`` in the pool thread that sends it, so at most
        ``max_concurrency`` parts are in memory. ``path`` may be the
        :class:`~flyte_checkpoint.util.sources.SourceFile` the core opened when the save started. The
        writer must be new (nothing written); on any failure it is aborted.

        Raises:
            SourceChangedError: the file changed while it was read (nothing is committed).
            OperationCancelledError: the save was cancelled (nothing is committed).
            ValueError: the writer is closed or already has bytes.
            and what the hooks raise.
        """
        from ...util.sources import open_source

        if self.closed or self.bytes_written or self._started:
            raise ValueError(f"upload_file needs a new writer for {redact(self.uri)}")
        with open_source(path) as src:
            try:
                size = src.size
                if size <= self._part_size(1):
                    data = src.pread(size, 0) if size else b""
                    self._buf, self._fill = data, size
                    self.bytes_written = size
                else:
                    self._send_file(src, size)
                src.verify()
            except BaseException:
                self.abort()  # waits for the parts still reading the file before it is closed
                raise
        self.close()

    def _send_file(self, src: Any, size: int) -> None:
        offset = 0
        while offset < size:
            n = min(self._part_size(self._next_part), size - offset)
            if self.ordered and offset + n >= size:  # the tail goes to _complete
                self._buf, self._fill = src.pread(size - offset, offset), size - offset
                self.bytes_written += size - offset
                break
            with self._lock:
                if self.closed:
                    raise ValueError(f"upload_file to a {self._state} writer for {redact(self.uri)}")
                if self._scope is not None:
                    self._scope.check()
                cancellation.check()
                self._raise_failed()
                self._submit(self._file_part(src, offset, n))
                self.bytes_written += n
            offset += n
        self._wait_parts()

    def _file_part(self, src: Any, offset: int, n: int) -> Callable[[int], Any]:
        """The job that reads ``n`` bytes at ``offset`` of ``src`` (in the pool thread) and sends them."""
        return lambda number: self._send_part(number, src.pread(n, offset))

    # -- internals ----------------------------------------------------------------------------

    def _part_size(self, number: int) -> int:
        return part_size_for(
            number, self.part_size, double_every=self.double_every, maximum=self.max_part_size
        )

    def _capacity(self, number: int) -> int:
        """The bytes the buffer of part ``number`` holds before it is sent: the part and the
        bytes kept back for the next (never over ``max_part_size``)."""
        return min(self._part_size(number) + self._reserve, self.max_part_size)

    def _make_room(self, size: int, coming: int) -> None:
        """A bigger buffer for the part being filled: the whole part, or for the first part twice
        what it holds (at least what is ``coming``), keeping its bytes."""
        capacity = size if self._next_part > 1 else min(size, max(2 * self._fill, self._fill + coming))
        buf = bytearray(capacity)
        buf[: self._fill] = self._buf[: self._fill]
        self._buf = buf

    def _take(self) -> bytearray | bytes:
        """The bytes buffered (a short buffer trimmed in place), leaving an empty one."""
        data, fill = self._buf, self._fill
        if len(data) != fill:
            assert isinstance(data, bytearray)
            del data[fill:]
        self._buf, self._fill = bytearray(), 0
        return data

    def _send_buffer(self, keep: int = 0) -> None:
        """Send the bytes buffered as the next part, but the last ``keep``, which stay buffered."""
        cancellation.check()
        kept = b""
        if keep:
            with memoryview(self._buf) as view:  # released before _take trims the buffer in place
                kept = bytes(view[self._fill - keep : self._fill])
        self._fill -= len(kept)
        data = self._take()
        if kept:
            self._buf = bytearray(self._capacity(self._next_part + 1))
            self._buf[: len(kept)] = kept
            self._fill = len(kept)
        self._submit(lambda number: self._send_part(number, data))

    def _submit(self, job: Callable[[int], Any]) -> None:
        """Run ``job(number)`` on the pool as the next part, once a place is free.

        Raises the first error of an earlier part, or StoreError past ``max_parts``.
        """
        number = self._next_part
        if number > self.max_parts:
            raise StoreError(
                f"{redact(self.uri)} needs more than {self.max_parts} parts: raise the store's part_size"
            )
        if not self._started:
            self._started = True
            self._start()
        self._places.acquire()
        self._raise_failed(release=True)
        with self._count_lock:
            self._in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
        try:
            future = self.pool.submit(job, number)
        except BaseException:
            self._part_done(None)
            raise
        self._futures.append(future)
        self._next_part += 1
        future.add_done_callback(self._part_done)

    def _part_done(self, future: Future[Any] | None) -> None:
        exc = future.exception() if future is not None and not future.cancelled() else None
        with self._count_lock:
            if exc is not None and self._error is None:
                self._error = exc
            self._in_flight -= 1
        self._places.release()

    def _raise_failed(self, *, release: bool = False) -> None:
        """Raise the first part's error, once the running parts have ended and ``_cancel`` ran."""
        if self._error is None:
            return
        if release:
            self._places.release()
        self._drain()
        self._cancel_once()
        raise self._error

    def _wait_parts(self) -> list[Any]:
        """Every part's result, in part order (raises the first error, as :meth:`_raise_failed`)."""
        wait(self._futures)
        self._raise_failed()
        return [future.result() for future in self._futures]

    def _check_cancelled(self) -> None:
        """Raise OperationCancelledError if the save this writer belongs to (or the calling
        thread's) was cancelled."""
        if self._scope is not None:
            self._scope.check()
        cancellation.check()

    def _cancel_once(self) -> None:
        if self._started and not self._cancelled:
            self._cancel()
            self._cancelled = True  # only once it returned: an interrupted _cancel runs again

    def _drain(self) -> None:
        """Drop the parts not started and wait for the running ones."""
        for future in self._futures:
            future.cancel()
        wait(self._futures)


class _Checked:
    """One copy given an ``expect``: the CRC-32s of its bytes in order, as they become known
    (read and sent by the writer, or copied by the server as parts)."""

    def __init__(self, source: CopySource, start: int, expect: CopyCheck) -> None:
        self.source, self.start, self.expect = source, start, expect
        self._values: list[list[int | None]] = []  # [crc, length] each, in the range's order

    def add(self, value: int, length: int) -> None:
        self._values.append([value, length])

    def slot(self, length: int) -> list[int | None]:
        """A place for the CRC of the next ``length`` bytes, filled later (:meth:`fill`)."""
        self._values.append([None, length])
        return self._values[-1]

    def fill(self, slot: list[int | None], value: int) -> None:
        slot[0] = value

    def value(self) -> int | None:
        """The CRC-32 of the whole range, or None while a part has not reported one."""
        crc = crc32()
        whole = 0
        for value, length in self._values:
            if value is None:
                return None
            assert length is not None
            whole = crc.combine(whole, value, length)
        return whole


def _crc_of(read: Callable[[int, int], bytes], start: int, length: int) -> int:
    """The CRC-32 of ``length`` bytes from ``start``, read ``CHECK_CHUNK`` at a time."""
    algorithm, value, at, end = crc32(), 0, start, start + length
    while at < end:
        data = read(at, min(CHECK_CHUNK, end - at))
        if not data:
            break
        value = algorithm.compute(data, value)
        at += len(data)
    return value


__all__ = ["PartWriter", "part_size_for"]
