"""Planning an incremental folder save against the previous object's index (docs/FORMAT.md).

A large file's gzip members hold exactly its data and tar padding, so a file whose hash
(:mod:`.digests`) the previous object's index records is a byte range of that object: the save copies it on
the server (:meth:`~flyte_checkpoint.storage.blobstore.BlobWriter.copy`) instead of
compressing and sending it, and the new index lists the copied members with the same
lengths and CRCs. :func:`find_base` picks the object to copy from; :class:`Reuse` answers the
packer's questions about it. A store without the capability gets ``None``: everything is sent.

Every copy is checked against the CRC-32 of the members' stored bytes that the base's index
records (version 4): the store's writer raises :class:`~flyte_checkpoint.errors.CopyDamagedError`
at the commit where the base's bytes are not those (bit rot, a bad copy of the object), and
:func:`save_checked` then warns, naming the base and the files, and saves again sending those
files instead of copying them. A base whose index records no such CRC (older versions) is not
copied from.
"""

from __future__ import annotations

import bisect
import logging
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from ..errors import CheckpointPermissionError, CorruptCheckpointError, UnsafeArchiveError
from ..uri import redact
from ..util.forksafe import lock
from . import digests
from . import tarstream as ts
from .index import INDEX_AHEAD, FileEntry, Index, Member, read_index

if TYPE_CHECKING:
    from ..storage.blobstore import BlobStore, CopyLimits, CopySource

log = logging.getLogger("flyte_checkpoint")
T = TypeVar("T")
_limit_lock = lock()

#: The most bytes of small members (headers, small files) fetched to compare with what the
#: save would write there, where the store needs long copies (S3).
_GAP_MAX = 4 * 1024 * 1024
#: A run of copies this long is given to the store while the packer goes on (a copy part
#: of its own, copied in parallel with the next ones); longer in a large object
#: (:func:`copy_chunk`), so that S3's 10,000 parts hold it.
_COPY_RUN = 64 * 1024 * 1024


def copy_chunk(run: int, offset: int, max_copy: int | None = None) -> int:
    """The length of a copy given to the store ahead of the rest of its run: ``run`` (the
    planner's :attr:`Reuse.copy_run`), or 1/1024 of the object so far (``offset``) where that is
    more, at most ``max_copy``. Parts of 64 MiB to 64 GiB, then growing with the object, take
    about 5,500 parts to reach 5 TiB, within S3's 10,000."""
    chunk = max(run, offset >> 10)
    return min(chunk, max_copy) if max_copy else chunk


@dataclass(frozen=True)
class Copy:
    """Members ``first .. last`` of the base object, copied as they are."""

    first: int
    last: int
    start: int  # compressed offset of member ``first``
    length: int  # compressed bytes of the members
    members: list[Member]


