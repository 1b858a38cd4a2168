"""Restore some files of a folder checkpoint: ``load(members=[...])``, ``load_file``, ``pull --member``.

A name selects the regular file of that name, or every regular file under the folder of
that name. With an index (:mod:`.index`) only the selected files' gzip members are read,
adjacent ones merged into one ranged read, each member checked against its CRC-32 and
length and each file against its hash. Without one (Flyte's objects, older ones) the
archive is streamed to its end, so every gzip member's CRC-32 is checked, and only the
selected files are written.

What is restored is the same either way: regular files, with their modes and times, the
folders above them, and hard-linked names as hard links (or as the file where the name
linked to is not selected). Symbolic links and empty folders are not restored by a partial
load (the index lists regular files only: finding them would mean reading the whole
archive); ``load()`` restores them.

Files are written under ``dest``, a new folder: on an error the caller removes it, so the
workspace never holds part of a partial restore.
"""

from __future__ import annotations

import os
import stat
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import TYPE_CHECKING

from ..errors import CorruptCheckpointError, NotFoundError, UnsafeArchiveError
from ..util.limits import DiskBudget, LoadLimits
from ..util.workfiles import LINKS, RESTORE, STAGED
from . import digests
from .archive import ExactReader, read_members

if TYPE_CHECKING:
    from ..storage.blobstore import BlobStore
    from .index import FileEntry, Index

#: The most compressed bytes one merged ranged read fetches (and holds in memory).
MAX_READ = 32 * 1024 * 1024
#: Runs of needed members this close are merged into one read (the members between, such as
#: the next file's header, are read and dropped): one request costs more than a few KiB.
MERGE_GAP = 64 * 1024
_CHUNK = 1024 * 1024
_OPEN_FLAGS = (
    os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
)
#: ``on_read(n)``: ``n`` more bytes of the object were read.
OnRead = Callable[[int], None]


