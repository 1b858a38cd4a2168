"""Streaming tar: pack a directory into a stream, and unpack a stream safely.

``pack_directory`` writes a tar of a directory's top-level entries (recursively,
names relative to the directory, sorted) to any writable, without a temporary file,
and only members that ``unpack`` restores (links are made relative or stored as content).
``unpack`` reads a tar stream and extracts it under a destination that it never leaves:
absolute names, ``..``, links that resolve outside the tree, devices and FIFOs are
refused with :class:`UnsafeArchiveError`; a damaged or truncated stream raises
:class:`CorruptCheckpointError`. Symbolic links are created after every file, and then
checked, so no member is ever written through a link.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import IO, TYPE_CHECKING, BinaryIO

from ..errors import (
    CheckpointError,
    CorruptCheckpointError,
    PathTooLongError,
    StoreError,
    UnsafeArchiveError,
    UnsupportedDataError,
    WorkspaceError,
)
from ..util.limits import MAX_MEMBERS_ENV, MAX_UNPACKED_ENV, DiskBudget, LoadLimits
from ..util.paths import LeaveOut, current_umask
from ..util.sources import changed_error, check_unchanged
from ..util.sparse import SparseWriter
from ..util.workfiles import is_working_file
from . import tarstream as ts
from .hashing import Hasher
from .incremental import Copy
from .index import ALIGN_MIN, IndexBuilder
from .lookahead import Lookahead

if TYPE_CHECKING:
    from .filehashes import FileHashes
    from .incremental import Reuse

_CHUNK = 4 * 1024 * 1024  # the compressors' block size: file data reaches them uncopied
_MAX_META = 1024 * 1024  # PAX and GNU long-name members hold names, not data
_OPEN_FLAGS = (
    os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
)


# --------------------------------------------------------------------------- pack


class _Owners:
    """uid/gid -> user/group names, looked up once each."""

    def __init__(self) -> None:
        self._users: dict[int, str] = {}
        self._groups: dict[int, str] = {}

    def user(self, uid: int) -> str:
        if uid not in self._users:
            try:
                import pwd

                self._users[uid] = pwd.getpwuid(uid).pw_name
            except (ImportError, KeyError):
                self._users[uid] = ""
        return self._users[uid]

    def group(self, gid: int) -> str:
        if gid not in self._groups:
            try:
                import grp

                self._groups[gid] = grp.getgrgid(gid).gr_name
            except (ImportError, KeyError):
                self._groups[gid] = ""
        return self._groups[gid]


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


# O_NONBLOCK: a file that became a FIFO since the listing must not block the save
_READ_FLAGS = (
    os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
)
_FOLLOW_READ_FLAGS = _READ_FLAGS & ~getattr(os, "O_NOFOLLOW", 0)  # the content of a link out of the tree


def pack_directory(
    src: str | os.PathLike[str],
    out: BinaryIO,
    *,
    leave_out: LeaveOut | None = None,
    limits: LoadLimits | None = None,
    on_data: Callable[[int], None] | None = None,
    index: IndexBuilder | None = None,
    reuse: Reuse | None = None,
    end: bool = True,
    names: list[tuple[str, bytes]] | None = None,
    lookahead: Lookahead | None = None,
) -> int:
    """Write an uncompressed tar of ``src``'s entries to ``out``; returns the bytes of file data.

    This library's working files (other saves' staging copies, temporary files, sharded
    pieces: :func:`~flyte_checkpoint.util.workfiles.is_working_file`) are left out at any depth,
    and so is what ``leave_out`` names (a local destination inside ``src``).
    Every member is one that :func:`unpack` restores: a symbolic link that resolves inside
    the tree is stored as a relative link (as written when that already resolves through
    the tree's own folders); one that leaves the tree is stored as what it points at, a
    file's or a folder's content (as ``tar -h`` does). Nor does the tarball go over the
    ``limits`` of a load (default :meth:`LoadLimits.from_env`: those a load here applies).
    ``on_data`` (if given) is called with the size of each piece of file data as it is read.
    With an ``index``, ``out`` must have ``cut()`` (a :class:`~.pipeline.ParallelGzipWriter`):
    the data of each file of at least :data:`~.index.ALIGN_MIN` bytes, with its padding, is
    cut into gzip members of its own (the first placed by ``out.align()`` where ``out`` has
    it), and each regular file is recorded in ``index``.
    With ``reuse`` too (:class:`~.incremental.Reuse`: the previous object of an incremental
    save), such a file whose hash that object's index records is not read into ``out`` but
    copied from there (``out.copy``), and where the store needs long copies the headers between
    two copied files are copied too when they are the same bytes.
    ``end=False`` leaves out the end-of-archive blocks (a segment of a sharded save, which
    others' members follow); ``names`` (if given) gets each member's name and type flag.
    ``lookahead`` (with ``reuse``): the hashing begun by :func:`hash_ahead` while the previous
    object's index was read, continued by the packer (and closed when it ends).

    Raises:
        UnsupportedDataError: the tree holds a FIFO, device or socket, a link to nothing
            outside the tree, or a loop of links; or it has more members, or its tar stream
            more bytes, than ``limits`` let a load restore (the message names the variable).
        ValueError: a limit's environment variable holds something other than a number.
        SourceChangedError: a file changed while it was read, or was removed before.
        PathTooLongError: a path in the tree is longer than the system allows.
    """
    root = os.fspath(src)
    limits = limits or LoadLimits.from_env()
    try:
        packer = _Packer(root, out, leave_out, limits, on_data, index, reuse)
        packer.names = names
        packer.given_lookahead = lookahead
        return packer.run(end=end)
    except OSError as exc:
        if isinstance(exc, CheckpointError):
            raise
        if exc.errno == errno.ENAMETOOLONG:
            raise PathTooLongError.for_path(
                exc.filename or root,
                f"give the folders in {root} shorter names, or save a folder further down",
            ) from None
        if exc.errno == errno.ENOENT and exc.filename:  # listed, then gone before it was read
            raise changed_error(exc.filename, "it was removed before it was read") from None
        raise


#: The most entries :func:`hash_ahead` lists (the packer announces the rest as it reaches them).
HASH_AHEAD_ENTRIES = 10_000


def hash_ahead(src: str | os.PathLike[str]) -> Lookahead:
    """Start hashing the regular files of ``src`` that an incremental save may copy (those of
    at least :data:`~.index.ALIGN_MIN` bytes, links not followed, this library's working files
    left out), in the order the packer reaches them (names sorted, a folder's files where the
    folder is), before the previous object's index says which sizes it holds: the save hashes
    while it reads the index. Give the result to :func:`pack_directory` (which drops the jobs
    of sizes the index does not hold, and closes it), or :meth:`~.lookahead.Lookahead.close` it.
    At most :data:`HASH_AHEAD_ENTRIES` entries are listed; a job of a file that differs when
    the packer reaches it is not used (:meth:`~.lookahead.Lookahead.take`)."""
    lookahead = Lookahead()
    listed = 0
    stack: list[Iterator[os.DirEntry[str]]] = []  # the folders being walked, each where it is

    def enter(folder: str) -> None:
        nonlocal listed
        try:
            entries = [e for e in _sorted_entries(folder) if not is_working_file(e.name)]
        except OSError:
            return  # the packer meets it and says what is wrong
        listed += len(entries)
        stack.append(iter(entries))

    try:
        enter(os.fspath(src))
        while stack:
            entry = next(stack[-1], None)
            if entry is None:
                stack.pop()
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    if listed < HASH_AHEAD_ENTRIES:
                        enter(entry.path)
                    continue
                if not entry.is_file(follow_symlinks=False):
                    continue
                size = entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
            if size >= ALIGN_MIN:
                lookahead.schedule(entry.path)
                lookahead.sizes[entry.path] = size
    except BaseException:
        lookahead.close()
        raise
    return lookahead


class _Packer:
    """One walk of a tree, writing its members. ``via`` (the link that led there) marks a
    walk through a folder outside the tree, where every link is stored as its content."""

    def __init__(
        self,
        root: str,
        out: BinaryIO,
        leave_out: LeaveOut | None,
        limits: LoadLimits,
        on_data: Callable[[int], None] | None = None,
        index: IndexBuilder | None = None,
        reuse: Reuse | None = None,
    ) -> None:
        self.root = root
        self.on_data = on_data
        self.index = index
        self._cut = getattr(out, "cut", None) if index is not None else None
        # the cut before a large file's data, placing it where a later save may copy it from
        self._align = getattr(out, "align", self._cut) if index is not None else None
        self._hasher: Hasher | None = None  # hashes of file data off this thread (with an index)
        self._lookahead: Lookahead | None = None  # hashes of files that may be copied, computed ahead
        # The run of copies being given to ``out``: its last span, its compressed length, the
        # tar offset where it ends, and whether it is (or is planned to be) long enough for the
        # store's shortest copy (``Reuse.min_copy``).
        self._run: tuple[Copy, int, int, bool] | None = None
        # The entries of the folder being walked that follow the file being added, and the
        # folder's name in the archive (to plan runs).
        self._upcoming: list[os.DirEntry[str]] = []
        self._upcoming_in = ""
        self.reuse = reuse if self._cut is not None else None
        self._gz = out
        self.root_real = os.path.realpath(root)
        self._inside_prefix = self.root_real.rstrip("/") + "/"
        self._out = out.write
        self.owners = _Owners()
        self.leave_out = leave_out
        self.limits = limits
        self.hard_links: dict[tuple[int, int], str] = {}
        self.open_dirs: set[tuple[int, int]] = set()  # folders being walked: meeting one again is a loop
        self.total = 0
        self.members = 0
        self.offset = 0  # bytes of tar stream written, as a load's reader counts them
        self.names: list[tuple[str, bytes]] | None = None
        self.given_lookahead: Lookahead | None = None  # begun by hash_ahead, taken over here

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.offset += len(data)
        self._out(data)

    def header(self, arcname: str, *, size: int, typeflag: bytes, linkname: str = "", **meta) -> None:
        """Write one member's header, once sure a load would accept the member (the same counts
        as :meth:`_Extractor._count`): refused here, the save commits nothing."""
        block = ts.header(arcname, size=size, typeflag=typeflag, linkname=linkname, **meta)
        self.members += 1
        limits = self.limits
        if self.members > limits.max_members:
            raise UnsupportedDataError(
                f"{self.root} holds more than {limits.max_members:,} members (files, folders and links;"
                f" at {_shown(arcname)}), more than a load accepts ({MAX_MEMBERS_ENV}): nothing was"
                f" stored and the previous checkpoint is unchanged. Save a folder with fewer entries, or"
                f" raise {MAX_MEMBERS_ENV} here and wherever the checkpoint is loaded"
            )
        if limits.max_bytes is not None and self.offset + len(block) + size > limits.max_bytes:
            raise UnsupportedDataError(
                f"{self.root} unpacks to more than {limits.max_bytes:,} bytes (file data, and 512 bytes"
                f" for each header; at {_shown(arcname)}), more than a load accepts ({MAX_UNPACKED_ENV}):"
                f" nothing was stored and the previous checkpoint is unchanged. Save less, or raise"
                f" {MAX_UNPACKED_ENV} here and wherever the checkpoint is loaded"
            )
        if self.names is not None:
            self.names.append((arcname, typeflag))
        self.write(block)

    def run(self, end: bool = True) -> int:
        if self.index is None:
            self.add_entries(self.root, "", os.stat(self.root), None)
            if end:
                self.write(ts.end_of_archive())
            return self.total
        self._hasher = hasher = Hasher()
        given, self.given_lookahead = self.given_lookahead, None
        try:
            if self.reuse is not None:
                self._lookahead = given or Lookahead()
                if given is not None:
                    given.retain(self.reuse.wants)  # no more hashing of sizes the base lacks
            elif given is not None:
                given.close()
            self.add_entries(self.root, "", os.stat(self.root), None)
            if end:
                self.write(ts.end_of_archive())
        except BaseException:
            hasher.abort()
            raise
        finally:
            if self._lookahead is not None:
                self._lookahead.close()
        hasher.close()  # every file's digest is final before the index is encoded
        return self.total

    def meta(self, st: os.stat_result) -> dict:
        return {
            "mode": st.st_mode,
            "mtime": int(st.st_mtime),
            "uid": st.st_uid,
            "gid": st.st_gid,
            "uname": self.owners.user(st.st_uid),
            "gname": self.owners.group(st.st_gid),
        }

    def add_entries(self, path: str, arcname: str, st: os.stat_result, via: str | None) -> None:
        key = (st.st_dev, st.st_ino)
        if key in self.open_dirs:
            raise UnsupportedDataError(
                f"the symbolic link {via} leads to a folder that contains it ({path}), a loop that has"
                " no end: remove the link, or save a folder that does not hold it"
            )
        skip = self.leave_out if self.leave_out is not None and self.leave_out.folder == key else None
        self.open_dirs.add(key)
        try:
            entries = [
                e
                for e in _sorted_entries(path)
                if (skip is None or not skip(e.name)) and not is_working_file(e.name)
            ]
            if self._lookahead is not None and via is None:
                self._announce(entries)
            for i, entry in enumerate(entries):
                self._upcoming = entries[i + 1 :] if via is None and self.reuse is not None else []
                self._upcoming_in = arcname
                self.add(entry.path, f"{arcname}/{entry.name}" if arcname else entry.name, entry, via)
        finally:
            self.open_dirs.discard(key)

    def _announce(self, entries: list[os.DirEntry[str]]) -> None:
        """Start hashing the folder's files that an incremental save may copy (large, and of
        a size the previous object holds), so their digests are ready when they are reached."""
        assert self._lookahead is not None and self.reuse is not None
        for entry in entries:
            try:
                if not entry.is_file(follow_symlinks=False):
                    continue
                size = entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue  # the packer meets it and says what is wrong
            if size >= ALIGN_MIN and self.reuse.wants(size):
                self._lookahead.schedule(entry.path)

    def add(self, path: str, arcname: str, entry: os.DirEntry[str], via: str | None) -> None:
        if entry.is_file(follow_symlinks=via is not None) and self.add_file(path, arcname, via):
            return
        st = self.stat(path, via)
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            self.header(arcname + "/", size=0, typeflag=ts.DIRTYPE, **self.meta(st))
            self.add_entries(path, arcname, st, via)
        elif stat.S_ISLNK(mode):
            self.add_link(path, arcname, st)
        elif not (stat.S_ISREG(mode) and self.add_file(path, arcname, via)):
            raise UnsupportedDataError(
                f"{path} is {_kind(mode)}: a checkpoint holds only files, folders and links."
                f" Move it out of {self.root} or save another folder; the previous checkpoint is unchanged"
            )

    def stat(self, path: str, via: str | None) -> os.stat_result:
        if via is None:
            return os.lstat(path)
        try:
            return os.stat(path)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                raise
        raise UnsupportedDataError(
            f"{path} is a symbolic link that leads nowhere ({os.readlink(path)!r}), inside {via}, a link"
            " out of the folder whose content is stored: remove it, or make it point at a file"
        )

    def add_file(self, path: str, arcname: str, via: str | None) -> bool:
        """Add a regular file through one descriptor (open, fstat, read, fstat, close); False if
        it turned out not to be a regular file."""
        try:
            fd = os.open(path, _READ_FLAGS if via is None else _FOLLOW_READ_FLAGS)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):  # became a link or a socket meanwhile
                return False
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return False
            key = (st.st_dev, st.st_ino)
            if st.st_nlink > 1 and key in self.hard_links:
                linkname = self.hard_links[key]
                self.header(arcname, size=0, typeflag=ts.LNKTYPE, linkname=linkname, **self.meta(st))
                if self.index is not None:
                    self.index.add_alias(arcname, linkname)
                return True
            if st.st_nlink > 1:
                self.hard_links[key] = arcname
            meta = self.meta(st)
            self.header(arcname, size=st.st_size, typeflag=ts.REGTYPE, **meta)
            if self.index is None:
                _copy_fd(fd, path, st.st_size, self.write, self.on_data)
            else:
                self._indexed_copy(fd, path, arcname, st, meta)
            check_unchanged(fd, st, path)
            self.total += st.st_size
            return True
        finally:
            os.close(fd)

    def _indexed_copy(self, fd: int, path: str, arcname: str, st: os.stat_result, meta: dict) -> None:
        """Copy the file as :func:`_copy_fd` does, hashed on the hasher's thread, in members of
        its own if large."""
        assert self.index is not None
        size = st.st_size
        aligned = self._cut is not None and size >= ALIGN_MIN
        if aligned:
            pending = self._gz.pending() if hasattr(self._gz, "pending") else None
            if (
                self.reuse is not None
                and self.reuse.wants(size)
                and self._copied(fd, path, arcname, st, meta)
            ):
                return
            if pending:
                self.index.add_gap(self.offset - len(pending), pending)
            self._align()  # type: ignore[misc]
        start = self.offset
        hasher = self._hasher
        assert hasher is not None
        digest = hasher.new()
        _copy_fd(fd, path, size, self.write, self.on_data, partial(hasher.update, digest))
        if aligned:
            self._cut()  # type: ignore[misc]
        self.index.add_file(arcname, start, size, meta["mtime"], meta["mode"] & 0o7777, digest.hexdigest)

    def _copied(self, fd: int, path: str, arcname: str, st: os.stat_result, meta: dict) -> bool:
        """Copy the file's members from the previous object if it holds the same content (by
        hash: hashed ahead by the lookahead, or read once more here); False to write it as
        usual. The caller checks afterwards that the file did not change meanwhile."""
        from . import digests

        reuse, gz, index = self.reuse, self._gz, self.index
        assert reuse is not None and index is not None
        size = st.st_size
        digest = self._lookahead.take(path, st) if self._lookahead is not None else None
        if digest is None:
            digest = digests.of_file(fd, size)
        if digest is None:  # it ended early: it changed, which writing it as usual reports
            return False
        span = reuse.match(size, digest)
        if span is None:
            return False
        pending = gz.pending()  # type: ignore[attr-defined]
        gap = reuse.gap_before(span.first, pending)
        run = self._run
        joined = (  # the copy continues the run before it: everything since is the gap copied
            run is not None
            and pending is not None
            and self.offset - len(pending) == run[2]
            and (gap.first if gap is not None else span.first if not pending else -1) == run[0].last + 1
        )
        length = (run[1] if joined and run is not None else 0) + span.length + (gap.length if gap else 0)
        long = (joined and run is not None and run[3]) or length >= reuse.min_copy
        if not long and not self._run_ahead(span, reuse.min_copy - length):
            return False  # a short run, copied by a store with a minimum piece only by reading it
        if pending:
            index.add_gap(self.offset - len(pending), pending)
        if gap is not None:
            gz.copy(reuse.source, gap.start, gap.length, _rows(gap.members), replace=True)  # type: ignore[attr-defined]
        start = self.offset
        gz.copy(reuse.source, span.start, span.length, _rows(span.members))  # type: ignore[attr-defined]
        self.offset += size + ts.padding(size)
        self._run = (span, length, self.offset, True)
        if self.on_data is not None:
            self.on_data(size)
        reuse.files_copied += 1
        reuse.bytes_copied += span.length + (gap.length if gap is not None else 0)
        index.add_file(arcname, start, size, meta["mtime"], meta["mode"] & 0o7777, digest)
        return True

    def _run_ahead(self, span: Copy, need: int) -> bool:
        """Whether the files right after this one in its folder (hashed ahead) are unchanged,
        follow ``span`` in the base, and have the tar headers the base recorded there (same
        name, size, mode, owner and mtime), so that with them the run holds ``need`` more bytes:
        then a file too short to copy alone is copied as part of the run. Conservative (a small
        file or a folder between, a base that recorded no header hashes: no); should a file
        still turn out otherwise, the run is copied as it is (a short one read back and sent by
        the store's writer)."""
        reuse, lookahead = self.reuse, self._lookahead
        assert reuse is not None
        if lookahead is None or need <= 0:
            return need <= 0
        got, before = 0, span
        for entry in self._upcoming:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                return False
            if not stat.S_ISREG(st.st_mode) or st.st_size < ALIGN_MIN or st.st_nlink > 1:
                return False  # its members (a folder's, a small file's, a hard link's) are not planned
            digest = lookahead.peek(entry.path) if reuse.wants(st.st_size) else None
            after = reuse.match(st.st_size, digest) if digest is not None else None
            if after is None:
                return False
            arcname = f"{self._upcoming_in}/{entry.name}" if self._upcoming_in else entry.name
            header = ts.header(arcname, size=st.st_size, typeflag=ts.REGTYPE, **self.meta(st))
            if reuse.gap_is(after.first, header) != before.last + 1:  # not next, or a new header
                return False
            got += after.start + after.length - (before.start + before.length)
            if got >= need:
                return True
            before = after
        return False

    def add_link(self, path: str, arcname: str, st: os.stat_result) -> None:
        target = os.readlink(path)
        linkname = target if self.follows_tree(arcname, target) else self.resolve(path, arcname, target)
        if linkname is not None:
            self.header(arcname, size=0, typeflag=ts.SYMTYPE, linkname=linkname, **self.meta(st))

    def follows_tree(self, arcname: str, target: str) -> bool:
        """True when the relative ``target`` reaches its last name through real folders of the
        tree only (never above its root, never through a link), so it resolves the same
        wherever the tree is restored."""
        if not target or target.startswith("/"):
            return False
        at = arcname.split("/")[:-1]
        names = [n for n in target.split("/") if n not in ("", ".")]
        for i, name in enumerate(names):
            if name == "..":
                if not at:
                    return False
                at.pop()
                continue
            at.append(name)
            if i < len(names) - 1:
                try:
                    if not stat.S_ISDIR(os.lstat(os.path.join(self.root_real, *at)).st_mode):
                        return False
                except OSError:
                    return False
        return True

    def resolve(self, path: str, arcname: str, target: str) -> str | None:
        """The relative link to store for a link that resolves inside the tree; None once the
        content of one that leaves it is added instead."""
        try:
            real, exists = os.path.realpath(path, strict=True), True
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsupportedDataError(
                    f"the symbolic link {path} -> {target!r} is part of a loop of links: remove it, or"
                    " point it at a file or folder"
                ) from None
            real, exists = os.path.realpath(path), False
        if self.inside(real):  # one that leads nowhere inside is restored leading to the same name
            return os.path.relpath(real, os.path.join(self.root_real, os.path.dirname(arcname)))
        if not exists:
            raise UnsupportedDataError(
                f"the symbolic link {path} -> {target!r} leads out of {self.root} to nothing, so there is"
                " nothing to store: remove it, or point it at a file inside the folder"
            )
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode) and self.root_real.startswith(real.rstrip("/") + "/"):
            raise UnsupportedDataError(
                f"the symbolic link {path} leads to {real}, a folder that holds {self.root}: its content"
                " would hold the link again, without end. Remove the link, or save a folder that does"
                " not hold it"
            )
        if stat.S_ISDIR(st.st_mode):
            self.header(arcname + "/", size=0, typeflag=ts.DIRTYPE, **self.meta(st))
            self.add_entries(path, arcname, st, path)
        elif not (stat.S_ISREG(st.st_mode) and self.add_file(path, arcname, path)):
            raise UnsupportedDataError(
                f"the symbolic link {path} leads to {real}, which is {_kind(st.st_mode)}: a checkpoint"
                " holds only files, folders and links. Remove the link; the previous checkpoint is unchanged"
            )
        return None

    def inside(self, real: str) -> bool:
        return real == self.root_real or real.startswith(self._inside_prefix)


