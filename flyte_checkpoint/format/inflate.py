"""Load an indexed folder object (docs/FORMAT.md) by inflating its gzip members on several threads.

The index gives every member's compressed offset and length, its uncompressed length and
CRC-32, and every file's place and SHA-256. :func:`restore_indexed` reads the index by two
ranged reads, then streams the object as a streamed load does (the store's own download),
cut into batches of members of a few MiB that a pool of threads inflates (the decompressors
release the GIL) while the next batch downloads, and hands the tar stream, in order, to the same extractor as
a streamed load (:func:`~.archive.unpack`): headers are parsed and every archive-safety rule
applies unchanged. On the way, each member's length and CRC-32 are checked against the index,
each file's data against its SHA-256, and each regular file the tar extracts against its index
entry (name, place, size), so every restored byte is verified. Any mismatch is a
:class:`~flyte_checkpoint.errors.CorruptCheckpointError`; the caller discards what was restored.

Objects without an index, stores without ranged reads and objects too small for the extra
reads to pay load by streaming, as before (:func:`~.restore.restore`).
"""

from __future__ import annotations

import hashlib
import struct
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO

from ..errors import CorruptCheckpointError
from ..interrupts import finish
from .compression import GZIP_ERRORS, member_decoder

if TYPE_CHECKING:
    from ..storage.blobstore import BlobStore
    from .index import FileEntry, Index, Member

#: Objects smaller than this load by streaming: below it, the two ranged reads that find the
#: index cost more than parallel inflate saves (benchmarks/, ``--data small``).
PARALLEL_MIN = 4 * 1024 * 1024
#: Uncompressed bytes of members per ranged read (at least one member).
BATCH = 8 * 1024 * 1024
_POLL = 0.2


def inflate_threads() -> int:
    """Threads that read and inflate: one per available core, at least 2 (reads wait on the
    store while others inflate), at most 8."""
    from .pipeline import default_workers

    return max(2, default_workers())


