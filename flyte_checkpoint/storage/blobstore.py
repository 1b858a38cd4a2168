"""The one interface a storage backend implements.

A :class:`BlobStore` addresses objects by full URI (``s3://bucket/key``); the
registry picks the store from the URI's scheme. Five operations are required:

- :meth:`BlobStore.open_read`: a streaming, readable binary file object;
- :meth:`BlobStore.open_write`: a :class:`BlobWriter` whose object appears, whole,
  only when it is closed cleanly, and is discarded by :meth:`BlobWriter.abort`
  (the context-manager form aborts on an exception);
- :meth:`BlobStore.stat`: the size of an object, or ``None`` when it is absent;
- :meth:`BlobStore.delete` and :meth:`BlobStore.list`.

Everything else has a default built on those and may be overridden as a fast path;
:meth:`BlobStore.list_details` (sizes and modification times, one level with folders) is the
one to override where a cloud's listing returns them (the default stats each object), and
:meth:`BlobStore.delete_many` where the server deletes many objects in one request (S3's
``DeleteObjects``, 1,000 keys; the default deletes one object a request, 8 at a time).
Backends raise the errors of :mod:`flyte_checkpoint.errors`: ``NotFoundError``
(``ContainerNotFoundError`` for a missing bucket), ``CheckpointPermissionError``,
``TransientError`` (worth retrying) and ``StoreError`` for the rest. A denied request is
never ``NotFoundError``: the core loads "no checkpoint" only for an absent object.

URIs: the core (``Checkpoint``, the CLI, ``inspect``) hands a store URIs as
:func:`flyte_checkpoint.uri.normalize` spells them: surrounding whitespace and quotes
removed, the scheme lower-cased, the rest (bucket, key, query) untouched, and every local form
(``file:///abs``, ``rel``) an absolute path. Nothing else is rewritten (no percent-decoding, no
collapsing of ``//``), and a store called directly receives what its caller passed; it parses
its own scheme's URIs (:mod:`flyte_checkpoint.storage.kit.locations`).

Capabilities a store declares (class or instance attributes; the defaults are the base
class's): :attr:`BlobStore.part_size`, :attr:`BlobStore.supports_ranges`,
:attr:`BlobStore.supports_list`, :attr:`BlobStore.supports_list_details`,
:attr:`BlobStore.copy_limits`, :attr:`BlobStore.read_range_size`,
:attr:`BlobStore.replaces_atomically`, :attr:`BlobStore.creates_atomically` and
:attr:`BlobStore.supports_pinned_reads`. The
conformance suites read them (:mod:`flyte_checkpoint.testing`): the fault tests size an
interrupted save from ``part_size``, and the size tests test around ``part_size`` and
``read_range_size``.

Pinned reads (optional; every load uses them): a load reads an object in several requests
(trailer, index, members, stream), and a save may commit between two of them.
:meth:`BlobStore.pin` returns a :class:`~flyte_checkpoint.storage.pinned.PinnedObject`, the
object as it is now (``None`` when absent): its ``size``, its ``version`` and reads
(``read_range``, ``open_read``) of that version only. A store that can (S3 and Azure:
``If-Match`` with the ETag; GCS: the generation; a local file: the descriptor opened at the
pin; memory: the bytes object) overrides it and sets ``supports_pinned_reads``. The promises:

- a read through the pin gives bytes of that version, or raises
  :class:`~flyte_checkpoint.errors.ObjectReplacedError` (a ``TransientError``) once the version
  is gone; it never gives bytes of another version;
- ``changed()`` says whether the object at the URI is still that version (the core asks after
  a read failed, and reports a replaced object as replaced, never as damaged);
- ``pin`` raises what ``stat`` raises (a missing bucket, a denied request), and returns ``None``
  only for an absent object.

The default, for a store that cannot pin, is
:class:`~flyte_checkpoint.storage.pinned.CheckedObject`: the store's own reads, and a
``changed()`` that compares the size and the best version the store gives (``copy_source``'s,
or a native listing's modification time); the core then still never calls an object that
changed damaged, and one that did not change is checked as any object is.

Server-side range copy (optional; incremental saves use it): a store whose ``copy_limits`` is
not ``None`` implements :meth:`BlobStore.copy_source` and its writers' :meth:`BlobWriter._copy`.
A writer then takes, between its ``write`` calls, ``copy(source, start, length)``: the next
``length`` bytes of the object are bytes ``start .. start + length`` of ``source``, an object
of the same store, which the server copies (S3 ``UploadPartCopy`` with ``CopySourceRange``,
Azure ``Put Block From URL`` with a source range, ``copy_file_range`` or a reflink on a local
file system; GCS has none: ``compose`` and ``rewrite`` take whole objects). The promises:

- the object committed is exactly the written and copied bytes in the order they were given,
  and appears only at the commit, atomically, as for any write; an abort leaves nothing (copied
  parts, blocks and temporary objects included);
- every copied byte comes from the object as it was when :meth:`BlobStore.copy_source` described
  it (its ``version``: S3/Azure ETag with ``If-Match``, a local file's inode and times): a
  source replaced meanwhile raises :class:`~flyte_checkpoint.errors.CopySourceChangedError` (at
  the ``copy``, a later ``write`` or the commit) and nothing is committed; it never mixes two
  versions;
- the server's rules are the writer's business, not the caller's: pieces below the server's
  minimum (S3: every part but the last at least 5 MiB), above its maximum (S3 5 GiB per part),
  or more pieces than one request takes are handled inside, by splitting copies, or by reading
  a few bytes of the source (ranged reads with the same version check) and sending them with the
  written ones; ``copy_limits`` tells the caller what is cheap so that it plans copies that need
  little of that;
- ``bytes_written`` counts the bytes given to ``write`` only, ``bytes_copied`` those given to
  ``copy``; a copy is checked against the source's size (``ValueError``) and a copy of
  nothing does nothing. ``source`` may be the object being replaced (the same URI);
- with ``expect`` (a :class:`CopyCheck`: the CRC-32 of each consecutive piece of the range, as
  the caller knows the source should hold them), nothing is committed unless every copied byte
  matches it: the writer checks the bytes the server copied, by a checksum the server computed
  of them (S3's ``UploadPartCopy`` answers with the part's CRC-32 when the upload names that
  algorithm) or by reading the range of the source (with the same version check), and where
  they differ (a damaged source: bit rot, a bad copy) the commit raises
  :class:`~flyte_checkpoint.errors.CopyDamagedError` naming every damaged piece it found
  (:func:`copy_damaged`), after the last part or block has been sent, and aborts. Bytes a
  writer reads from the source to send itself (pieces under the server's minimum) are checked
  the same way.
"""

