"""Load an indexed folder object (docs/FORMAT.md) by inflating its gzip members on several threads.

The index gives every member's compressed offset and length, its uncompressed length and
CRC-32, and every file's place and hash (:mod:`.digests`). :func:`restore_indexed` reads the
index by ranged reads (the trailer, unless the caller read it, then the index), then streams
the object as a streamed load does (the store's own download),
cut into batches of members of a few MiB that a pool of threads inflates (the decompressors
release the GIL) while the next batches download, and hands the tar stream, in order, to the
same extractor as a streamed load (:func:`~.archive.unpack`): headers are parsed and every
archive-safety rule applies unchanged. On the way, each member's length and CRC-32 are
checked against the index, each file's data against its hash, and each regular file the
tar extracts against its index entry (name, place, size), so every restored byte is verified.
Any mismatch is a :class:`~flyte_checkpoint.errors.CorruptCheckpointError`; the caller
discards what was restored.

Objects without an index, stores without ranged reads, objects too small for the extra
reads to pay, one core (:func:`inflate_threads`), and objects a parallel load does not speed
up (:func:`pays`: mostly stored blocks, or many small files) load by streaming, as before
(:func:`~.restore.restore`), each file hashed as it is written and checked against the index
at the end (:mod:`.filehashes`).
"""

from __future__ import annotations

import struct
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO

from ..errors import CorruptCheckpointError
from ..util.interrupts import finish
from . import digests
from .compression import GZIP_ERRORS, member_decoder
from .index import is_padding

if TYPE_CHECKING:
    from ..storage.blobstore import BlobStore
    from .filehashes import FileHashes
    from .index import FileEntry, Index, Member

#: Objects smaller than this load by streaming. The index costs two ranged reads before the
#: download starts (two round trips to a cloud store); 32 MiB of compressed JSON inflates in
#: about 0.15 s on one core here, so spreading less than that over cores saves no more than a
#: few round trips cost. Chosen, not measured on a cloud store.
PARALLEL_MIN = 32 * 1024 * 1024
#: Uncompressed bytes of members per batch (one read of the stream, one task of the pool; at
#: least one member).
BATCH = 4 * 1024 * 1024
_POLL = 0.2
#: The most handed out at once: the extractor writes what it gets in one ``pwrite``, and
#: writes of 4 MiB took the kernel 10-20x as long per byte as writes of 1 MiB here (measured
#: on the JSON-lines set; a streamed load hands out 1 MiB too).
_PIECE = 1024 * 1024


THREADS_ENV = "FLYTE_CHECKPOINT_INFLATE_THREADS"
#: Cores from which a load inflates in parallel unless told. With SHA-256 (index versions 1
#: and 2) verifying each file cost about 0.8x the CPU of inflating JSON, and on 2 cores the
#: parallel load took 2.15x the streamed one's time; with BLAKE3 (version 3) it takes 0.77x
#: (the JSON-lines set: 0.45 s against 0.59 s, and 1.03x-1.06x the time of ``tar xf``;
#: benchmarks/, 2 cores, quiet), every file verified. One core has nothing to spread the inflate over.
MIN_CORES = 2
#: Unless told how many threads, an object whose members are at least this large against the
#: tar they hold (mostly stored blocks: model weights, random bytes) streams: there is next to
#: nothing to inflate, and the parallel load's extra copies and allocations cost more than they
#: spread (the model set, 1 GiB stored: 1.72 s in parallel against 0.41 s streamed).
STORED_RATIO = 0.8
#: Likewise an object of fewer tar bytes than this per file: creating the files bounds its
#: load, not inflating them, and checking each one costs more (the 20,000-file set, 4.5 KiB
#: per file: 1.93 s in parallel against 1.73 s streamed; the JSON-lines set, 64 MiB per file:
#: 0.48 s against 0.55 s).
FILE_BYTES_MIN = 64 * 1024