def _rows(members: list) -> list[tuple[int, int, int, int]]:
    """The members' rows as :meth:`~.pipeline.ParallelGzipWriter.copy` takes them (a base that
    :class:`~.incremental.Reuse` copies from records every ``ccrc``)."""
    return [m.row() for m in members]


def _sorted_entries(path: str) -> list[os.DirEntry[str]]:
    with os.scandir(path) as it:
        return sorted(it, key=lambda e: e.name)


def _copy_fd(
    fd: int,
    path: str,
    size: int,
    write,
    on_data: Callable[[int], None] | None = None,
    on_chunk: Callable[[bytes], None] | None = None,
) -> None:
    """Write exactly ``size`` bytes of the open file, then its padding; a file that is
    shorter or longer than ``size`` by now is an error (it changed while being saved).
    ``on_chunk`` (if given) gets each piece of the data (not the padding) before it is written."""
    left = size
    while True:
        want = min(left + 1, _CHUNK)  # one byte more than expected: a short read proves the end
        chunk = os.read(fd, want)
        if len(chunk) > left:
            left = -1
            break
        if chunk:
            if on_chunk is not None:
                on_chunk(chunk)
            write(chunk)
            left -= len(chunk)
            if on_data is not None:
                on_data(len(chunk))
        if len(chunk) < want:
            break
    if left:
        raise changed_error(path, f"it is no longer {size} bytes long")
    pad = ts.padding(size)
    if pad:
        write(bytes(pad))