from __future__ import annotations

import abc
import contextlib
import io
import os
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, BinaryIO, ClassVar

from ..errors import StoreError
from ..uri import redact
from ..util.interrupts import finish

if TYPE_CHECKING:
    from .versions import PinnedObject

#: Chunk size for copies between streams and files.
COPY_CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True)
class ObjectInfo:
    """One entry of :meth:`BlobStore.list_details`.

    Attributes:
        uri: the object's URI (as :meth:`BlobStore.list` yields it); for a folder, the prefix
            ending with ``/``.
        size: bytes; ``None`` for a folder.
        modified: when the object was last written (timezone-aware), or ``None`` when the
            store does not say (and for a folder).
        is_folder: a folder (a common prefix one level down), only in a non-recursive listing.
        version: the store's version token of the object as the listing gives it (an S3 or
            Azure ETag, a GCS generation), or ``None`` where the store gives none; manifests
            compare it (:meth:`flyte_checkpoint.history.manifest.Manifest.matches`).
    """

    uri: str
    size: int | None
    modified: datetime | None = None
    is_folder: bool = False
    version: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class CopyLimits:
    """What a store's server-side range copy allows (:attr:`BlobStore.copy_limits`).

    Attributes:
        min_part: every piece of an object but the last, written or copied, must hold at
            least this many bytes (S3: 5 MiB); ``0``: no minimum (Azure blocks, local files).
            A writer meets it by reading a little of the source where a piece would be short,
            so a caller copies runs much longer than this.
        max_copy: the most bytes the server copies in one request (S3: 5 GiB a part; Azure's
            ``Put Block From URL``: 4,000 MiB a block, 100 MiB on older service versions); the
            writer splits longer copies.
            ``None``: no limit.
        max_pieces: the most pieces (written parts and copies together) one object may hold
            (S3: 10,000 parts; Azure: 50,000 blocks); ``None``: no limit. A caller keeps its
            number of copies well below it.
        min_copy: copies shorter than this cost more than they save (a request each); a
            caller writes such ranges instead. Never required for correctness.
        align: a copy whose source and destination offsets are both multiples of this costs
            next to nothing for its whole blocks (a file system that shares extents between
            files: its block size); a folder save places what a later save may copy at such
            offsets. ``0``: no such gain. Never required for correctness.
    """

    min_part: int = 0
    max_copy: int | None = None
    max_pieces: int | None = None
    min_copy: int = 0
    align: int = 0