def inflate_threads() -> int:
    """Threads a load of an indexed object inflates on; 1 means it streams (as objects without
    an index do). ``FLYTE_CHECKPOINT_INFLATE_THREADS`` if set (``0`` or ``1``: stream), else one
    per available core (at most 8) from :data:`MIN_CORES` cores up, else 1.

    Raises:
        ValueError: the variable holds something other than a whole number >= 0.
    """
    from ..util.limits import env_count
    from .pipeline import default_workers

    told = env_count(THREADS_ENV, "threads")
    if told is not None:
        return max(1, min(told, 64))
    cores = default_workers()
    return cores if cores >= MIN_CORES else 1


@dataclass
class LoadStats:
    """What :func:`restore_indexed` did: batches of members read, members inflated, files
    whose SHA-256 was verified, threads in the pool."""

    reads: int = 0
    members: int = 0
    files_verified: int = 0
    threads: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


def _batches(members: list[Member]) -> list[tuple[int, int]]:
    """``[start, end)`` runs of consecutive members, each at most :data:`BATCH` uncompressed."""
    out: list[tuple[int, int]] = []
    start, size = 0, 0
    for i, m in enumerate(members):
        if i > start and size + m.ulen > BATCH:
            out.append((start, i))
            start, size = i, 0
        size += m.ulen
    if start < len(members):
        out.append((start, len(members)))
    return out


def damaged(uri: str, what: str) -> CorruptCheckpointError:
    """The error for an object a load found damaged (``what``), naming it without credentials."""
    from ..uri import redact

    return CorruptCheckpointError(f"{redact(uri)} is damaged: {what}; save the checkpoint again")


def inflate_member(raw: memoryview, m: Member, i: int, uri: str) -> list[bytes]:
    """The data of member ``i``, whose compressed bytes are ``raw``, in pieces of at most
    :data:`_PIECE` bytes; raises unless it is one complete gzip member holding ``m.ulen`` bytes
    with CRC-32 ``m.crc``. The decoder checks the data against the member's own CRC-32 and
    length, which must equal the index's."""
    if len(raw) < 18 or struct.unpack("<II", raw[-8:]) != (m.crc, m.ulen & 0xFFFFFFFF):
        raise damaged(uri, f"gzip member {i} (at byte {m.coff}) does not match the index")
    if not m.ulen and raw[3] & 0x04 and not is_padding(raw):  # decoders skip extra fields
        raise damaged(uri, f"gzip member {i} (at byte {m.coff}) carries an extra field but is not padding")
    d = member_decoder()
    pieces: list[bytes] = []
    got = 0
    data: bytes | memoryview = raw
    try:
        while got <= m.ulen:
            piece = d.decompress(data, _PIECE)
            data = b""
            if piece:
                pieces.append(piece)
                got += len(piece)
            if d.eof or (not piece and d.needs_input):
                break
    except GZIP_ERRORS as exc:
        raise damaged(uri, f"gzip member {i} (at byte {m.coff}) is damaged ({exc})") from None
    if not d.eof or d.unused_data or got != m.ulen:
        raise damaged(uri, f"gzip member {i} (at byte {m.coff}) does not match the index")
    return pieces