class Reuse:
    """The base object of an incremental save: its index, how to copy from it, and which of
    its files (by size and hash) are copyable ranges."""

    def __init__(self, store: BlobStore, source: CopySource, index: Index, limits: CopyLimits) -> None:
        self.store = store
        self.source = source
        self.index = index
        self.limits = limits
        #: Copies shorter than this are written instead (the store's minimum piece: a shorter
        #: copy would be read back and sent by the writer anyway).
        self.min_copy = max(limits.min_part, limits.min_copy, 1)
        self._by_size: dict[int, dict[str, tuple[int, int]]] = {}
        # Every file stored in members of its own is a candidate, however short: a run of
        # adjacent unchanged files is one copy (the packer copies a short file only as part of a
        # run of at least ``min_copy``, :meth:`~.archive._Packer._copied`).
        spans = [(e, self._members_of(e, 1)) for e in index.files.values()]
        found = [(e, span) for e, span in spans if span is not None]
        #: Files of the base that would be copies but for ``min_copy``: all of them, when
        #: together they are stored in less than it (nothing can ever be copied from it).
        self.too_short = 0
        if self.min_copy > 1 and sum(self._span(*span).length for _, span in found) < self.min_copy:
            self.too_short, found = len(found), []
        for entry, span in found:
            self._by_size.setdefault(entry.size, {}).setdefault(entry.digest, span)
        #: How long a run of adjacent copies grows before the store is given (the first part of)
        #: it, so the store copies while the packer goes on: :data:`_COPY_RUN`, and for a store
        #: whose pieces have a minimum, at least ``copy_keep`` more stay in the run (its end
        #: never becomes a short copy). :func:`copy_chunk` grows it with the object.
        self.copy_run: int | None = _COPY_RUN
        self.copy_keep = limits.min_part
        #: Files copied and bytes copied, by this save (for logs and tests).
        self.files_copied = 0
        self.bytes_copied = 0
        #: Members found damaged by an earlier try of this save: never copied.
        self._damaged: set[int] = set()

    def _members_of(self, e: FileEntry, minimum: int) -> tuple[int, int] | None:
        """The members that hold the entry's data from their first byte and its tar padding,
        nothing else (the padding may be a member of its own after the data's), if they hold
        ``minimum`` compressed bytes or more."""
        if e.offset != 0 or e.size == 0:
            return None
        members = self.index.members
        data = sum(m.ulen for m in members[e.first : e.last + 1])
        pad = ts.padding(e.size)
        last = e.last
        if data == e.size and pad and last + 1 < len(members) and members[last + 1].ulen == pad:
            last += 1
        elif data != e.size + pad:
            return None
        if sum(m.clen for m in members[e.first : last + 1]) < minimum:
            return None
        return e.first, last

    def avoid(self, damaged: Iterable[tuple[CopySource, int, int]]) -> list[int]:
        """Copy none of the members that overlap these ranges (``(source, start, length)``, as
        :class:`~flyte_checkpoint.errors.CopyDamagedError` names them) of this base (ranges
        of another object, or of another version of it, say nothing of it); returns the
        members' numbers."""
        members = self.index.members
        starts = [m.coff for m in members]
        found: set[int] = set()
        for source, start, length in damaged:
            if source != self.source or length <= 0:
                continue
            first = max(bisect.bisect_right(starts, start) - 1, 0)
            last = bisect.bisect_right(starts, start + length - 1) - 1
            found.update(range(first, last + 1))
        if found:
            self._damaged |= found
            for size, spans in list(self._by_size.items()):
                kept = {d: span for d, span in spans.items() if found.isdisjoint(range(span[0], span[1] + 1))}
                if kept:
                    self._by_size[size] = kept
                else:
                    del self._by_size[size]
        return sorted(found)

    def held_by(self, members: Iterable[int]) -> list[str]:
        """The names of the files whose data lies in these members, in the index's order."""
        wanted = set(members)
        return [
            e.name for e in self.index.files.values() if not wanted.isdisjoint(range(e.first, e.last + 1))
        ]

    @property
    def copyable(self) -> int:
        """How many distinct files of the base (by size and hash) a save may copy."""
        return sum(len(by_digest) for by_digest in self._by_size.values())

    def wants(self, size: int) -> bool:
        """Whether a file of ``size`` bytes may be a copy (a copyable file has that size)."""
        return size in self._by_size

    def match(self, size: int, digest: str) -> Copy | None:
        """The members to copy for a file of ``size`` bytes with this hash, if any."""
        found = self._by_size.get(size, {}).get(digest)
        return None if found is None else self._span(*found)

    def short(self, span: Copy) -> bool:
        """Whether ``span`` alone is shorter than the store's shortest copy (copied only as
        part of a longer run)."""
        return span.length < self.min_copy

    def gap_is(self, first: int, pending: bytes) -> int | None:
        """The first of the base's members just before member ``first`` that hold exactly
        ``pending`` by the hash the base recorded of them (what :meth:`gap_before` would copy,
        known without reading); None where it recorded nothing there, other bytes, or they are
        damaged."""
        if first < 1 or not pending:
            return None
        recorded = self.index.gaps.get(self.index.members[first].uoff)
        if recorded is None or recorded[0] != len(pending):
            return None
        start, total = first, 0
        while start > 0 and total < len(pending):
            start -= 1
            total += self.index.members[start].ulen
        if total != len(pending) or not self._damaged.isdisjoint(range(start, first)):
            return None
        return start if recorded[1] == digests.of_bytes(pending, self.index.algorithm).hex() else None

    def _span(self, first: int, last: int) -> Copy:
        members = self.index.members[first : last + 1]
        m0 = members[0]
        return Copy(first, last, m0.coff, sum(m.clen for m in members), members)

    def gap_before(self, first: int, pending: bytes) -> Copy | None:
        """The members just before member ``first`` whose content is exactly ``pending`` (the
        headers and small files the save would compress there), when the store needs long
        copies (a minimum piece, or a shortest copy worth a request): copying them too joins
        the copies on either side into one. None otherwise."""
        if self.min_copy <= 1 or not pending or len(pending) > _GAP_MAX:
            return None
        start, total = first, 0
        while start > 0 and total < len(pending):
            start -= 1
            total += self.index.members[start].ulen
        if total != len(pending) or not self._damaged.isdisjoint(range(start, first)):
            return None
        span = self._span(start, first - 1)
        end = self.index.members[first].uoff
        recorded = self.index.gaps.get(end)
        if recorded is not None:  # hashed when the base was saved: nothing to read back
            if recorded != (len(pending), digests.of_bytes(pending, self.index.algorithm).hex()):
                return None
            return span
        if span.length > _GAP_MAX:
            return None
        from .compression import inflate

        raw = self.store.read_range(self.source.uri, span.start, span.length)
        at = 0
        view = memoryview(pending)
        for m, off in zip(span.members, _offsets(span.members), strict=True):
            data, whole = inflate(raw[off : off + m.clen], m.ulen)
            if (
                not whole
                or len(data) != m.ulen
                or zlib.crc32(data) != m.crc
                or view[at : at + m.ulen] != data
            ):
                return None
            at += m.ulen
        return span