@dataclass(frozen=True)
class CopySource:
    """An object that a writer may copy byte ranges from (:meth:`BlobStore.copy_source`).

    Attributes:
        uri: the object's URI.
        size: its size in bytes.
        version: the store's token for this content of the object (S3 or Azure ETag, GCS
            generation, a local file's device, inode, size and times): a copy from an object
            whose token changed raises :class:`~flyte_checkpoint.errors.CopySourceChangedError`.
    """

    uri: str
    size: int
    version: str


@dataclass(frozen=True)
class CopyCheck:
    """What the bytes of a copied range must be (:meth:`BlobWriter.copy`'s ``expect``): the
    length and CRC-32 (zlib's, as S3's ``CRC32``) of each consecutive piece of the range, in
    order. An incremental save's pieces are the base's gzip members, whose CRC-32 its index
    records (docs/FORMAT.md)."""

    pieces: tuple[tuple[int, int], ...]

    @property
    def length(self) -> int:
        """The bytes the pieces cover."""
        return sum(n for n, _ in self.pieces)

    def crc32(self) -> int:
        """The CRC-32 of the whole range (the pieces' values combined)."""
        from .kit.checksums import crc32

        algorithm, value = crc32(), 0
        for n, piece in self.pieces:
            value = algorithm.combine(value, piece, n)
        return value

    def damaged(
        self,
        start: int,
        read: Callable[[int, int], bytes | bytearray | memoryview],
        chunk: int | None = None,
    ) -> list[tuple[int, int]]:
        """The pieces whose bytes are not what they should be, as ``(offset, length)`` in the
        source, where the range begins at ``start`` of it and ``read(offset, length)`` returns
        the source's bytes (``chunk`` at most, default :data:`CHECK_CHUNK`; fewer at its end)."""
        from .kit.checksums import crc32

        algorithm = crc32()
        bad: list[tuple[int, int]] = []
        at, end = start, start + self.length
        pieces = iter(self.pieces)
        piece_at, (piece_len, expected) = start, next(pieces, (0, 0))
        value = 0
        while at < end:
            data = read(at, min(chunk or CHECK_CHUNK, end - at))
            if not data:  # the source ends early: what is left is not what it should be
                break
            view = memoryview(data).cast("B")
            while view:
                take = min(len(view), piece_at + piece_len - at)
                value = algorithm.compute(view[:take], value)
                view, at = view[take:], at + take
                if at == piece_at + piece_len:
                    if value != expected:
                        bad.append((piece_at, piece_len))
                    piece_at, (piece_len, expected), value = at, next(pieces, (0, 0)), 0
        while piece_at < end:  # pieces not reached
            bad.append((piece_at, piece_len))
            piece_at, (piece_len, _) = piece_at + piece_len, next(pieces, (0, 0))
        return bad


#: Bytes read at a time where a copied range is checked by reading it (:meth:`CopyCheck.damaged`).
CHECK_CHUNK = 8 * 1024 * 1024