# --------------------------------------------------------------------------- unpack


@dataclass
class UnpackStats:
    """What ``unpack`` restored: members, bytes of file data, symbolic links."""

    members: int = 0
    bytes: int = 0
    links: int = 0


class ExactReader:
    """Exact reads from a stream; a short read is a truncated archive."""

    def __init__(self, stream: BinaryIO) -> None:
        self._read = stream.read
        # a stream with read1 hands out what it holds without gathering (or copying) it
        self._read_some = getattr(stream, "read1", stream.read)
        self.offset = 0

    def read_some(self, n: int) -> bytes | memoryview:
        """Between 1 and ``n`` bytes, as the stream holds them (from ``read1`` where it has
        one, maybe a memoryview: nothing gathered or copied); raises like :meth:`read` if
        the stream ends first."""
        data = self._read_some(n)
        if not data:
            raise self._truncated(self.offset)
        self.offset += len(data)
        return data

    @staticmethod
    def _truncated(at: int) -> CorruptCheckpointError:
        return CorruptCheckpointError(
            f"the tarball ends early (at byte {at}): the object is truncated; save the checkpoint again"
        )

    def read(self, n: int) -> bytes:
        data = self._read(n)
        if len(data) < n:
            parts = [data]
            got = len(data)
            while got < n:
                more = self._read(n - got)
                if not more:
                    raise self._truncated(self.offset + got)
                parts.append(more)
                got += len(more)
            data = b"".join(parts)
        self.offset += n
        return data

    def skip(self, size: int) -> None:
        """Read past a member's ``size`` bytes of data and their padding."""
        left = size + ts.padding(size)
        while left:
            left -= len(self.read_some(min(left, _CHUNK)))

    def finish(self) -> None:
        """Read the rest of the stream (so a compressed stream's checksums are verified),
        which after the end-of-archive marker may only be zero padding.

        Raises:
            CorruptCheckpointError: a byte that is not zero.
        """
        while data := self._read_some(_CHUNK):
            view = memoryview(data)
            for i in range(0, len(view), len(_ZEROS)):
                if not _ZEROS.startswith(view[i : i + len(_ZEROS)]):
                    raise CorruptCheckpointError(
                        f"data follows the tarball's end-of-archive marker (near byte {self.offset + i}):"
                        " the object is damaged; save the checkpoint again"
                    )
            self.offset += len(view)