def _offsets(members: list[Member]) -> list[int]:
    out, at = [], 0
    for m in members:
        out.append(at)
        at += m.clen
    return out


def find_base(
    store: BlobStore,
    candidates: list[str],
    same_store: Callable[[str], bool],
    on_source: Callable[[], None] | None = None,
) -> Reuse | None:
    """The first of ``candidates`` (URIs: the destination, then on an attempt's first save the
    previous attempt's object) that the store can copy from and that carries an index; None
    when there is none, or the store cannot copy (said at debug level: everything is sent).
    ``on_source`` is called when a candidate is there, before its index is read (an
    incremental save starts hashing its tree then: :func:`~.archive.hash_ahead`)."""
    limits = store.copy_limits
    if limits is None:
        if candidates:
            log.debug("%s cannot copy ranges on the server: the save sends every file", type(store).__name__)
        return None
    for uri in candidates:
        if not same_store(uri):
            log.debug("%s is on another store: an incremental save cannot copy from it", redact(uri))
            continue
        try:
            source = store.copy_source(uri)
            if source is None:
                continue
            if on_source is not None:
                on_source()
            index = read_index(store, uri, source.size, ahead=INDEX_AHEAD)  # trailer and index: one read
        except (CorruptCheckpointError, UnsafeArchiveError) as exc:
            log.warning("the index of %s is refused (%s): the save sends every file", redact(uri), exc)
            continue
        except CheckpointPermissionError as exc:  # write-only credentials: a full save still works
            log.debug("cannot read %s to copy from it (%s): the save sends every file", redact(uri), exc)
            continue
        if index is None:
            continue
        if index.algorithm != digests.CURRENT:  # its hashes cannot tell which files are unchanged
            log.info(
                "%s records %s hashes (an older index): this save sends every file; the next one copies",
                redact(uri),
                digests.LABEL[index.algorithm],
            )
            continue
        if not index.checked:  # a copy of its members could not be checked (issue 32, item 5)
            log.info(
                "%s records no checksum of its stored members (an older index), against which a"
                " copy of them is checked: this save sends every file; the next one copies",
                redact(uri),
            )
            continue
        if store.copy_source(uri) != source:  # replaced while its index was read: not that index
            from ..storage.blobstore import copy_source_changed

            raise copy_source_changed(source, "while its index was read")
        reuse = Reuse(store, source, index, limits)
        if not reuse.copyable and reuse.too_short:
            _say_limit_once(store, reuse, uri)
        return reuse
    return None


