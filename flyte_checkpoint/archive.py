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
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from . import tarstream as ts
from .compression import GZIP_ERRORS
from .errors import (
    CheckpointError,
    CorruptCheckpointError,
    PathTooLongError,
    StoreError,
    UnsafeArchiveError,
    UnsupportedDataError,
)
from .sources import changed_error, check_unchanged

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


@dataclass(frozen=True)
class LeaveOut:
    """Entries of one folder that a pack leaves out: the one named ``name`` and those whose
    names start with ``prefix``. ``folder`` is the folder's ``(st_dev, st_ino)``, so it is
    recognised however the walk reaches it."""

    folder: tuple[int, int]
    name: str
    prefix: str

    def __call__(self, name: str) -> bool:
        return name == self.name or name.startswith(self.prefix)


def pack_directory(src: str | os.PathLike[str], out: BinaryIO, *, leave_out: LeaveOut | None = None) -> int:
    """Write an uncompressed tar of ``src``'s entries to ``out``; returns the bytes of file data.

    Every member is one that :func:`unpack` restores: a symbolic link that resolves inside
    the tree is stored as a relative link (as written when that already resolves through
    the tree's own folders); one that leaves the tree is stored as what it points at, a
    file's or a folder's content (as ``tar -h`` does).

    Raises:
        UnsupportedDataError: the tree holds a FIFO, device or socket, a link to nothing
            outside the tree, or a loop of links.
        SourceChangedError: a file changed while it was read, or was removed before.
        PathTooLongError: a path in the tree is longer than the system allows.
    """
    root = os.fspath(src)
    try:
        return _Packer(root, out, leave_out).run()
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


class _Packer:
    """One walk of a tree, writing its members. ``via`` (the link that led there) marks a
    walk through a folder outside the tree, where every link is stored as its content."""

    def __init__(self, root: str, out: BinaryIO, leave_out: LeaveOut | None) -> None:
        self.root = root
        self.root_real = os.path.realpath(root)
        self._inside_prefix = self.root_real.rstrip("/") + "/"
        self.write = out.write
        self.owners = _Owners()
        self.leave_out = leave_out
        self.hard_links: dict[tuple[int, int], str] = {}
        self.open_dirs: set[tuple[int, int]] = set()  # folders being walked: meeting one again is a loop
        self.total = 0

    def run(self) -> int:
        self.add_entries(self.root, "", os.stat(self.root), None)
        self.write(ts.end_of_archive())
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
            for entry in _sorted_entries(path):
                if skip is None or not skip(entry.name):
                    self.add(entry.path, f"{arcname}/{entry.name}" if arcname else entry.name, entry, via)
        finally:
            self.open_dirs.discard(key)

    def add(self, path: str, arcname: str, entry: os.DirEntry[str], via: str | None) -> None:
        if entry.is_file(follow_symlinks=via is not None) and self.add_file(path, arcname, via):
            return
        st = self.stat(path, via)
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            self.write(ts.header(arcname + "/", size=0, typeflag=ts.DIRTYPE, **self.meta(st)))
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
                self.write(
                    ts.header(
                        arcname, size=0, typeflag=ts.LNKTYPE, linkname=self.hard_links[key], **self.meta(st)
                    )
                )
                return True
            if st.st_nlink > 1:
                self.hard_links[key] = arcname
            self.write(ts.header(arcname, size=st.st_size, typeflag=ts.REGTYPE, **self.meta(st)))
            _copy_fd(fd, path, st.st_size, self.write)
            check_unchanged(fd, st, path)
            self.total += st.st_size
            return True
        finally:
            os.close(fd)

    def add_link(self, path: str, arcname: str, st: os.stat_result) -> None:
        target = os.readlink(path)
        linkname = target if self.follows_tree(arcname, target) else self.resolve(path, arcname, target)
        if linkname is not None:
            self.write(ts.header(arcname, size=0, typeflag=ts.SYMTYPE, linkname=linkname, **self.meta(st)))

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
            self.write(ts.header(arcname + "/", size=0, typeflag=ts.DIRTYPE, **self.meta(st)))
            self.add_entries(path, arcname, st, path)
        elif not (stat.S_ISREG(st.st_mode) and self.add_file(path, arcname, path)):
            raise UnsupportedDataError(
                f"the symbolic link {path} leads to {real}, which is {_kind(st.st_mode)}: a checkpoint"
                " holds only files, folders and links. Remove the link; the previous checkpoint is unchanged"
            )
        return None

    def inside(self, real: str) -> bool:
        return real == self.root_real or real.startswith(self._inside_prefix)


def _sorted_entries(path: str) -> list[os.DirEntry[str]]:
    with os.scandir(path) as it:
        return sorted(it, key=lambda e: e.name)