_ZEROS = bytes(64 * 1024)


@dataclass
class TarMember:
    """One member as its headers describe it (PAX and GNU long names and sizes applied)."""

    name: str
    linkname: str
    size: int
    header: ts.Header


def read_members(reader: ExactReader) -> Iterator[TarMember]:
    r"""Yield the members of an uncompressed tar stream, up to its end-of-archive marker.

    PAX and GNU metadata members are applied to the member they describe, not yielded.
    The caller reads (or :meth:`ExactReader.skip`\ s) each member's data before asking
    for the next one, and :meth:`ExactReader.finish`\ es the stream after the last.

    Raises:
        CorruptCheckpointError: a damaged header or metadata, metadata that describes no
            member, a stream that ends early or whose end-of-archive marker (two zero blocks)
            is missing or cut.
        UnsafeArchiveError: a metadata member too large to be names.
    """
    pax: dict[str, str] = {}
    long_name: str | None = None
    long_link: str | None = None
    described: int | None = None  # where metadata for the next member began, until it comes
    while True:
        block = reader.read(ts.BLOCK)
        if block == ts.ZERO_BLOCK:
            if reader.read(ts.BLOCK) != ts.ZERO_BLOCK:
                raise CorruptCheckpointError(
                    f"a zero block inside the tarball (at byte {reader.offset - 2 * ts.BLOCK}) where a"
                    " header or the end-of-archive marker should be: the object is damaged; save the"
                    " checkpoint again"
                )
            if described is not None:  # the member it was written for was wiped, or cut off
                raise CorruptCheckpointError(
                    f"the tar metadata at byte {described} describes no member: the tarball ends"
                    " after it, so the object is damaged; save the checkpoint again"
                )
            return
        try:
            h = ts.parse(block)
        except ts.HeaderError as exc:
            raise CorruptCheckpointError(
                f"damaged tar header at byte {reader.offset - ts.BLOCK} ({exc}): the object is"
                " corrupt; save the checkpoint again"
            ) from None
        if h.typeflag in (ts.PAX_HEADER, ts.PAX_GLOBAL, ts.GNU_LONGNAME, ts.GNU_LONGLINK):
            if h.typeflag != ts.PAX_GLOBAL and described is None:
                described = reader.offset - ts.BLOCK
            if h.size > _MAX_META:
                raise UnsafeArchiveError(f"a {h.size}-byte tar metadata member; refusing to read it")
            data = reader.read(h.size + ts.padding(h.size))[: h.size]
            try:
                if h.typeflag == ts.PAX_HEADER:
                    pax = ts.parse_pax(data)
                elif h.typeflag == ts.GNU_LONGNAME:
                    long_name = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
                elif h.typeflag == ts.GNU_LONGLINK:
                    long_link = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            except ts.HeaderError as exc:
                raise CorruptCheckpointError(f"damaged tar metadata: {exc}") from None
            continue
        yield TarMember(
            name=pax.get("path", long_name or h.name),
            linkname=pax.get("linkpath", long_link or h.linkname),
            size=_pax_size(pax["size"]) if "size" in pax else h.size,
            header=h,
        )
        pax, long_name, long_link, described = {}, None, None, None