#: Tries of a folder save after its first found copied bytes damaged: one more avoiding what
#: was found (damage found by then was all found: each writer checks every copy before it
#: raises), then one that copies nothing, should the base have been replaced meanwhile by
#: another damaged object.
REDOS = 2


def save_checked(plan: Callable[[], Reuse | None], write: Callable[[Reuse | None], T]) -> T:
    """``write(plan())``: a folder save, copying from the base ``plan`` finds (None: none).

    Where its copies turn out damaged (:class:`~flyte_checkpoint.errors.CopyDamagedError`:
    nothing was committed), warns naming the base and the files whose members are damaged,
    and saves again with ``plan()``'s base told to copy none of those (then, if that finds
    damage too, copying nothing). Returns what the ``write`` that committed returns.
    """
    from ..errors import CopyDamagedError

    damaged: list[tuple[CopySource, int, int]] = []
    for attempt in range(REDOS + 1):
        reuse = plan() if attempt < REDOS else None
        if reuse is not None:
            reuse.avoid(damaged)
        try:
            return write(reuse)
        except CopyDamagedError as exc:
            if reuse is None or attempt == REDOS:  # pragma: no cover - nothing was copied
                raise
            damaged.extend(exc.damaged)
            names = [n if n.isprintable() else repr(n) for n in reuse.held_by(reuse.avoid(exc.damaged))]
            what = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
            log.warning(
                "the previous checkpoint %s is damaged: the stored bytes of %s are not what its"
                " index records (bit rot, or a bad copy of the object), so this save sends %s from"
                " the folder instead of copying %s",
                redact(reuse.source.uri),
                what or "tar headers between its files",
                *(("them", "them") if attempt + 1 < REDOS else ("every file", "any")),
            )
    raise AssertionError("unreachable")  # pragma: no cover


_limit_said_in: int | None = None  # the process that said it (a forked child says it again)


def _say_limit_once(store: BlobStore, reuse: Reuse, uri: str) -> None:
    """Say, once per process at INFO, that an incremental save copies nothing from ``uri``
    because its files together are shorter than the store's shortest copy (S3's 5 MiB part)."""
    import os

    global _limit_said_in
    with _limit_lock.get():
        if _limit_said_in == os.getpid():
            return
        _limit_said_in = os.getpid()
    from ..progress import format_bytes
    from ..storage.storelog import unwrapped

    limits = reuse.limits
    what = "minimum part" if limits.min_part >= limits.min_copy else "shortest copy worth a request"
    least = format_bytes(reuse.min_copy)
    log.info(
        "an incremental save copies nothing from %s: the %d files it could copy are stored in"
        " less than %s (%d bytes) together, the %s of %s, so every file is sent again; runs of"
        " adjacent unchanged files stored in %s or more are copied (said once per process)",
        redact(uri),
        reuse.too_short,
        least,
        reuse.min_copy,
        what,
        type(unwrapped(store)).__name__,
        least,
    )


__all__ = ["Copy", "Reuse", "copy_chunk", "find_base", "save_checked"]