def _copy_fd(fd: int, path: str, size: int, write) -> None:
    """Write exactly ``size`` bytes of the open file, then its padding; a file that is
    shorter or longer than ``size`` by now is an error (it changed while being saved)."""
    left = size
    while True:
        want = min(left + 1, _CHUNK)  # one byte more than expected: a short read proves the end
        chunk = os.read(fd, want)
        if len(chunk) > left:
            left = -1
            break
        if chunk:
            write(chunk)
            left -= len(chunk)
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
    """What ``unpack`` restored."""

    members: int = 0
    bytes: int = 0
    symlinks: list[tuple[str, str]] = field(default_factory=list)


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
            n = min(left, _CHUNK)
            self.read(n)
            left -= n

    def drain(self) -> None:
        while self._read(_CHUNK):
            pass


@dataclass
class TarMember:
    """One member as its headers describe it (PAX and GNU long names and sizes applied)."""

    name: str
    linkname: str
    size: int
    header: ts.Header


def read_members(reader: ExactReader) -> Iterator[TarMember]:
    r"""Yield the members of an uncompressed tar stream, up to its end-of-archive block.

    PAX and GNU metadata members are applied to the member they describe, not yielded.
    The caller reads (or :meth:`ExactReader.skip`\ s) each member's data before asking
    for the next one.

    Raises:
        CorruptCheckpointError: a damaged header or metadata, or a stream that ends early.
        UnsafeArchiveError: a metadata member too large to be names.
    """
    pax: dict[str, str] = {}
    long_name: str | None = None
    long_link: str | None = None
    while True:
        block = reader.read(ts.BLOCK)
        if block == ts.ZERO_BLOCK:
            return
        try:
            h = ts.parse(block)
        except ts.HeaderError as exc:
            raise CorruptCheckpointError(
                f"damaged tar header at byte {reader.offset - ts.BLOCK} ({exc}): the object is"
                " corrupt; save the checkpoint again"
            ) from None
        if h.typeflag in (ts.PAX_HEADER, ts.PAX_GLOBAL, ts.GNU_LONGNAME, ts.GNU_LONGLINK):
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
        pax, long_name, long_link = {}, None, None


def _safe_name(name: str, what: str = "member") -> str:
    """The member's path relative to the destination, or UnsafeArchiveError."""
    if "\0" in name:
        raise UnsafeArchiveError(f"{what} {name!r} has a NUL in its name; refusing to extract")
    if name.startswith("/"):
        raise UnsafeArchiveError(f"{what} {name!r} has an absolute name; refusing to extract")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchiveError(f"{what} {name!r} climbs out with '..'; refusing to extract")
    return "/".join(parts)


def unpack(stream: BinaryIO, dest: str | os.PathLike[str], *, max_bytes: int | None = None) -> UnpackStats:
    """Extract a tar stream under ``dest`` (an existing, empty directory of ours).

    Reads ``stream`` to its end, so a compressed stream's checksums are verified.
    On an error, ``dest`` may hold part of the tree (never a link that leaves it):
    the caller discards it.

    Raises:
        UnsafeArchiveError: a member would land outside ``dest``, is a device or FIFO,
            or the tree would exceed ``max_bytes``.
        CorruptCheckpointError: the stream is truncated or a header is damaged.
        StoreError: the file system refused a member (a name too long, no space left...).
    """
    try:
        return _unpack(stream, dest, max_bytes)
    except CheckpointError:
        raise
    except OSError as exc:
        if isinstance(exc, GZIP_ERRORS):
            raise
        raise StoreError(
            f"cannot restore the checkpoint into {dest}: {exc.strerror or exc}"
            + (f" ({exc.filename})" if exc.filename else "")
        ) from exc