def _safe_name(name: str, what: str = "member") -> str:
    """The member's path relative to the destination, or UnsafeArchiveError."""
    if "\0" in name:
        raise UnsafeArchiveError(f"{what} {_shown(name)} has a NUL in its name; refusing to extract")
    if name.startswith("/"):
        raise UnsafeArchiveError(f"{what} {_shown(name)} has an absolute name; refusing to extract")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchiveError(f"{what} {_shown(name)} climbs out with '..'; refusing to extract")
    return "/".join(parts)


def _shown(name: str) -> str:
    """``repr(name)``, shortened in the middle when long (names may have thousands of characters)."""
    return repr(name) if len(name) <= 200 else repr(name[:120]) + "..." + repr(name[-60:])


def unpack(
    stream: BinaryIO,
    dest: str | os.PathLike[str],
    *,
    max_bytes: int | None = None,
    limits: LoadLimits | None = None,
    budget: DiskBudget | None = None,
    source: str = "the checkpoint",
    on_file: Callable[[str, int, int], None] | None = None,
    hashes: FileHashes | None = None,
) -> UnpackStats:
    """Extract a tar stream under ``dest`` (an existing, empty directory of ours).

    Reads ``stream`` to its end, so a compressed stream's checksums are verified, and
    checks that only zero padding follows the end-of-archive marker. ``limits`` (default
    :class:`LoadLimits` ``(max_bytes=max_bytes)``) bound the tar stream's bytes and its
    members; ``budget`` (default: the reserve of ``limits``) keeps the disk from filling.
    Memory stays bounded whatever the member count and name lengths: what must be
    remembered (links to create last, folders' modes and times) goes to an unnamed file
    in ``dest``, and the tree itself answers what is already there. On an error, ``dest``
    may hold part of the tree (never a link that leaves it): the caller discards it.
    ``on_file`` (if given) is called with each regular file's path, the offset of its data in
    the tar stream and its size before the file is written; it may raise to refuse it.
    ``hashes`` (if given) gets each regular file's place and data as it is written
    (:class:`~.filehashes.FileHashes`).

    Raises:
        UnsafeArchiveError: a member would land outside ``dest``, is a device or FIFO,
            or the archive is over a limit.
        CorruptCheckpointError: the stream is truncated or damaged.
        WorkspaceError: no space left (or the reserve reached), naming the member.
        PathTooLongError: a member's name is too long for the file system, naming it.
        StoreError: the file system refused a member for another reason.
    """
    root = os.path.realpath(dest)
    limits = limits or LoadLimits(max_bytes=max_bytes)
    budget = budget or DiskBudget(root, limits.disk_reserve, source=source)
    import tempfile

    with tempfile.TemporaryFile(dir=root, buffering=256 * 1024) as spill:  # O_TMPFILE: never named
        return _Extractor(root, limits, budget, source, spill, on_file, hashes).run(ExactReader(stream))