class TarVerifier:
    """Hashes each file's data as the tar stream passes, in order, and compares it with the
    index's hash once the file's last byte has passed. Hard links share one hash. (A parallel
    load feeds it from its workers, a streamed one from the thread that inflates.)"""

    def __init__(self, index: Index, uri: str, stats: LoadStats) -> None:
        spans: dict[tuple[int, int], list[FileEntry]] = {}
        for e in index.files.values():
            spans.setdefault((index.members[e.first].uoff + e.offset, e.size), []).append(e)
        self._spans = sorted(spans.items())
        end = 0
        for (start, size), entries in self._spans:
            if start < end:
                raise damaged(uri, f"the index places {entries[0].name[:200]!r} over another file")
            end = start + size
        self._at = 0
        self._algorithm = index.algorithm
        self._hash = digests.new(self._algorithm)
        self._uri = uri
        self._stats = stats
        self.verified = 0  # files whose hash matched
        #: Keep going past a file that does not match, its error kept in :attr:`error` (the
        #: caller tells damage from an object replaced during the load once the stream ends).
        self.defer = False
        self.error: CorruptCheckpointError | None = None

    def feed(self, uoff: int, data: bytes | memoryview) -> None:
        """The tar stream's bytes from offset ``uoff`` on."""
        view = memoryview(data)
        end = uoff + len(view)
        spans = self._spans
        while self._at < len(spans):
            (start, size), entries = spans[self._at]
            if start > end or (start == end and size):
                return
            lo, hi = max(start, uoff), min(start + size, end)
            if hi > lo:
                self._hash.update(view[lo - uoff : hi - uoff])
            if start + size > end:
                return
            digest = self._hash.hexdigest()
            bad = next((e for e in entries if digest != e.digest), None)
            if bad is not None:
                label = digests.LABEL[self._algorithm]
                error = damaged(self._uri, f"{bad.name[:200]!r} does not match the {label} its index records")
                if not self.defer:
                    raise error
                self.error = self.error or error
            else:
                self._stats.files_verified += len(entries)
                self.verified += len(entries)
            self._hash = digests.new(self._algorithm)
            self._at += 1

    def finish(self) -> None:
        if self._at < len(self._spans):
            name = self._spans[self._at][1][0].name
            raise damaged(self._uri, f"the tar ends before {name[:200]!r} as its index places it")


class _OrderedHashing:
    """Feeds inflated batches to a :class:`TarVerifier` in batch order, on whichever thread
    finds the next one ready: a worker that inflated a batch hashes every batch ready from
    the next one on, unless another thread is already at it (then it leaves its batch to that
    one). No thread waits for its turn, so no hand-over waits for a thread to be scheduled."""

    def __init__(self, verifier: TarVerifier, batches: list[tuple[int, int]], index: Index) -> None:
        self._verifier = verifier
        self._batches = batches
        self._members = index.members
        self._lock = threading.Condition()
        self._ready: dict[int, list[bytes]] = {}
        self._busy = False
        self.done = 0  # batches hashed
        self.error: BaseException | None = None

    def add(self, k: int, data: list[bytes]) -> None:
        with self._lock:
            self._ready[k] = data
        self.run(wait=False)

    def run(self, *, wait: bool) -> None:
        """Hash the ready batches in order; if another thread is at it, return (or, with
        ``wait``, wait for it to stop and go on)."""
        with self._lock:
            while self._busy:
                if not wait:
                    return
                self._lock.wait(_POLL)
            self._busy = True
        try:
            while self.error is None:
                with self._lock:
                    data = self._ready.pop(self.done, None)
                    if data is None:
                        return
                at = self._members[self._batches[self.done][0]].uoff
                for piece in data:
                    self._verifier.feed(at, piece)
                    at += len(piece)
                self.done += 1
        except BaseException as exc:
            self.error = exc  # raised by the reader (a worker's own batch was fine)
        finally:
            with self._lock:
                self._busy = False
                self._lock.notify_all()