def member_name(name: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> str:
    """``name`` as the tar names it: split at ``/`` only, with empty and ``.`` components dropped
    (``./a//b/`` is ``a/b``, as a full load places it); refuses names that leave the tree.

    Nothing else is rewritten: a backslash is part of a name (``a\\b`` is one file on POSIX, as in
    the tar), and Unicode forms are compared as they are (an NFC and an NFD spelling are two
    names). ``bytes`` (a name that is not UTF-8, as GNU tar stores it) are the name's bytes; a
    ``PurePath`` gives its POSIX form.

    Raises:
        UnsafeArchiveError: an absolute name, one with ``..``, an empty one.
    """
    if isinstance(name, PurePath):
        name = name.as_posix()
    name = os.fspath(name)
    text = name.decode("utf-8", "surrogateescape") if isinstance(name, bytes) else str(name)
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if not parts or text.startswith("/") or ".." in parts or "\0" in text:
        raise UnsafeArchiveError(
            f"{text[:200]!r} is not a path inside a checkpoint: give a relative path such as 'a/b.bin'"
        )
    return "/".join(parts)


def near_name(name: str) -> str:
    """What ``name`` is often confused with: its NFC form with backslashes as slashes. Only
    for saying "did you mean": names are selected as they are."""
    import unicodedata

    return unicodedata.normalize("NFC", name).replace("\\", "/")


@dataclass
class Selection:
    """The names asked for (normalized), and which of them matched a file so far."""

    names: tuple[str, ...]
    folders: bool = True  # a name may select a folder's files; False: files only
    found: set[str] = field(default_factory=set)
    #: A name not matched -> a stored name it may have meant (:func:`near_name`), for the error.
    hints: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._near = {n: near_name(n) for n in self.names}
        # every stored name must be compared when a name asked for is not in its near form
        self._near_all = any(k != n for n, k in self._near.items())

    @classmethod
    def of(cls, names: Iterable[str | bytes | os.PathLike[str]], *, folders: bool = True) -> Selection:
        """Raises UnsafeArchiveError for a name outside the tree, ValueError for no names."""
        if isinstance(names, (str, bytes, os.PathLike)):
            raise TypeError("members takes a list of names, not one name: members=['a/b.bin']")
        normal = tuple(dict.fromkeys(member_name(n) for n in names))
        if not normal:
            raise ValueError("members is empty: give at least one name, or load() the whole checkpoint")
        return cls(normal, folders)

    def match(self, rel: str) -> bool:
        """Whether the file ``rel`` is selected (and note every name that selects it: the file's
        own and the folders above it may all be asked for)."""
        selected = False
        if rel in self.names:
            self.found.add(rel)
            selected = True
        if self.folders:
            cut = rel.rfind("/")
            while cut > 0:
                rel_dir = rel[:cut]
                if rel_dir in self.names:
                    self.found.add(rel_dir)
                    selected = True
                cut = rel_dir.rfind("/")
        if not selected and (self._near_all or not rel.isascii() or "\\" in rel):
            self._note_near(rel)
        return selected

    def _note_near(self, rel: str) -> None:
        key = near_name(rel)
        for name, near in self._near.items():
            if name not in self.hints and (
                key == near or (self.folders and key.startswith(near) and key[len(near)] == "/")
            ):
                self.hints[name] = rel

    def missing(self) -> list[str]:
        return [n for n in self.names if n not in self.found]


def absent(
    uri: str, names: list[str], *, folders: bool = True, hints: dict[str, str] | None = None
) -> NotFoundError:
    """The error for names that select no regular file of the checkpoint at ``uri``; ``hints``
    (:attr:`Selection.hints`) says which stored names they may have meant."""
    from ..uri import redact

    shown = ", ".join(repr(n) for n in names[:20]) + (
        f" and {len(names) - 20} more" if len(names) > 20 else ""
    )
    what = "file or folder of files" if folders else "file"
    near = [(n, hints[n]) for n in names if hints and n in hints][:5]
    said = "".join(f" {n!r} is not {stored!r}, which it holds;" for n, stored in near)
    if said:
        said += (
            " names are compared as the tar stores them (a backslash is part of a name, and Unicode"
            " NFC and NFD spellings are different names);"
        )
    return NotFoundError(
        f"{redact(uri)} holds no {what} {shown} (symbolic links and empty folders are not restored by"
        f" name):{said} check the names (flyte-checkpoint inspect URI --members lists them), or load()"
        " the whole checkpoint"
    )


@dataclass
class Restored:
    """What :func:`restore_members` wrote: ``files`` maps each name restored to its path."""

    indexed: bool
    files: dict[str, str]


def restore_members(
    store: BlobStore,
    uri: str,
    size: int,
    selection: Selection,
    dest: str,
    *,
    limits: LoadLimits | None = None,
    on_read: OnRead | None = None,
) -> Restored:
    """Restore the files ``selection`` names from the folder checkpoint at ``uri`` (``size``
    bytes) into the new, empty folder ``dest``: by its index where it has one and the store
    has ranged reads (``supports_ranges``), else by streaming it once.

    Raises:
        NotFoundError: a name selects no regular file (nothing is read but the index, when
            there is one), or the object is a payload, not a folder.
        UnsafeArchiveError: a name in the archive or the index leaves the tree, a member is a
            device or FIFO, or the archive is over a limit.
        CorruptCheckpointError: the index, a member or a file's content is damaged.
        WorkspaceError: the disk is full (or below its reserve).
    """
    from ..uri import redact
    from .index import read_index

    limits = limits or LoadLimits.from_env()
    writer = _Writer(dest, DiskBudget(dest, limits.disk_reserve, source=redact(uri)))
    # a store without real ranged reads would read from the start for each range: stream once
    index = read_index(store, uri, size) if getattr(store, "supports_ranges", False) else None
    if index is not None:
        if on_read is not None:
            on_read(size - index.data_end)  # the index members and the trailer
        _from_index(store, uri, index, selection, writer, limits, on_read)
    else:
        _from_stream(store, uri, size, selection, writer, limits, on_read)
    return Restored(index is not None, writer.paths)


def restore_into(
    store: BlobStore,
    uri: str,
    size: int,
    selection: Selection,
    place: Callable[[str], str],
    *,
    beside: str,
    on_read: OnRead | None = None,
) -> Restored:
    """:func:`restore_members` into a staging folder made in ``beside``, then each file moved
    to ``place(name)`` (its folders made), replacing what is there: nothing is placed unless
    the whole restore succeeded. ``beside`` must be on the file system of the places.

    The staging folder (``.fcp-restore-*``) is held while this runs and removed after it; a
    process killed meanwhile leaves it, and the next partial restore staged in ``beside``
    removes it (:func:`~flyte_checkpoint.util.heldfolders.holding`)."""
    from ..util.heldfolders import holding

    with holding(beside, RESTORE) as held:
        staging = os.path.join(held, STAGED)  # a folder of its own: no member meets the lock file
        os.mkdir(staging, 0o700)
        restored = restore_members(store, uri, size, selection, staging, on_read=on_read)
        placed = {}
        for rel, path in restored.files.items():
            target = place(rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(path, target)
            placed[rel] = target
    return Restored(restored.indexed, placed)


# --------------------------------------------------------------------------- writing


class _Writer:
    """Creates the restored files under ``root``, a folder that holds nothing but them and
    their folders (no links: nothing can lead outside)."""

    def __init__(self, root: str, budget: DiskBudget) -> None:
        self.root = root
        self.budget = budget
        self.paths: dict[str, str] = {}  # rel -> path of the files written

    def write(self, rel: str, chunks: Iterable[bytes | memoryview], mode: int, mtime: int) -> None:
        """Write the file ``rel`` (replacing one written before under that name) from ``chunks``."""
        from ..util.sparse import SparseWriter
        from .archive import _clamp_mtime

        path = self._new(rel)
        mode = (mode & 0o777) | 0o600  # as a full load gives it
        fd = os.open(path, _OPEN_FLAGS, mode)
        try:
            out = SparseWriter(fd, self.budget)
            for chunk in chunks:
                out.write(chunk)
            out.finish()
            os.fchmod(fd, mode)
            mtime = _clamp_mtime(mtime)
            os.utime(fd, (mtime, mtime))
        finally:
            os.close(fd)

    def link(self, rel: str, target: str) -> None:
        """The name ``rel`` for the file ``target`` written before (a hard link)."""
        os.link(self.paths[target], self._new(rel), follow_symlinks=False)

    def _new(self, rel: str) -> str:
        path = os.path.join(self.root, rel)
        parent = os.path.dirname(path)
        try:
            os.makedirs(parent, exist_ok=True)
            st = os.lstat(path)
        except FileNotFoundError:
            self.paths[rel] = path
            return path
        except (FileExistsError, NotADirectoryError):
            raise UnsafeArchiveError(
                f"{rel[:200]!r} lies under a file of the same checkpoint; refusing to restore it"
            ) from None
        if stat.S_ISDIR(st.st_mode):
            raise UnsafeArchiveError(f"file {rel[:200]!r} would replace a folder of the same name")
        os.unlink(path)  # a later member of the same name replaces it, as in a full load
        self.paths[rel] = path
        return path


# --------------------------------------------------------------------------- with an index


def _from_index(
    store: BlobStore,
    uri: str,
    index: Index,
    selection: Selection,
    writer: _Writer,
    limits: LoadLimits,
    on_read: OnRead | None,
) -> None:
    """Ranged reads of the selected files' members only (the index names no links or folders)."""
    groups: dict[tuple[int, int, int, str], list[FileEntry]] = {}  # a hard link's names share data
    for name, entry in index.files.items():
        if selection.match(member_name(name)):
            groups.setdefault((entry.first, entry.offset, entry.size, entry.digest), []).append(entry)
    missing = selection.missing()
    if missing:
        raise absent(uri, missing, folders=selection.folders, hints=selection.hints)
    total = sum(key[2] for key in groups)
    if limits.max_bytes is not None and total > limits.max_bytes:
        raise _over_bytes(limits.max_bytes, uri, "the files selected")
    needed = sorted(
        {i for (first, *_), es in groups.items() if es[0].size for i in range(first, es[0].last + 1)}
    )
    members = _MemberReader(store, uri, index, needed, on_read)
    for key in sorted(groups):
        first, *others = groups[key]
        rel = member_name(first.name)
        writer.write(rel, _file_data(first, index, members, uri), first.mode, first.mtime)
        for other in others:
            writer.link(member_name(other.name), rel)


class _MemberReader:
    """Verified, inflated gzip members, fetched by as few ranged reads as adjacency allows
    (runs of members at most :data:`MERGE_GAP` apart, up to :data:`MAX_READ` bytes a read);
    asked for in increasing order."""

    def __init__(
        self, store: BlobStore, uri: str, index: Index, needed: list[int], on_read: OnRead | None
    ) -> None:
        self._store, self._uri, self._members, self._on_read = store, uri, index.members, on_read
        self.runs: list[list[int]] = []  # [first, last] member of each read
        for i in needed:
            run = self.runs[-1] if self.runs else None
            m = self._members[i]
            end = self._members[run[1]].coff + self._members[run[1]].clen if run is not None else 0
            if (
                run is not None
                and m.coff - end <= MERGE_GAP
                and m.coff + m.clen - self._members[run[0]].coff <= MAX_READ
            ):
                run[1] = i
            else:
                self.runs.append([i, i])
        self._next = 0  # the next run to read
        self._buf = b""
        self._base = 0  # the object offset of ``_buf``
        self._buf_run = (-1, -1)
        self._last: tuple[int, bytes] = (-1, b"")

    def get(self, i: int) -> bytes:
        """Member ``i``'s data, checked against its CRC-32 and length.

        Raises:
            CorruptCheckpointError: the member does not match the index.
        """
        from .compression import inflate
        from .index import _damaged

        if self._last[0] == i:
            return self._last[1]
        if not self._buf_run[0] <= i <= self._buf_run[1]:
            from ..util.cancellation import check

            check()  # a load cancelled (close(), a cancelled await) reads no further
            while self.runs[self._next][1] < i:
                self._next += 1
            first, last = self.runs[self._next]
            self._base = self._members[first].coff
            length = self._members[last].coff + self._members[last].clen - self._base
            self._buf = self._store.read_range(self._uri, self._base, length)
            if len(self._buf) != length:
                raise _damaged(self._uri, f"the object ends inside gzip member {last}")
            if self._on_read is not None:
                self._on_read(length)
            self._buf_run = (first, last)
        m = self._members[i]
        at = m.coff - self._base
        data, whole = inflate(self._buf[at : at + m.clen], m.ulen)
        if not whole or len(data) != m.ulen or zlib.crc32(data) != m.crc:
            raise _damaged(self._uri, f"gzip member {i} (byte {m.coff}) does not match the index")
        self._last = (i, data)
        return data


def file_data(store: BlobStore, uri: str, index: Index, entry: FileEntry) -> Iterator[memoryview]:
    """The data of the one file ``entry`` of ``index``, as :func:`_file_data` checks it."""
    needed = list(range(entry.first, entry.last + 1)) if entry.size else []
    return _file_data(entry, index, _MemberReader(store, uri, index, needed, None), uri)


def read_file(store: BlobStore, uri: str, index: Index, name: str, out) -> int:
    """Write file ``name``'s data to the writable ``out`` by ranged reads of its members
    (one read for adjacent ones), verifying each member's CRC-32 and the file's hash;
    returns the bytes written. Partial restore (:mod:`.partial`) reads files this way.

    Raises:
        KeyError: the index has no regular file ``name``.
        CorruptCheckpointError: a member or the file's content does not match the index.
    """
    entry = index.files[name]
    for piece in file_data(store, uri, index, entry):
        out.write(piece)
    return entry.size


def _file_data(entry: FileEntry, index: Index, members: _MemberReader, uri: str) -> Iterator[memoryview]:
    """The pieces of ``entry``'s data; raises CorruptCheckpointError after the last one if
    they do not hash to what the index records."""
    digest = digests.new(index.algorithm)
    skip, left = entry.offset, entry.size
    i = entry.first
    while left and i <= entry.last:
        piece = memoryview(members.get(i))[skip : skip + left]
        skip = 0
        digest.update(piece)
        left -= len(piece)
        i += 1
        yield piece
    if left or digest.hexdigest() != entry.digest:
        from ..uri import redact

        raise CorruptCheckpointError(
            f"{entry.name[:200]!r} restored from {redact(uri)} does not match the"
            f" {digests.LABEL[index.algorithm]} its index records; the object is damaged: save the"
            " checkpoint again"
        )


# --------------------------------------------------------------------------- without an index


def _from_stream(
    store: BlobStore,
    uri: str,
    size: int,
    selection: Selection,
    writer: _Writer,
    limits: LoadLimits,
    on_read: OnRead | None,
    depth: int = 0,
) -> None:
    """Stream the whole archive (every member's CRC-32 and the length checked), writing the
    selected files; hard-linked names whose file is not selected take a second pass."""
    from .compression import decompressor
    from .pipeline import ReadAhead
    from .restore import CountingReader, read_head, sniff

    with store.open_read(uri) as raw, ReadAhead(raw, on_chunk=on_read) as ahead:
        head = read_head(ahead)  # type: ignore[arg-type]
        kind = sniff(head, size)
        if kind not in ("tar.gz", "tar"):
            from ..uri import redact

            raise NotFoundError(
                f"{redact(uri)} is a payload (saved bytes or a file), not a folder: it holds no"
                f" {', '.join(repr(n) for n in selection.names[:20])}; load() it whole"
            )
        stream = CountingReader(head, ahead)  # type: ignore[arg-type]
        with stream.whole(size):
            inflated = decompressor(stream) if kind == "tar.gz" else stream  # type: ignore[arg-type]
            pending = _extract_selected(ExactReader(inflated), selection, writer, limits, uri)  # type: ignore[arg-type]
    if kind == "tar.gz":
        from .index import check_tail

        # the index after the tar is in extra fields, which decoding skips: checked here
        check_tail(inflated.tail, uri)  # type: ignore[union-attr]
    missing = selection.missing()
    if missing:
        raise absent(uri, missing, folders=selection.folders, hints=selection.hints)
    if pending:
        _link_unselected(store, uri, size, pending, writer, limits, depth)


def _extract_selected(
    reader: ExactReader, selection: Selection, writer: _Writer, limits: LoadLimits, uri: str
) -> dict[str, str]:
    """Write the selected regular files of the tar stream; returns the selected hard-linked
    names whose file was not written (name -> the name it links to)."""
    from . import tarstream as ts
    from .archive import _safe_name

    pending: dict[str, str] = {}
    count = 0
    for member in read_members(reader):
        count += 1
        if count > limits.max_members or (
            limits.max_bytes is not None and reader.offset + member.size > limits.max_bytes
        ):
            if count > limits.max_members:
                raise _over_members(limits, uri)
            raise _over_bytes(
                limits.max_bytes, uri, "the tarball (a partial load without an index inflates all of it)"
            )
        h, name = member.header, member.name
        rel = _safe_name(name)
        t = h.typeflag
        if t not in _KNOWN_TYPES:
            raise UnsafeArchiveError(
                f"member {name[:200]!r} is of tar type {t!r} (a device, FIFO or unknown kind), which a"
                " checkpoint cannot hold; refusing"
            )
        is_file = t in (ts.REGTYPE, ts.AREGTYPE, ts.CONTTYPE) and not (
            t == ts.AREGTYPE and name.endswith("/")
        )
        if is_file and rel and selection.match(rel):
            writer.write(rel, _data(reader, member.size), h.mode, h.mtime)
            pad = ts.padding(member.size)
            if pad:
                reader.read(pad)
            pending.pop(rel, None)
            continue
        if t == ts.LNKTYPE and rel and selection.match(rel):
            target = _safe_name(member.linkname, what=f"hard link {name[:200]!r} to")
            if target in writer.paths and target not in pending:
                writer.link(rel, target)
            else:
                pending[rel] = target
        reader.skip(member.size)
    reader.finish()
    return pending


def _data(reader: ExactReader, size: int) -> Iterator[bytes | memoryview]:
    left = size
    while left:
        chunk = reader.read_some(min(left, _CHUNK))
        left -= len(chunk)
        yield chunk


def _link_unselected(
    store: BlobStore,
    uri: str,
    size: int,
    pending: dict[str, str],
    writer: _Writer,
    limits: LoadLimits,
    depth: int,
) -> None:
    """Give the hard-linked names in ``pending`` the data of the files they link to, which
    the selection left out: a second pass restores those files aside, then links them."""
    import shutil
    import tempfile

    if depth >= 4:
        raise UnsafeArchiveError(
            f"hard links in {sorted(pending)[:5]} chain through more than 4 other links; refusing"
        )
    aside = tempfile.mkdtemp(prefix=LINKS, dir=writer.root)
    try:
        targets = Selection(tuple(dict.fromkeys(pending.values())), folders=False)
        other = _Writer(aside, writer.budget)
        try:
            _from_stream(store, uri, size, targets, other, limits, None, depth + 1)
        except NotFoundError:
            raise UnsafeArchiveError(
                f"hard links among {sorted(pending)[:5]} point to names that are not files of the"
                " archive; refusing to restore them"
            ) from None
        for rel, target in pending.items():
            os.link(other.paths[target], writer._new(rel), follow_symlinks=False)
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def _over_members(limits: LoadLimits, uri: str) -> UnsafeArchiveError:
    from ..uri import redact
    from ..util.limits import MAX_MEMBERS_ENV

    return UnsafeArchiveError(
        f"{redact(uri)} has more than {limits.max_members:,} members; refusing to restore from it."
        f" Raise {MAX_MEMBERS_ENV} if it is genuine"
    )


def _over_bytes(max_bytes: int | None, uri: str, what: str) -> UnsafeArchiveError:
    from ..uri import redact
    from ..util.limits import MAX_UNPACKED_ENV

    return UnsafeArchiveError(
        f"{what} of {redact(uri)} expand beyond the limit of {max_bytes} bytes; refusing to restore"
        f" them. Raise {MAX_UNPACKED_ENV} if it is genuine"
    )


def _known_types() -> frozenset[bytes]:
    from . import tarstream as ts

    return frozenset((ts.REGTYPE, ts.AREGTYPE, ts.CONTTYPE, ts.DIRTYPE, ts.SYMTYPE, ts.LNKTYPE))


_KNOWN_TYPES = _known_types()

__all__ = [
    "MAX_READ",
    "Restored",
    "Selection",
    "absent",
    "file_data",
    "read_file",
    "member_name",
    "restore_into",
    "restore_members",
]