@dataclass
class LoadStats:
    """What :func:`restore_indexed` did: ranged reads of members, members inflated, files
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


def _corrupt(uri: str, what: str) -> CorruptCheckpointError:
    from ..uri import redact

    return CorruptCheckpointError(f"{redact(uri)} is damaged: {what}; save the checkpoint again")


def inflate_member(raw: memoryview, m: Member, i: int, uri: str) -> bytes:
    """The data of member ``i``, whose compressed bytes are ``raw``; raises unless it is one
    complete gzip member holding ``m.ulen`` bytes with CRC-32 ``m.crc``. The decoder checks the
    data against the member's own CRC-32 and length, which must equal the index's."""
    if len(raw) < 18 or struct.unpack("<II", raw[-8:]) != (m.crc, m.ulen & 0xFFFFFFFF):
        raise _corrupt(uri, f"gzip member {i} (at byte {m.coff}) does not match the index")
    d = member_decoder()
    try:
        data = d.decompress(raw, m.ulen + 1)
    except GZIP_ERRORS as exc:
        raise _corrupt(uri, f"gzip member {i} (at byte {m.coff}) is damaged ({exc})") from None
    if not d.eof or d.unused_data or len(data) != m.ulen:
        raise _corrupt(uri, f"gzip member {i} (at byte {m.coff}) does not match the index")
    return data


class _Verifier:
    """Hashes each file's data as the tar stream passes, in order, and compares it with the
    index's SHA-256 once the file's last byte has passed. Hard links share one hash."""

    def __init__(self, index: Index, uri: str, stats: LoadStats) -> None:
        spans: dict[tuple[int, int], list[FileEntry]] = {}
        for e in index.files.values():
            spans.setdefault((index.members[e.first].uoff + e.offset, e.size), []).append(e)
        self._spans = sorted(spans.items())
        end = 0
        for (start, size), entries in self._spans:
            if start < end:
                raise _corrupt(uri, f"the index places {entries[0].name[:200]!r} over another file")
            end = start + size
        self._at = 0
        self._hash = hashlib.sha256()
        self._uri = uri
        self._stats = stats

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
            for e in entries:
                if digest != e.sha256:
                    raise _corrupt(self._uri, f"{e.name[:200]!r} does not match the SHA-256 its index records")
            self._stats.files_verified += len(entries)
            self._hash = hashlib.sha256()
            self._at += 1

    def finish(self) -> None:
        if self._at < len(self._spans):
            name = self._spans[self._at][1][0].name
            raise _corrupt(self._uri, f"the tar ends before {name[:200]!r} as its index places it")


class InflatedStream:
    """A readable of the tar stream of an indexed object, inflated ahead of the reader on
    ``threads`` threads (at most ``2 * threads`` batches held), verified as described in the
    module docstring.

    The compressed bytes come from ``raw`` (the store's stream of the object, positioned at
    its start): each worker reads its batch of members from it in turn, in order, then
    inflates them while the next worker reads. So the download is the store's own (parallel
    ranged reads where it makes them) and overlaps the inflate. ``on_chunk`` (if given) gets
    the compressed size of each batch as the reader reaches it. ``close()`` stops the threads
    (after the reads in flight), even if interrupted; it does not close ``raw``.
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
        from ..cancellation import current

        self._raw, self._uri, self._index = raw, uri, index
        self.stats = stats or LoadStats()
        self.stats.threads = threads
        self._verifier = _Verifier(index, uri, self.stats)
        self._batches = _batches(index.members)
        self._next_batch = 0
        self._window = 2 * threads
        self._pending: list[Future[list[bytes]]] = []
        self._turn = threading.Condition()
        self._reading = 0  # the batch whose turn it is to be read from ``raw``
        self._broken = False  # a read failed (or the stream closed): later batches are not read
        self._member = 0  # the next member to hand out
        self._queue: list[bytes] = []  # inflated members of the current batch, not yet handed out
        self._cur = memoryview(b"")
        self._on_chunk = on_chunk
        self._scope = current()
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="fcp-inflate")
        self._fill()

    def _fill(self) -> None:
        while len(self._pending) < self._window and self._next_batch < len(self._batches):
            first, end = self._batches[self._next_batch]
            self._pending.append(self._pool.submit(self._load, self._next_batch, first, end))
            self._next_batch += 1

    def _read(self, k: int, length: int) -> bytes:
        """Batch ``k``'s ``length`` compressed bytes, read from ``raw`` once batch ``k - 1``'s are."""
        from ..errors import OperationCancelledError

        with self._turn:
            while self._reading != k and not self._broken:
                self._turn.wait(_POLL)
            if self._broken:
                raise OperationCancelledError("the load stopped before this part was read")
            try:
                raw = self._raw.read(length)
                if len(raw) != length:
                    from .restore import length_error

                    start = self._index.members[self._batches[k][0]].coff
                    raise length_error(start + len(raw), self._index.data_end)
            except BaseException:
                self._broken = True
                raise
            finally:
                self._reading += 1
                self._turn.notify_all()
        return raw

    def _load(self, k: int, first: int, end: int) -> list[bytes]:
        """Read batch ``k`` (members ``first .. end - 1``) in turn and inflate each member (a worker)."""
        members = self._index.members
        start = members[first].coff
        raw = self._read(k, members[end - 1].coff + members[end - 1].clen - start)
        view = memoryview(raw)
        out = [
            inflate_member(view[m.coff - start : m.coff - start + m.clen], m, i, self._uri)
            for i, m in zip(range(first, end), members[first:end])
        ]
        with self.stats._lock:
            self.stats.reads += 1
            self.stats.members += end - first
        return out

    def _wait(self, fut: Future[list[bytes]]) -> list[bytes]:
        while True:
            if self._scope is not None:
                self._scope.check()
            try:
                return fut.result(timeout=_POLL)
            except TimeoutError:
                continue

    def _next(self) -> bool:
        """Make the next member current; False at the end of the tar's members."""
        while not self._queue:
            if not self._pending:
                self._verifier.finish()
                return False
            fut = self._pending.pop(0)
            self._queue = self._wait(fut)
            first, end = self._batches[self._next_batch - len(self._pending) - 1]
            self._fill()
            if self._on_chunk is not None:
                members = self._index.members
                self._on_chunk(members[end - 1].coff + members[end - 1].clen - members[first].coff)
        data = self._queue.pop(0)
        self._verifier.feed(self._index.members[self._member].uoff, data)
        self._member += 1
        self._cur = memoryview(data)
        return True

    def readable(self) -> bool:
        return True

    def read1(self, n: int = -1) -> memoryview:
        """Up to ``n`` bytes of the current member, as a view (no copy); empty at the end."""
        while not self._cur:
            if not self._next():
                return memoryview(b"")
        if n is None or n < 0:
            n = len(self._cur)
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
        with self._turn:
            self._broken = True  # workers waiting for their turn give up
            self._turn.notify_all()
        for fut in self._pending:
            fut.cancel()
        finish(lambda: self._pool.shutdown(wait=True, cancel_futures=True))

    def __enter__(self) -> InflatedStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_file(index: Index, uri: str) -> Callable[[str, int, int], None]:
    """The check of each regular file the tar extracts: its index entry has its place and size
    (so the data written is the data whose SHA-256 was verified)."""

    def check(name: str, offset: int, size: int) -> None:
        e = index.files.get(name)
        if e is None or index.members[e.first].uoff + e.offset != offset or e.size != size:
            raise _corrupt(uri, f"the tar's file {name[:200]!r} (at byte {offset}) is not where its index places it")

    return check


def restore_indexed(
    store: BlobStore,
    uri: str,
    size: int,
    dest: str,
    *,
    on_chunk: Callable[[int], None] | None = None,
    stats: LoadStats | None = None,
) -> bool:
    """Restore the folder object at ``uri`` into the empty folder ``dest`` by parallel inflate;
    False (``dest`` untouched) where it does not apply: a store without ranged reads, an object
    under :data:`PARALLEL_MIN` bytes or without an index.

    Raises:
        CorruptCheckpointError: the index, a member, a file's SHA-256 or the tar is damaged.
        UnsafeArchiveError, WorkspaceError, PathTooLongError, StoreError: as
            :func:`~.restore.restore` (the same extractor and limits).
        TransientError: a ranged read came back short.
    """
    if not getattr(store, "supports_ranges", False) or size < PARALLEL_MIN:
        return False
    from ..limits import DiskBudget, LoadLimits
    from ..uri import redact
    from .archive import unpack
    from .index import read_index

    index = read_index(store, uri, size)
    if index is None:
        return False
    limits = LoadLimits.from_env()
    source = redact(uri)
    budget = DiskBudget(dest, limits.disk_reserve, source=source)
    threads = min(inflate_threads(), max(1, len(_batches(index.members))))
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
            on_file=_check_file(index, uri),
        )
    if on_chunk is not None:
        on_chunk(size - index.data_end)  # the index, read before the members
    return True


__all__ = ["BATCH", "PARALLEL_MIN", "InflatedStream", "LoadStats", "inflate_member", "restore_indexed"]