class InflatedStream:
    """A readable of the tar stream of an indexed object, inflated ahead of the reader on
    ``threads`` threads (at most ``2 * threads`` batches held), verified as described in the
    module docstring.

    The compressed bytes come from ``raw`` (the store's stream of the object, positioned at
    its start; the store's own download, with its parallel ranged reads where it makes them),
    read ahead in a thread of its own; the reader cuts batches of members from it and hands
    them to the pool. ``on_chunk`` (if given) gets the compressed size of each batch as the
    reader reaches it. ``close()`` stops the threads, even if interrupted; it does not close
    ``raw``.
    """

    def __init__(
        self,
        raw: BinaryIO,
        uri: str,
        index: Index,
        *,
        threads: int,
        on_chunk: Callable[[int], None] | None = None,
        stats: LoadStats | None = None,
    ) -> None:
        from ..util.cancellation import current
        from .pipeline import ReadAhead

        self._uri, self._index = uri, index
        self.stats = stats or LoadStats()
        self.stats.threads = threads
        self._verifier = TarVerifier(index, uri, self.stats)
        self._batches = _batches(index.members)
        self._hashing = _OrderedHashing(self._verifier, self._batches, index)
        self._next_batch = 0  # the next batch to read and submit
        self._taken = 0  # batches handed to the reader
        self._window = 2 * threads
        self._pending: list[Future[list[bytes]]] = []
        self._queue: deque[bytes] = deque()  # pieces of the current batch, not yet handed out
        self._cur = memoryview(b"")
        self._on_chunk = on_chunk
        self._scope = current()
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="fcp-inflate")
        self._ahead = ReadAhead(raw)
        try:
            self._fill()
        except BaseException:
            self.close()
            raise

    def _length(self, k: int) -> int:
        first, end = self._batches[k]
        members = self._index.members
        return members[end - 1].coff + members[end - 1].clen - members[first].coff

    def _fill(self) -> None:
        """Read batches and hand them to the pool, up to the window."""
        while len(self._pending) < self._window and self._next_batch < len(self._batches):
            k = self._next_batch
            length = self._length(k)
            raw = self._ahead.read(length)
            if len(raw) != length:
                from .pipeline import length_error

                start = self._index.members[self._batches[k][0]].coff
                raise length_error(start + len(raw), self._index.data_end)
            self._pending.append(self._pool.submit(self._load, k, raw))
            self._next_batch += 1

    def _load(self, k: int, raw: bytes) -> list[bytes]:
        """Inflate batch ``k`` from its compressed bytes ``raw``, and hash what is ready (a worker)."""
        first, end = self._batches[k]
        members = self._index.members
        start = members[first].coff
        view = memoryview(raw)
        out = [
            piece
            for i, m in enumerate(members[first:end], first)
            for piece in inflate_member(view[m.coff - start : m.coff - start + m.clen], m, i, self._uri)
        ]
        with self.stats._lock:
            self.stats.reads += 1
            self.stats.members += end - first
        self._hashing.add(k, out)
        return out

    def _wait(self, fut: Future[list[bytes]]) -> list[bytes]:
        while True:
            if self._scope is not None:
                self._scope.check()
            try:
                return fut.result(timeout=_POLL)
            except TimeoutError:
                continue

    def _check_hashing(self, *, behind: int) -> None:
        """Raise what hashing met; with it more than ``behind`` batches behind the reader,
        hash (or wait for the thread hashing) until it is not."""
        hashing = self._hashing
        while hashing.error is None and self._taken - hashing.done > behind:
            hashing.run(wait=True)
        if hashing.error is not None:
            raise hashing.error

    def _next(self) -> bool:
        """Make the next member current; False at the end of the tar's members."""
        while not self._queue:
            self._check_hashing(behind=self._window)  # bounds the batches held for hashing
            if not self._pending:
                self._check_hashing(behind=0)
                self._verifier.finish()
                return False
            # a copy: the list itself may still be waiting to be hashed
            self._queue = deque(self._wait(self._pending.pop(0)))
            if self._on_chunk is not None:
                self._on_chunk(self._length(self._taken))
            self._taken += 1
            self._fill()
        self._cur = memoryview(self._queue.popleft())
        return True

    def readable(self) -> bool:
        return True

    def read1(self, n: int = -1) -> memoryview:
        """Up to ``n`` bytes (at most :data:`_PIECE`) of the current member, as a view (no
        copy); empty at the end."""
        while not self._cur:
            if not self._next():
                return memoryview(b"")
        if n is None or n < 0 or n > _PIECE:
            n = _PIECE
        out = self._cur[:n]
        self._cur = self._cur[n:]
        return out

    def read(self, n: int = -1) -> bytes:
        parts: list[bytes] = []
        got = 0
        while n is None or n < 0 or got < n:
            piece = self.read1(-1 if n is None or n < 0 else n - got)
            if not piece:
                break
            parts.append(bytes(piece))
            got += len(piece)
        return b"".join(parts)

    def close(self) -> None:
        for fut in self._pending:
            fut.cancel()
        self._ahead.close()
        finish(lambda: self._pool.shutdown(wait=True, cancel_futures=True))

    def __enter__(self) -> InflatedStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def pays(index: Index) -> bool:
    """Whether a parallel load of the object is worth it: its members are less than
    :data:`STORED_RATIO` of the tar they hold, and it holds at least :data:`FILE_BYTES_MIN`
    bytes of tar per file."""
    tar = sum(m.ulen for m in index.members)
    return index.data_end < STORED_RATIO * tar and tar >= FILE_BYTES_MIN * max(len(index.files), 1)


