"""Restore one stored object into a folder: a tarball is extracted, anything else is a payload.

The decision comes from the content (a tar stream, optionally gzip-compressed), not
from names or metadata, so objects written by other tools restore too. The rule
(:func:`sniff`): an object is a tarball only if it begins with a tar header (not all
zeros, checksum right), or is a gzip stream whose data begins with one; a gzip stream
that is wholly an empty archive (zero blocks only: what saving an empty folder writes)
is an empty tarball. Everything else is a payload and is restored byte for byte, even
when it starts like gzip or tar. Once an object is a tarball, any damage after that
first header raises :class:`CorruptCheckpointError`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, BinaryIO

from ..errors import CorruptCheckpointError, StoreError, TransientError
from ..util.limits import DiskBudget, LoadLimits
from ..util.sparse import SparseWriter
from . import tarstream as ts
from .archive import file_system_error, unpack
from .compression import GZIP_MAGIC, decompressor, inflate
from .pipeline import ReadAhead, length_error

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..storage.blobstore import BlobStore
    from .filehashes import FileHashes

PAYLOAD = "payload"
_HEAD = 64 * 1024
_CHUNK = 1024 * 1024
#: The largest empty archive: two zero blocks padded to a record of GNU tar's largest blocking factor.
_EMPTY_ARCHIVE_MAX = 1024 * 1024


class CountingReader:
    """A readable that serves ``head`` first, then ``raw``, and counts what it served.

    ``eof`` turns true once ``raw`` has returned nothing (its end).
    """

    def __init__(self, head: bytes, raw: BinaryIO) -> None:
        self._head = memoryview(head)
        self._raw = raw
        self.count = 0
        self.eof = False

    def read(self, n: int = -1) -> bytes:
        if self._head:
            if n < 0 or n >= len(self._head):
                out = bytes(self._head)
                self._head = memoryview(b"")
                if n > len(out) or n < 0:
                    more = self._raw_read(-1 if n < 0 else n - len(out))
                    out += more
            else:
                out = bytes(self._head[:n])
                self._head = self._head[n:]
        else:
            out = self._raw_read(n)
        self.count += len(out)
        return out

    def read1(self, n: int = -1) -> bytes | memoryview:
        """Up to ``n`` bytes as the source holds them (no copy where it has ``read1``)."""
        out: bytes | memoryview
        if self._head:
            out = self._head[:n] if n >= 0 else self._head
            self._head = self._head[len(out) :]
        else:
            read = getattr(self._raw, "read1", self._raw.read)
            out = read(n)
            if not out and n:
                self.eof = True
        self.count += len(out)
        return out

    def _raw_read(self, n: int) -> bytes:
        out = self._raw.read(n)
        if not out and n:
            self.eof = True
        return out

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # gzip readers use readinto when present
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    @contextmanager
    def whole(self, expected: int) -> Iterator[None]:
        """Around reading an object of ``expected`` bytes through this to its end: raises
        :func:`length_error` when another count of bytes arrived, also in place of the
        ``CorruptCheckpointError`` of a tarball that ended where a short read ended it."""
        try:
            yield
        except CorruptCheckpointError:
            if self.eof and self.count != expected:
                raise length_error(self.count, expected) from None
            raise
        if self.count != expected:
            raise length_error(self.count, expected)


def read_head(raw: BinaryIO) -> bytes:
    """Up to the first 64 KiB of a stream: enough to tell a tarball from a payload."""
    parts, got = [], 0
    while got < _HEAD:
        chunk = raw.read(_HEAD - got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def sniff(head: bytes, size: int) -> str:
    """What an object of ``size`` bytes whose first bytes are ``head`` holds.

    ``"tar.gz"`` or ``"tar"`` for a tarball, ``"gzip"`` for a payload that starts with
    gzip's magic bytes, ``"raw"`` for any other payload. Never raises: whatever is not a
    tarball by the rule in this module's docstring is a payload.
    """
    if head[:2] == GZIP_MAGIC:
        first, _ = inflate(head, ts.BLOCK)
        if ts.is_header(first):
            return "tar.gz"
        if first == ts.ZERO_BLOCK and len(head) >= size and _is_empty_archive(head):
            return "tar.gz"
        return "gzip"
    return "tar" if ts.is_header(head) else "raw"


def _is_empty_archive(data: bytes) -> bool:
    """``data`` is a complete gzip stream of an empty tar archive (zero blocks, at least two)."""
    inner, complete = inflate(data, _EMPTY_ARCHIVE_MAX)
    return complete and len(inner) >= 2 * ts.BLOCK and len(inner) % ts.BLOCK == 0 and not inner.strip(b"\0")


def restore(
    raw: BinaryIO,
    dest: str,
    expected_size: int,
    *,
    max_bytes: int | None = None,
    limits: LoadLimits | None = None,
    uri: str | None = None,
    hashes: FileHashes | None = None,
) -> bool:
    """Restore the object read from ``raw`` into the empty folder ``dest``.

    Returns True for a tarball (the tree is in ``dest``), False for a payload
    (``dest/payload``). Reads the object to its end and checks its length. ``limits``
    default to :meth:`LoadLimits.from_env`; ``max_bytes``, if given, replaces theirs.
    ``uri`` (credentials already removed, or not: it is redacted here) names the object
    in error messages. With ``hashes`` (:func:`.filehashes.for_object`: the object's trailer
    names an index), a gzip tarball's files are hashed as they are extracted and checked
    against the index once the stream has ended; or, where the index was read before the
    load, hashed where it places them as the stream is inflated (:meth:`.filehashes.FileHashes.placed`).

    Raises:
        CorruptCheckpointError: a damaged or truncated tarball.
        UnsafeArchiveError: a tarball member that would escape ``dest``, or a tarball over
            a limit.
        WorkspaceError: the file system of ``dest`` is full (or would go below the
            reserve), or a file is over a size limit.
        PathTooLongError: a member's name is too long for that file system.
        TransientError: fewer or more bytes arrived than the store reported, or the index
            the stream ended in is not the one read before the load (the object changed).
        ValueError: a limit's environment variable holds something other than a number.
    """
    from dataclasses import replace

    from ..uri import redact

    limits = limits or LoadLimits.from_env()
    if max_bytes is not None:
        limits = replace(limits, max_bytes=max_bytes)
    source = redact(uri) if uri else "the checkpoint"
    budget = DiskBudget(dest, limits.disk_reserve, source=source)
    head = read_head(raw)
    stream = CountingReader(head, raw)
    kind = sniff(head, expected_size)
    members = None
    placed = hashes.placed(uri or source) if hashes is not None and kind == "tar.gz" else None
    try:
        with stream.whole(expected_size):
            if kind == "tar.gz":
                members = decompressor(stream)  # type: ignore[arg-type]
                # decompression (which releases the GIL) runs in its own thread, ahead of unpacking;
                # with the index known, the files' bytes are hashed there too, where they are hot
                tar = placed.wrap(members) if placed is not None else members  # type: ignore[arg-type]
                with ReadAhead(tar, chunk_size=_CHUNK) as inflated:  # type: ignore[arg-type]
                    unpack(
                        inflated,  # type: ignore[arg-type]
                        dest,
                        limits=limits,
                        budget=budget,
                        source=source,
                        on_file=placed.on_file if placed is not None else None,
                        hashes=hashes if placed is None else None,
                    )
            elif kind == "tar":
                unpack(stream, dest, limits=limits, budget=budget, source=source)  # type: ignore[arg-type]
            else:
                _write_payload(stream, os.path.join(dest, PAYLOAD), budget, source)
        if members is not None:
            from .index import check_tail

            # the index after the tar is in extra fields, which decoding skips: checked here
            index = check_tail(members.tail, uri or source, hashes.index if hashes is not None else None)
            if placed is not None:
                if index is not placed.index:  # the index read before the stream is not the one it ended in
                    raise TransientError(
                        f"{source} changed while it was read (its index is not the one read before);"
                        " load it again"
                    )
                placed.finish()
            elif hashes is not None and index is not None and index.algorithm == hashes.algorithm:
                hashes.verify(index, uri or source)
    finally:
        if hashes is not None:
            hashes.abort()  # stops the thread if verify did not run (it is idempotent)
    return kind in ("tar.gz", "tar")


def restore_object(
    store: BlobStore, uri: str, size: int, dest: str, *, on_chunk: Callable[[int], None] | None = None
) -> bool:
    """Restore the object at ``uri`` (``size`` bytes) into the empty folder ``dest``, as a full
    load does; True for a tarball, False for a payload. The object's trailer is read first
    (one ranged read): an indexed object may inflate on several threads
    (:func:`~.inflate.restore_indexed`); otherwise it streams (:func:`restore`), an indexed
    one with each file hashed and checked against its index (:mod:`.filehashes`).
    ``on_chunk`` gets the size of each piece of the object as it is read.

    Raises: as :func:`restore` and :func:`~.inflate.restore_indexed`.
    """
    from .filehashes import for_object
    from .inflate import restore_indexed

    hashes = for_object(store, uri, size)
    if hashes is not None and restore_indexed(store, uri, size, dest, on_chunk=on_chunk, hashes=hashes):
        hashes.abort()
        return True
    with store.open_read(uri) as raw, ReadAhead(raw, on_chunk=on_chunk) as ahead:
        return restore(ahead, dest, size, uri=uri, hashes=hashes)  # type: ignore[arg-type]


def _write_payload(stream: CountingReader, path: str, budget: DiskBudget, source: str) -> None:
    """Write the rest of ``stream`` to the new file ``path``, runs of zeros as holes."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            out = SparseWriter(fd, budget)
            while chunk := stream.read(_CHUNK):
                out.write(chunk)
            out.finish()
        finally:
            os.close(fd)
    except OSError as exc:
        if isinstance(exc, (StoreError, TransientError)):
            raise
        raise file_system_error(exc, source, os.path.dirname(path), "the payload") from exc