class CopyDamage:
    """The ranges of copy sources that a writer's checks of its copies found damaged
    (:attr:`BlobWriter.copy_damage`); checks may add to it from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._found: list[tuple[CopySource, int, int]] = []

    def add(self, source: CopySource, pieces: Iterable[tuple[int, int]]) -> None:
        """Record pieces ``(start, length)`` of ``source`` whose bytes are not what they should be."""
        found = [(source, start, length) for start, length in pieces]
        if found:
            with self._lock:
                self._found.extend(found)

    def raise_found(self, dest: str) -> None:
        """Raise :class:`~flyte_checkpoint.errors.CopyDamagedError` (for a write to ``dest``)
        naming every damaged range recorded, if any."""
        with self._lock:
            found = list(self._found)
        if found:
            raise copy_damaged(found, dest)


_commits = threading.local()


@contextlib.contextmanager
def noting_commits() -> Iterator[dict[str, str | None]]:
    """The objects writers commit in this thread meanwhile (any store, through any of its
    methods that commit with a :class:`BlobWriter`): URI -> :attr:`BlobWriter.committed_version`
    (None where the store's commit does not give it). Nested uses each see their own."""
    previous = getattr(_commits, "seen", None)
    seen: dict[str, str | None] = {}
    _commits.seen = seen
    try:
        yield seen
    finally:
        _commits.seen = previous


class BlobWriter(abc.ABC):
    """A streaming write of one object.

    ``write()`` as often as needed, then ``close()`` to commit (the object appears
    whole) or ``abort()`` to discard (nothing appears, nothing is left behind).
    Used as a context manager it commits on a clean exit and aborts on an exception.
    Subclasses implement :meth:`_write`, :meth:`_commit` and :meth:`_abort`; this base
    guarantees each of commit and abort runs at most once, and that a failed commit is
    followed by an abort. ``_abort`` runs to its end even if interrupted (so it must be
    safe to run again from the start, and harmless after a commit that succeeded), and a
    writer collected while open or mid-commit is aborted.

    A writer opened inside a save that gets cancelled (:mod:`flyte_checkpoint.util.cancellation`)
    refuses further writes and its commit, raising the cancellation error.
    """

    def __init__(self, uri: str) -> None:
        from ..util.cancellation import current

        self.uri = uri
        self._state = "open"
        self._lock = threading.Lock()
        self._scope = current()
        self.bytes_written = 0
        #: Bytes given to :meth:`copy` (copied by the server, not sent).
        self.bytes_copied = 0
        #: What the checks of copies given an ``expect`` found damaged (see :meth:`_copy`).
        self.copy_damage = CopyDamage()
        #: Set by ``_commit`` where the commit's answer gives it: the store's version token of
        #: the object committed, as its listing gives it (:attr:`ObjectInfo.version`: an S3 or
        #: Azure ETag, a GCS generation, a local file's inode and times). None: not known. The
        #: checkpoint history tells by it whether the object a listing finds is this writer's
        #: (:func:`noting_commits`).
        self.committed_version: str | None = None

    @property
    def closed(self) -> bool:
        return self._state != "open"

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Append bytes to the object; returns how many were taken (all of them)."""
        # Under the lock: an abort from another thread (the writing thread's owner, interrupted)
        # waits for a write in progress, and no write starts after it (none may reopen an upload).
        with self._lock:
            if self._state != "open":
                raise ValueError(f"write to a {self._state} writer for {redact(self.uri)}")
            if self._scope is not None:
                self._scope.check()
            n = len(data)
            if n:
                self._write(data)
                self.bytes_written += n
            return n

    def copy(self, source: CopySource, start: int, length: int, expect: CopyCheck | None = None) -> None:
        """Append bytes ``start .. start + length`` of ``source`` to the object, copied by the
        server (a store whose ``copy_limits`` is set; see the module docstring). With
        ``expect``, the copied bytes are checked against it before anything is committed.

        Raises:
            ValueError: the range is not inside ``source``, ``expect`` does not cover it, or
                the writer is closed.
            NotImplementedError: the store cannot copy (its ``copy_limits`` is ``None``).
            CopySourceChangedError: ``source`` is no longer the object it described (here, at
                a later write or at the commit).
            CopyDamagedError: at the commit, copied bytes did not match ``expect``.
        """
        if start < 0 or length < 0 or start + length > source.size:
            raise ValueError(
                f"copy of bytes {start}..{start + length} from {redact(source.uri)}, which has"
                f" {source.size}: the range must lie inside the object"
            )
        if expect is not None and expect.length != length:
            raise ValueError(f"a copy of {length} bytes checked against pieces of {expect.length}")
        with self._lock:
            if self._state != "open":
                raise ValueError(f"copy to a {self._state} writer for {redact(self.uri)}")
            if self._scope is not None:
                self._scope.check()
            if length:
                self._copy(source, start, length, expect)
                self.bytes_copied += length

    def flush(self) -> None:
        """Nothing to do: data is committed by ``close()``, not by flushing."""

    def close(self) -> None:
        """Commit the object. Idempotent; after ``abort()`` it does nothing.

        Raises:
            OperationCancelledError: the save it belongs to was cancelled (it is aborted).
        """
        try:
            with self._lock:
                if self._state != "open":
                    return
                if self._scope is not None:
                    self._scope.check()
                self._state = "committing"
            self._commit()
        except BaseException:
            if self._state in ("open", "committing"):
                self._state = "aborted"
                try:
                    finish(self._abort)
                except Exception:
                    pass
            raise
        self._state = "committed"
        seen = getattr(_commits, "seen", None)
        if seen is not None:
            seen[self.uri] = self.committed_version

    def abort(self) -> None:
        """Discard everything written. Idempotent; after a commit it does nothing."""
        with self._lock:
            if self._state != "open":
                return
            self._state = "aborted"
        finish(self._abort)

    def __del__(self) -> None:
        # Dropped while open, or in a commit that never finished: its owner was interrupted
        # before it could abort. Nothing may stay behind (an upload, a temporary file, a
        # thread); an abort after a commit that did succeed changes nothing.
        if getattr(self, "_state", None) in ("open", "committing"):
            self._state = "aborted"
            try:
                finish(self._abort)
            except BaseException:
                pass

    def __enter__(self) -> BlobWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    @abc.abstractmethod
    def _write(self, data: bytes | bytearray | memoryview) -> None:
        """Take the next bytes of the object (may buffer, may upload).

        ``data`` belongs to the caller, who may reuse or change its buffer as soon as this
        returns: a writer that keeps bytes for later (a part being filled, an upload still in
        flight on another thread) copies them first; it keeps no view of ``data``.
        """

    @abc.abstractmethod
    def _commit(self) -> None:
        """Make the object visible, whole, replacing any previous one."""

    @abc.abstractmethod
    def _abort(self) -> None:
        """Discard the bytes written so far and any server-side state."""

    def _copy(self, source: CopySource, start: int, length: int, expect: CopyCheck | None) -> None:
        """Take the next ``length`` bytes of the object from ``source`` at ``start`` (a range
        inside it, not empty), server-side; see the module docstring for the promises. Only
        stores that declare ``copy_limits`` implement it. With ``expect``, the bytes copied are
        checked against it: a damaged piece is recorded with ``self.copy_damage.add``, and
        ``_commit`` calls ``self.copy_damage.raise_found(self.uri)`` once every check has ended,
        before it makes the object visible."""
        raise NotImplementedError(f"{type(self).__name__} cannot copy ranges on the server")


class BlobStore(abc.ABC):
    """A backend for one or more URI schemes. See the module docstring for the contract."""

    #: Bytes a writer holds before it sends any to the server (one part, block or chunk);
    #: ``None``: unknown, or the writer holds the whole object until its commit; ``0``: each
    #: write is sent as it comes. The fault
    #: suite interrupts a save after more than this many bytes, so that the write has sent at
    #: least one part: a store whose parts land in place on the server then fails it.
    part_size: int | None = None
    #: The store can serve byte ranges cheaply (``read_range`` is a real ranged read).
    supports_ranges: ClassVar[bool] = False
    #: The store can list by prefix (:meth:`list`); False where it cannot (``list`` raises).
    supports_list: ClassVar[bool] = True
    #: :meth:`list_details` is native (sizes and times come with the listing), not the
    #: default's one ``stat`` per object.
    supports_list_details: ClassVar[bool] = False
    #: :meth:`pin` reads one version of an object only (its reads raise ObjectReplacedError once
    #: that version is gone); False: the default pin, whose reads are checked afterwards.
    supports_pinned_reads: ClassVar[bool] = False
    #: The store's writers copy byte ranges of its objects on the server (:meth:`BlobWriter.copy`)
    #: within these limits; ``None``: they cannot (an incremental save then sends everything).
    copy_limits: CopyLimits | None = None
    #: Bytes of one ranged read of :meth:`open_read`'s stream; ``None``: unknown, or the stream
    #: reads the object in one request. The conformance suite tests reads around it.
    read_range_size: int | None = None
    #: An overwrite replaces the object in one step: a reader finds the old object or the new
    #: one, whole, never none. False where the server cannot promise it (a rename that deletes
    #: the destination first, as WebDAV's MOVE may): a reader may then find no object for a
    #: moment, so a load at that moment returns "no checkpoint" (the backend's README says so).
    replaces_atomically: ClassVar[bool] = True
    #: :meth:`write_bytes_if_absent` is one conditional request: of two writers creating one
    #: object at once, exactly one creates it (S3's ``If-None-Match: *``, a local hard link, the
    #: memory store's lock). False: the default, a ``stat`` and then a write, which two writers
    #: racing may both pass (the checkpoint history then numbers their manifests alike).
    creates_atomically: ClassVar[bool] = False

    @abc.abstractmethod
    def open_read(self, uri: str) -> BinaryIO:
        """Open the object for streaming reads.

        Returns a binary stream (a context manager with ``read``, ``readinto`` optional,
        ``close``) whose ``read(n)`` returns exactly ``n`` bytes unless the object ends first
        (then the rest, then ``b""``), and ``read()`` the whole rest: callers may treat a
        short read as the end of the object. A transfer cut midway raises (a
        ``TransientError`` for the core to retry) or is resumed inside the stream; it never
        ends the stream early.

        Raises:
            NotFoundError: the object is absent (ContainerNotFoundError: its bucket is); a
                store may raise it here or at the first read.
        """

    @abc.abstractmethod
    def open_write(self, uri: str) -> BlobWriter:
        """Start a streaming write; the object appears only when the writer is closed cleanly."""

    @abc.abstractmethod
    def stat(self, uri: str) -> int | None:
        """Return the object's size in bytes, or ``None`` if there is no such object.

        Raises:
            ContainerNotFoundError: the bucket/container itself does not exist.
        """

    @abc.abstractmethod
    def delete(self, uri: str) -> None:
        """Remove the object; removing an absent object is not an error."""

    @abc.abstractmethod
    def list(self, prefix: str) -> Iterator[str]:
        """Yield the URIs of the objects whose URI starts with ``prefix``, in sorted order."""

    def copy_source(self, uri: str) -> CopySource | None:
        """Describe the object at ``uri`` for :meth:`BlobWriter.copy` (its size and version), or
        ``None`` if it is absent. Stores that declare ``copy_limits`` implement it.

        Raises:
            ContainerNotFoundError: the bucket/container itself does not exist.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot copy ranges on the server")

    def pin(self, uri: str) -> PinnedObject | None:
        """The object at ``uri`` as it is now, for reads of that version only (see the module
        docstring); ``None`` if it is absent. The default (a store that cannot pin) reads with
        the store's own calls and checks the version afterwards
        (:class:`~flyte_checkpoint.storage.pinned.CheckedObject`).

        Raises:
            ContainerNotFoundError: the bucket/container itself does not exist; and what
                :meth:`stat` raises.
        """
        from .versions import CheckedObject

        return CheckedObject.of(self, uri)

    # Optional fast paths, with defaults built on the streams.

    def list_details(self, prefix: str, *, recursive: bool = True) -> Iterator[ObjectInfo]:
        """Yield an :class:`ObjectInfo` per object whose URI starts with ``prefix``, sorted by URI.

        With ``recursive=False``, only one level: the objects whose URI after ``prefix`` holds
        no ``/``, and for the deeper ones one folder entry each (``prefix`` + the text up to and
        including the next ``/``, ``is_folder=True``), as S3's listing with a delimiter gives.

        The default lists with :meth:`list` and calls :meth:`stat` once per object it yields
        (sizes, no modification times); override it where a listing returns sizes and times.

        Raises:
            ContainerNotFoundError: the bucket/container itself does not exist.
        """

        def by_stat(uri: str) -> ObjectInfo | None:
            size = self.stat(uri)
            return None if size is None else ObjectInfo(uri, size)

        return details_from_listing(prefix, self.list(prefix), by_stat, recursive=recursive)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        """Return ``length`` bytes from offset ``start`` (fewer at the end of the object).

        Raises:
            NotFoundError: the object is absent (ContainerNotFoundError: its bucket is), as
                :meth:`open_read`; never ``b""`` for an absent object.
        """
        with self.open_read(uri) as f:
            if f.seekable():
                f.seek(start)
            else:
                _skip(f, start)
            return _read_exactly(f, length)

    def upload_file(self, path: str | os.PathLike[str], uri: str) -> None:
        """Store a local file's bytes as the object at ``uri``, atomically.

        ``path`` may be the :class:`~flyte_checkpoint.util.sources.SourceFile` the core opened when
        the save started. An override reads through :func:`~flyte_checkpoint.util.sources.open_source`
        and, if it reads by ranges, calls its ``verify()`` before committing, so that a file that
        changed while it was read raises :class:`~flyte_checkpoint.errors.SourceChangedError`
        and leaves the previous object in place.
        """
        from ..util.sources import open_source

        with open_source(path) as src, self.open_write(uri) as dst:
            shutil.copyfileobj(src, dst, COPY_CHUNK)  # type: ignore[misc]

    def download_file(self, uri: str, path: str | os.PathLike[str]) -> None:
        """Copy the object into a local file (created or truncated)."""
        with self.open_read(uri) as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst, COPY_CHUNK)

    def read_bytes(self, uri: str) -> bytes:
        """The whole object in memory (for small objects)."""
        with self.open_read(uri) as f:
            return f.read()

    def write_bytes(self, uri: str, data: bytes) -> None:
        """Store ``data`` as the object at ``uri``, atomically."""
        with self.open_write(uri) as w:
            w.write(data)

    def write_bytes_if_absent(self, uri: str, data: bytes) -> bool:
        """Store ``data`` as the object at ``uri`` only if no object is there (a conditional
        create, as :meth:`write_bytes` otherwise): True if this call created it, False if an
        object was there (nothing is written). The checkpoint history numbers each save's
        manifest with it, so that two savers of one destination never share a generation.

        The default is a :meth:`stat`, then :meth:`write_bytes`: two writers racing may both
        find the object absent and both write. A store whose server creates conditionally
        overrides it and sets :attr:`creates_atomically` (S3's and Azure's ``If-None-Match: *``,
        a local hard link, the memory store's lock; GCS's ``ifGenerationMatch=0`` would do).
        """
        if self.stat(uri) is not None:
            return False
        self.write_bytes(uri, data)
        return True

    def delete_many(self, uris: Iterable[str]) -> None:
        """Remove every object of ``uris``; an absent one is not an error. Every object is
        tried, even after a failure; then the failures are raised together (:func:`deletes_failed`:
        the error names each URI that may remain, and carries them as ``failed``).

        The default calls :meth:`delete` per URI, :data:`DELETE_THREADS` at a time; a store whose
        server deletes many objects in one request overrides it (S3: ``DeleteObjects``, 1,000
        keys a request).
        """
        todo = list(dict.fromkeys(uris))
        failures: list[tuple[str, BaseException]] = []

        def one(uri: str) -> None:
            try:
                self.delete(uri)
            except Exception as exc:
                failures.append((uri, exc))

        if len(todo) <= 1:
            for uri in todo:
                one(uri)
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(DELETE_THREADS, len(todo)), "flyte-checkpoint-delete") as pool:
                list(pool.map(one, todo))
        if failures:
            raise deletes_failed(failures, len(todo))

    def copy_object(self, src: str, dst: str) -> int | None:
        """Copy the whole object at ``src`` to ``dst`` (same store), atomically as any write;
        the bytes copied, or ``None`` when ``src`` is absent (nothing is written).

        Optional (checkpoint generations use it: docs/history.md). The default copies on the
        server where the store copies ranges (``copy_limits``: S3 ``UploadPartCopy``, split over
        5 GiB; Azure ``Put Block From URL``; a reflink or ``copy_file_range`` locally), with
        ``copy_source``'s version check (a source replaced meanwhile raises
        :class:`~flyte_checkpoint.errors.CopySourceChangedError`, nothing is written); else it
        downloads and uploads. A store with a cheaper whole-object copy (GCS ``rewrite``, S3
        ``CopyObject`` under 5 GiB) overrides it.
        """
        if self.copy_limits is not None:
            try:
                source = self.copy_source(src)
            except NotImplementedError:
                pass
            else:
                if source is None:
                    return None
                with self.open_write(dst) as writer:
                    writer.copy(source, 0, source.size)
                return source.size
        from ..errors import NotFoundError

        try:
            reader = self.open_read(src)
        except NotFoundError:
            return None
        done = 0
        with reader, self.open_write(dst) as writer:
            while chunk := reader.read(COPY_CHUNK):
                writer.write(chunk)
                done += len(chunk)
        return done

    def close(self) -> None:
        """Release clients and pools. The store may be used again afterwards."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"


#: Deletes in flight at once in :meth:`BlobStore.delete_many`'s default.
DELETE_THREADS = 8


def deletes_failed(failures: list[tuple[str, BaseException]], total: int) -> BaseException:
    """The error of a :meth:`BlobStore.delete_many` of ``total`` objects of which ``failures``
    (``(uri, error)`` each, in the order given) were not deleted: of the errors' one class
    where they share it (a ``TransientError`` is retried by the core, a
    ``ContainerNotFoundError`` stays one), else :class:`~flyte_checkpoint.errors.StoreError`;
    its message names the URIs (the first ten) and its ``failed`` holds them all."""
    from ..errors import CheckpointError

    failures = sorted(failures, key=lambda f: f[0])
    kinds = {type(exc) for _, exc in failures}
    kind = kinds.pop() if len(kinds) == 1 else StoreError
    if not issubclass(kind, CheckpointError):
        kind = StoreError
    shown = "; ".join(f"{redact(uri)} ({exc})" for uri, exc in failures[:10])
    more = f" and {len(failures) - 10} more" if len(failures) > 10 else ""
    error = kind(
        f"could not delete {len(failures)} of {total} objects: {shown}{more}; the others were"
        " deleted. Delete again (an absent object is not an error)"
    )
    error.failed = tuple(uri for uri, _ in failures)  # type: ignore[attr-defined]
    error.__cause__ = failures[0][1]
    return error


def details_from_listing(
    prefix: str,
    uris: Iterable[str],
    describe: Callable[[str], ObjectInfo | None],
    *,
    recursive: bool = True,
) -> Iterator[ObjectInfo]:
    """:meth:`BlobStore.list_details` from a sorted recursive listing and ``describe(uri)`` (an
    object's info, or ``None`` when it vanished meanwhile): a store whose listing gives URIs
    only, or one that knows details by URI, builds on this. Non-recursive, the objects below
    the first level are collapsed into folders and never described."""
    last_folder = None
    for uri in uris:
        rest = uri[len(prefix) :] if uri.startswith(prefix) else uri
        cut = rest.find("/")
        if not recursive and cut != -1:
            folder = uri[: len(uri) - len(rest) + cut + 1]
            if folder != last_folder:  # a sorted listing gives a folder's objects together
                last_folder = folder
                yield ObjectInfo(folder, None, None, is_folder=True)
            continue
        info = describe(uri)
        if info is not None:
            yield info


def _skip(f: BinaryIO, n: int) -> None:
    while n > 0:
        chunk = f.read(min(n, COPY_CHUNK))
        if not chunk:
            return
        n -= len(chunk)


def _read_exactly(f: BinaryIO, n: int) -> bytes:
    buf = io.BytesIO()
    while n > 0:
        chunk = f.read(n)
        if not chunk:
            break
        buf.write(chunk)
        n -= len(chunk)
    return buf.getvalue()


def copy_source_changed(source: CopySource, detail: str = "") -> BaseException:
    """The error for a copy from ``source`` once the object is no longer the one it describes
    (replaced or removed): :class:`~flyte_checkpoint.errors.CopySourceChangedError`."""
    from ..errors import CopySourceChangedError

    return CopySourceChangedError(
        f"{redact(source.uri)} was replaced or removed while a save copied ranges of it"
        f"{f' ({detail})' if detail else ''}; nothing was committed. The save is retried against"
        " the object there now; if this repeats, another writer keeps replacing it"
    )


def copy_damaged(damaged: list[tuple[CopySource, int, int]], dest: str) -> BaseException:
    """The error for copied ranges whose bytes did not match their check (``(source, start,
    length)`` each): :class:`~flyte_checkpoint.errors.CopyDamagedError`, carrying them."""
    from ..errors import CopyDamagedError

    sources = sorted({redact(source.uri) for source, _, _ in damaged})
    shown = ", ".join(f"{start}..{start + length}" for _, start, length in damaged[:5])
    more = f" and {len(damaged) - 5} more" if len(damaged) > 5 else ""
    error = CopyDamagedError(
        f"bytes {shown}{more} of {', '.join(sources)} are not what its index records (the object"
        f" was damaged after it was saved: bit rot, or a bad copy of it), so a save to"
        f" {redact(dest)} that copied them committed nothing. Save again without copying from it"
        " (a folder save does so by itself and warns)"
    )
    error.damaged = tuple(damaged)
    return error


def ensure_store_error(exc: BaseException, uri: str) -> BaseException:
    """Wrap an unexpected exception from a backend in :class:`StoreError` (others pass through)."""
    from ..errors import CheckpointError

    if isinstance(exc, CheckpointError):
        return exc
    err = StoreError(f"{type(exc).__name__} on {redact(uri)}: {exc}")
    err.__cause__ = exc
    return err