_PLACEHOLDER_MODE = 0o400  # no owner write: no restored file has that (they get at least 0o600)
_LINK_MAGIC = b"\0flyte-checkpoint link placeholder\0"
_MEMBER_COST = 4096  # disk an empty member takes (an inode, a directory entry), for the reserve
_LINK, _DIR = b"L", b"D"
_RECORD = struct.Struct("<cI")
_DIR_META = struct.Struct("<Iq")
_MTIME_RANGE = (-(2**40), 2**40)  # os.utime overflows beyond what time_t holds


def _clamp_mtime(mtime: int) -> int:
    return min(max(mtime, _MTIME_RANGE[0]), _MTIME_RANGE[1])


class _Extractor:
    """One extraction into ``root``.

    The tree is its own index: a file, folder or link placeholder already there is found
    by the file system, not in a table. A symbolic link is first a placeholder, a
    read-only file holding its target, so that nothing is ever written through a link and
    a member under a link fails like one under a file; the placeholders become links at
    the end. Links to create and folders' metadata are recorded in an unnamed spill file.
    """

    def __init__(
        self,
        root: str,
        limits: LoadLimits,
        budget: DiskBudget,
        source: str,
        spill: IO[bytes],
        on_file: Callable[[str, int, int], None] | None = None,
        hashes: FileHashes | None = None,
    ) -> None:
        self.root = root
        self.on_file = on_file
        self.hashes = hashes
        self.limits = limits
        self.budget = budget
        self.source = source
        self.umask = current_umask()
        self.stats = UnpackStats()
        self._spill = spill

    def run(self, reader: ExactReader) -> UnpackStats:
        for member in read_members(reader):
            self._count(member, reader)
            try:
                self._extract(member, reader)
            except CheckpointError:
                raise
            except OSError as exc:
                raise file_system_error(exc, self.source, self.root, f"member {_shown(member.name)}") from exc
        reader.finish()
        try:
            self._make_links()
            self._set_folders()
        except CheckpointError:
            raise
        except OSError as exc:
            raise file_system_error(exc, self.source, self.root, "a link or folder") from exc
        return self.stats

    def _count(self, member: TarMember, reader: ExactReader) -> None:
        stats, limits = self.stats, self.limits
        stats.members += 1
        if stats.members > limits.max_members:
            raise UnsafeArchiveError(
                f"the tarball has more than {limits.max_members:,} members (at {_shown(member.name)});"
                f" refusing to extract. Raise {MAX_MEMBERS_ENV} if it is genuine"
            )
        if limits.max_bytes is not None and reader.offset + member.size > limits.max_bytes:
            raise UnsafeArchiveError(
                f"the tarball expands beyond the limit of {limits.max_bytes} bytes (at member"
                f" {_shown(member.name)}), counting 512 bytes for each header; refusing to extract."
                f" Raise {MAX_UNPACKED_ENV} if it is genuine"
            )
        self.budget.claim(_MEMBER_COST)

    def _extract(self, member: TarMember, reader: ExactReader) -> None:
        h, name, size = member.header, member.name, member.size
        rel = _safe_name(name)
        t = h.typeflag
        if t in (ts.REGTYPE, ts.AREGTYPE, ts.CONTTYPE) and not (t == ts.AREGTYPE and name.endswith("/")):
            if not rel:
                raise UnsafeArchiveError(f"file member {_shown(name)} names the destination itself")
            if self.on_file is not None:
                self.on_file(rel, reader.offset, size)
            feed = self.hashes.start(rel, reader.offset, size) if self.hashes is not None else None
            mode = (h.mode & 0o777) | 0o600
            fd = self._create(rel, name, mode)
            try:
                out = SparseWriter(fd, self.budget)
                left = size
                while left:
                    chunk = reader.read_some(min(left, _CHUNK))
                    out.write(chunk)
                    if feed is not None:
                        feed(chunk)
                    left -= len(chunk)
                out.finish()
                if self.umask < 0 or mode & self.umask:  # the umask took bits away: put them back
                    os.fchmod(fd, mode)
                mtime = _clamp_mtime(h.mtime)
                os.utime(fd, (mtime, mtime))
            finally:
                os.close(fd)
            pad = ts.padding(size)
            if pad:
                reader.read(pad)
            self.stats.bytes += size
        elif t == ts.DIRTYPE or (t == ts.AREGTYPE and name.endswith("/")):
            reader.skip(size)
            if rel:
                self._make_dirs(rel, name, folder=True)
                self._record(_DIR, _DIR_META.pack(h.mode & 0o7777, _clamp_mtime(h.mtime)) + os.fsencode(rel))
        elif t == ts.SYMTYPE:
            reader.skip(size)
            if not rel:
                raise UnsafeArchiveError(f"link member {_shown(name)} names the destination itself")
            if member.linkname.startswith("/") or "\0" in member.linkname:
                raise UnsafeArchiveError(
                    f"symbolic link {_shown(name)} points to the absolute path {_shown(member.linkname)};"
                    " refusing"
                )
            self._placeholder(rel, name, os.fsencode(member.linkname))
        elif t == ts.LNKTYPE:
            reader.skip(size)
            self._hard_link(rel, name, member.linkname)
        elif t in (ts.CHRTYPE, ts.BLKTYPE, ts.FIFOTYPE):
            kind = "a FIFO" if t == ts.FIFOTYPE else "a device file"
            raise UnsafeArchiveError(f"member {_shown(name)} is {kind}; a checkpoint cannot hold one")
        else:
            raise UnsafeArchiveError(
                f"member {_shown(name)} has tar type {t!r}, which a checkpoint cannot hold; refusing"
            )

    # -- the tree as the index -------------------------------------------------

    def _path(self, rel: str) -> str:
        return self.root + "/" + rel

    def _create(self, rel: str, name: str, mode: int) -> int:
        """A new file at ``rel`` (its folders made, a file or placeholder there replaced)."""
        path = self._path(rel)
        while True:
            try:
                return os.open(path, _OPEN_FLAGS, mode)
            except FileNotFoundError:
                parent = rel.rpartition("/")[0]
                if not parent:
                    raise
                self._make_dirs(parent, name)
            except FileExistsError:
                self._clear(rel, name)
            except NotADirectoryError:
                raise self._under_non_folder(rel, name) from None

    def _clear(self, rel: str, name: str) -> None:
        """Remove the file or placeholder at ``rel`` (a later member replaces it), never a folder."""
        path = self._path(rel)
        if stat.S_ISDIR(os.lstat(path).st_mode):
            raise UnsafeArchiveError(f"member {_shown(name)} would replace a folder of the same name")
        os.unlink(path)

    def _make_dirs(self, rel: str, name: str, *, folder: bool = False) -> None:
        """Make the folder ``rel`` and any missing parents (walking up, not recursing: paths
        may have thousands of parts)."""
        missing: list[str] = []
        cur = rel
        while True:
            try:
                os.mkdir(self._path(cur))
                break
            except FileNotFoundError:
                missing.append(cur)
                cur = cur.rpartition("/")[0]
                if not cur:
                    raise
            except FileExistsError:
                if stat.S_ISDIR(os.lstat(self._path(cur)).st_mode):
                    break
                if folder and cur == rel:
                    raise UnsafeArchiveError(
                        f"folder member {_shown(name)} would replace a file or link"
                    ) from None
                raise self._under_non_folder(rel, name) from None
            except NotADirectoryError:
                raise self._under_non_folder(rel, name) from None
        for path in reversed(missing):
            os.mkdir(self._path(path))

    def _under_non_folder(self, rel: str, name: str) -> UnsafeArchiveError:
        """The error for a member whose path runs through a file or a link."""
        parts = rel.split("/")
        for i in range(1, len(parts)):
            anc = "/".join(parts[:i])
            st = os.lstat(self._path(anc))
            if not stat.S_ISDIR(st.st_mode):
                what = "symbolic link" if _is_placeholder(st) else "file"
                return UnsafeArchiveError(
                    f"member {_shown(name)} lies under the {what} {_shown(anc)}; refusing to extract"
                )
        return UnsafeArchiveError(f"member {_shown(name)} lies under a file or link; refusing")

    def _placeholder(self, rel: str, name: str, target: bytes) -> None:
        """Stand-in for the symbolic link ``rel`` -> ``target`` until :meth:`_make_links`."""
        fd = self._create(rel, name, _PLACEHOLDER_MODE)
        try:
            if self.umask < 0 or self.umask & _PLACEHOLDER_MODE:  # it must stay readable
                os.fchmod(fd, _PLACEHOLDER_MODE)
            body = _LINK_MAGIC + target
            self.budget.claim(len(body))
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        self._record(_LINK, os.fsencode(rel))
        self.stats.links += 1

    def _hard_link(self, rel: str, name: str, linkname: str) -> None:
        src_rel = _safe_name(linkname, what=f"hard link {_shown(name)} to")
        try:
            st = os.lstat(self._path(src_rel)) if rel and src_rel else None
        except (FileNotFoundError, NotADirectoryError):
            st = None
        if st is None or stat.S_ISDIR(st.st_mode):
            raise UnsafeArchiveError(
                f"hard link {_shown(name)} points to {_shown(linkname)}, which is not an earlier file of"
                " the archive; refusing to extract"
            )
        if src_rel == rel:  # a link to itself: the member is already there
            return
        if _is_placeholder(st):  # a hard link to a symbolic link is that link again
            self._placeholder(rel, name, _read_placeholder(self._path(src_rel)))
            return
        path = self._path(rel)
        while True:
            try:
                os.link(self._path(src_rel), path, follow_symlinks=False)
                return
            except FileNotFoundError:
                self._make_dirs(rel.rpartition("/")[0], name)
            except FileExistsError:
                self._clear(rel, name)
            except NotADirectoryError:
                raise self._under_non_folder(rel, name) from None

    # -- the spill file ----------------------------------------------------------

    def _record(self, kind: bytes, payload: bytes) -> None:
        self._spill.write(_RECORD.pack(kind, len(payload)) + payload)

    def _records(self, kind: bytes) -> Iterator[bytes]:
        spill = self._spill
        spill.flush()
        spill.seek(0)
        while head := spill.read(_RECORD.size):
            k, n = _RECORD.unpack(head)
            payload = spill.read(n)
            if k == kind:
                yield payload
        spill.seek(0, os.SEEK_END)

    def _make_links(self) -> None:
        """Turn placeholders into links, then check where each resolves; on any escape,
        remove them all."""
        try:
            for rel in self._records(_LINK):
                path = self._path(os.fsdecode(rel))
                st = os.lstat(path)
                if _is_placeholder(st):  # not replaced by a later member, nor made already
                    target = _read_placeholder(path)
                    os.unlink(path)
                    os.symlink(target, path)
            prefix = self.root.rstrip("/") + "/"
            for rel in self._records(_LINK):
                path = self._path(os.fsdecode(rel))
                if not os.path.islink(path):
                    continue
                real = os.path.realpath(path)
                if real != self.root and not real.startswith(prefix):
                    raise UnsafeArchiveError(
                        f"symbolic link {_shown(os.fsdecode(rel))} -> {_shown(os.readlink(path))} resolves"
                        " outside the checkpoint; refusing"
                    )
        except BaseException:
            for rel in self._records(_LINK):
                path = self._path(os.fsdecode(rel))
                if os.path.islink(path):
                    os.unlink(path)
            raise

    def _set_folders(self) -> None:
        """Give folders their archived modes (owner rwx kept, to manage the tree) and times."""
        for payload in self._records(_DIR):
            mode, mtime = _DIR_META.unpack_from(payload)
            path = self._path(os.fsdecode(payload[_DIR_META.size :]))
            os.chmod(path, (mode & 0o777) | 0o700)
            os.utime(path, (mtime, mtime))