def _unpack(stream: BinaryIO, dest: str | os.PathLike[str], max_bytes: int | None) -> UnpackStats:
    root = os.path.realpath(dest)
    umask = current_umask()
    reader = ExactReader(stream)
    stats = UnpackStats()
    made_dirs: set[str] = {""}
    files: set[str] = set()
    symlinks: dict[str, str] = {}
    dir_meta: list[tuple[str, int, int]] = []

    def ensure_parent(rel: str) -> str:
        parent = rel.rpartition("/")[0]
        if parent not in made_dirs:
            for anc in _ancestors(parent):
                if anc in symlinks:
                    raise UnsafeArchiveError(
                        f"member {rel!r} lies under the symbolic link {anc!r}; refusing to extract"
                    )
                if anc in files:
                    raise UnsafeArchiveError(f"member {rel!r} lies under the file {anc!r}; refusing")
            os.makedirs(os.path.join(root, parent), exist_ok=True)
            made_dirs.update(_ancestors(parent))
        return os.path.join(root, rel)

    def clear(rel: str, target: str) -> None:
        if rel in made_dirs:
            raise UnsafeArchiveError(f"member {rel!r} would replace a folder of the same name")
        symlinks.pop(rel, None)
        if rel in files:
            os.unlink(target)
            files.discard(rel)

    for member in read_members(reader):
        h, name, linkname, size = member.header, member.name, member.linkname, member.size
        rel = _safe_name(name)
        stats.members += 1
        t = h.typeflag
        if t in (ts.REGTYPE, ts.AREGTYPE, ts.CONTTYPE) and not (t == ts.AREGTYPE and name.endswith("/")):
            if not rel:
                raise UnsafeArchiveError(f"file member {name!r} names the destination itself")
            stats.bytes += size
            if max_bytes is not None and stats.bytes > max_bytes:
                raise UnsafeArchiveError(
                    f"the tarball expands beyond the limit of {max_bytes} bytes (at member {name!r});"
                    " refusing to extract. Raise FLYTE_CHECKPOINT_MAX_UNPACKED_BYTES if it is genuine"
                )
            target = ensure_parent(rel)
            clear(rel, target)
            _write_member(reader, target, size, h, umask)
            files.add(rel)
        elif t == ts.DIRTYPE or (t == ts.AREGTYPE and name.endswith("/")):
            reader.skip(size)
            if not rel:
                continue
            if rel in files or rel in symlinks:
                raise UnsafeArchiveError(f"folder member {name!r} would replace a file or link")
            ensure_parent(rel)
            path = os.path.join(root, rel)
            os.makedirs(path, exist_ok=True)
            made_dirs.update(_ancestors(rel))
            dir_meta.append((path, h.mode, h.mtime))
        elif t == ts.SYMTYPE:
            reader.skip(size)
            if not rel:
                raise UnsafeArchiveError(f"link member {name!r} names the destination itself")
            if linkname.startswith("/") or "\0" in linkname:
                raise UnsafeArchiveError(
                    f"symbolic link {name!r} points to the absolute path {linkname!r}; refusing"
                )
            target = ensure_parent(rel)
            clear(rel, target)
            symlinks[rel] = linkname
        elif t == ts.LNKTYPE:
            reader.skip(size)
            src_rel = _safe_name(linkname, what=f"hard link {name!r} to")
            if not rel or (src_rel not in files and src_rel not in symlinks):
                raise UnsafeArchiveError(
                    f"hard link {name!r} points to {linkname!r}, which is not an earlier file of the"
                    " archive; refusing to extract"
                )
            if src_rel == rel:  # a link to itself: the member is already there
                continue
            target = ensure_parent(rel)
            if src_rel in symlinks:
                link_to = symlinks[src_rel]
                clear(rel, target)
                symlinks[rel] = link_to
            else:
                clear(rel, target)
                os.link(os.path.join(root, src_rel), target)
                files.add(rel)
        elif t in (ts.CHRTYPE, ts.BLKTYPE, ts.FIFOTYPE):
            kind = "a FIFO" if t == ts.FIFOTYPE else "a device file"
            raise UnsafeArchiveError(f"member {name!r} is {kind}; a checkpoint cannot hold one")
        else:
            raise UnsafeArchiveError(
                f"member {name!r} has tar type {t!r}, which a checkpoint cannot hold; refusing"
            )
    reader.drain()
    _make_links(root, symlinks)
    for path, mode, mtime in reversed(dir_meta):
        os.chmod(path, (mode & 0o777) | 0o700)
        os.utime(path, (mtime, mtime))
    stats.symlinks = sorted(symlinks.items())
    return stats


def _pax_size(value: str) -> int:
    """A PAX ``size`` record's value: a non-negative decimal, or the archive is corrupt."""
    if not value.isascii() or not value.isdigit():
        raise CorruptCheckpointError(
            f"damaged tar metadata: PAX size {value[:40]!r} is not a byte count; the object is corrupt"
        )
    return int(value)


def _ancestors(rel: str) -> list[str]:
    if not rel:
        return [""]
    parts = rel.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def current_umask() -> int:
    """The process umask, read without changing it (``os.umask`` would, for every thread)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return -1  # unknown: callers set modes explicitly


def _write_member(reader: ExactReader, target: str, size: int, h: ts.Header, umask: int) -> None:
    mode = (h.mode & 0o777) | 0o600
    fd = os.open(target, _OPEN_FLAGS, mode)
    try:
        left = size
        while left:
            chunk = reader.read_some(min(left, _CHUNK))
            _write_all(fd, chunk)
            left -= len(chunk)
        if umask < 0 or mode & umask:  # the umask took bits away: put them back
            os.fchmod(fd, mode)
        os.utime(fd, (h.mtime, h.mtime))
    finally:
        os.close(fd)
    pad = ts.padding(size)
    if pad:
        reader.read(pad)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _make_links(root: str, symlinks: dict[str, str]) -> None:
    """Create the links, then check where each resolves; on any escape, remove them all."""
    made = []
    try:
        for rel, linkname in symlinks.items():
            os.symlink(linkname, os.path.join(root, rel))
            made.append(rel)
        prefix = root.rstrip("/") + "/"
        for rel, linkname in symlinks.items():
            real = os.path.realpath(os.path.join(root, rel))
            if real != root and not real.startswith(prefix):
                raise UnsafeArchiveError(
                    f"symbolic link {rel!r} -> {linkname!r} resolves outside the checkpoint; refusing"
                )
    except BaseException:
        for rel in made:
            os.unlink(os.path.join(root, rel))
        raise


def tree_size(path: str | os.PathLike[str]) -> int:
    """Bytes of regular-file data under ``path`` (the total for progress reports)."""
    total = 0
    for dirpath, _dirs, names in os.walk(path):
        for name in names:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


__all__ = ["LeaveOut", "UnpackStats", "pack_directory", "tree_size", "unpack"]