def placement_check(index: Index, uri: str) -> Callable[[str, int, int], None]:
    """The check of each regular file the tar extracts: its index entry has its place and size
    (so the data written is the data whose hash was verified)."""

    def check(name: str, offset: int, size: int) -> None:
        e = index.files.get(name)
        if e is None or index.members[e.first].uoff + e.offset != offset or e.size != size:
            raise damaged(
                uri, f"the tar's file {name[:200]!r} (at byte {offset}) is not where its index places it"
            )

    return check


def restore_indexed(
    store: BlobStore,
    uri: str,
    size: int,
    dest: str,
    *,
    on_chunk: Callable[[int], None] | None = None,
    stats: LoadStats | None = None,
    hashes: FileHashes | None = None,
) -> bool:
    """Restore the folder object at ``uri`` into the empty folder ``dest`` by parallel inflate;
    False (``dest`` untouched) where it does not apply: :func:`inflate_threads` is 1, a store
    without ranged reads, an object under :data:`PARALLEL_MIN` bytes or without an index, or
    (unless ``FLYTE_CHECKPOINT_INFLATE_THREADS`` is set) one where it does not :func:`pays`.
    ``hashes`` (:func:`.filehashes.for_object`, for the streamed load that follows a False):
    the trailer it read is used, and the index read is kept in it, for that load's tail check.

    Raises:
        CorruptCheckpointError: the index, a member, a file's hash or the tar is damaged.
        UnsafeArchiveError, WorkspaceError, PathTooLongError, StoreError: as
            :func:`~.restore.restore` (the same extractor and limits).
        TransientError: a ranged read came back short.
    """
    from ..util.limits import env_count

    threads = inflate_threads()
    if threads < 2 or not getattr(store, "supports_ranges", False) or size < PARALLEL_MIN:
        return False
    from ..uri import redact
    from ..util.limits import DiskBudget, LoadLimits
    from .archive import unpack
    from .index import read_index

    index = read_index(store, uri, size, hashes.tail if hashes is not None else None)
    if index is None:
        return False
    if hashes is not None:
        hashes.index = index
    if env_count(THREADS_ENV, "threads") is None and not pays(index):
        return False
    limits = LoadLimits.from_env()
    source = redact(uri)
    budget = DiskBudget(dest, limits.disk_reserve, source=source)
    threads = min(threads, max(1, len(_batches(index.members))))
    with (
        store.open_read(uri) as raw,
        InflatedStream(raw, uri, index, threads=threads, on_chunk=on_chunk, stats=stats) as stream,
    ):
        unpack(
            stream,  # type: ignore[arg-type]
            dest,
            limits=limits,
            budget=budget,
            source=source,
            on_file=placement_check(index, uri),
        )
    if on_chunk is not None:
        on_chunk(size - index.data_end)  # the index, read before the members
    return True


__all__ = [
    "BATCH",
    "MIN_CORES",
    "PARALLEL_MIN",
    "THREADS_ENV",
    "inflate_threads",
    "InflatedStream",
    "LoadStats",
    "inflate_member",
    "TarVerifier",
    "restore_indexed",
]