def _is_placeholder(st: os.stat_result) -> bool:
    return stat.S_ISREG(st.st_mode) and not st.st_mode & 0o200


def _read_placeholder(path: str) -> bytes:
    """The link target a placeholder holds.

    Raises:
        StoreError: the file is not a placeholder of ours (its file system does not keep modes).
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        parts = []
        while chunk := os.read(fd, 1 << 20):
            parts.append(chunk)
    finally:
        os.close(fd)
    body = b"".join(parts)
    if not body.startswith(_LINK_MAGIC):
        raise StoreError(
            f"{path} lost its mode while restoring: its file system does not keep file modes, which"
            " restoring links needs; restore onto another disk (load() restores under TMPDIR)"
        )
    return body[len(_LINK_MAGIC) :]


def file_system_error(exc: OSError, source: str, where: str, what: str) -> StoreError:
    """The project's error for the file system refusing to restore ``what`` into ``where``."""
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return WorkspaceError(
            f"no space left to restore {source} into {where} ({what}: {reason}): free space on that"
            " disk, restore on a larger one (load() restores under TMPDIR), or save a smaller checkpoint"
        )
    if exc.errno == errno.EFBIG:
        return WorkspaceError(
            f"cannot restore {source} into {where}: {what} is larger than this process or file system"
            f" may write ({reason}); raise the file size limit (ulimit -f) or restore on another disk"
        )
    if exc.errno == errno.ENAMETOOLONG:
        failed = exc.filename if isinstance(exc.filename, str) else where
        return PathTooLongError(
            f"cannot restore {source} into {where}: {what} has a path too long for its file system"
            f" ({reason}: {PathTooLongError.why(failed)}): save it with shorter names, or restore"
            " into a shorter folder"
        )
    return StoreError(f"cannot restore {source} into {where} ({what}): {reason}")


def _pax_size(value: str) -> int:
    """A PAX ``size`` record's value: a non-negative decimal, or the archive is corrupt."""
    if not value.isascii() or not value.isdigit():
        raise CorruptCheckpointError(
            f"damaged tar metadata: PAX size {value[:40]!r} is not a byte count; the object is corrupt"
        )
    return int(value)


def tree_size(path: str | os.PathLike[str]) -> int:
    """Bytes of regular-file data under ``path``, each hard-linked file once, working files
    left out: what a save reads, but for the content of links that leave the tree (the total
    for progress reports)."""
    total = 0
    linked: set[tuple[int, int]] = set()
    for dirpath, dirs, names in os.walk(path):
        dirs[:] = [d for d in dirs if not is_working_file(d)]  # left out of saves
        for name in names:
            if is_working_file(name):
                continue
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                if st.st_nlink > 1:
                    if (st.st_dev, st.st_ino) in linked:
                        continue
                    linked.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


__all__ = ["UnpackStats", "hash_ahead", "pack_directory", "tree_size", "unpack"]
