"""The ``file`` store: local paths, written beside the target, fsynced and renamed."""

from __future__ import annotations

import errno
import io
import os
import secrets
import shutil
import stat
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

from ...errors import CheckpointPermissionError, NotFoundError, PathTooLongError, StoreError
from ...uri import is_local, local_path
from ...util.paths import LeaveOut, current_umask
from ...util.workfiles import TMP, is_working_file, shard_folder, temp_prefix
from ..blobstore import (
    BlobStore,
    BlobWriter,
    CopyCheck,
    CopyLimits,
    CopySource,
    ObjectInfo,
    copy_source_changed,
    details_from_listing,
)
from ..pinned import PinnedObject

_TMP_MARK = TMP
#: Start an early write-back after this many bytes (see ``_LocalWriter._write``).
_FLUSH_EVERY = 32 * 1024 * 1024
#: Bytes per read and write where the kernel cannot copy between the files itself.
_COPY_CHUNK = 8 * 1024 * 1024
#: A temporary file untouched for this long belongs to a writer that died (SIGKILL, power
#: loss) without removing it; the next commit in its folder deletes it.
STALE_TMP_SECONDS = 3600.0
#: A replaced object at least this large is freed on a thread of its own (see ``replace_object``).
_FREE_BEHIND = 64 * 1024 * 1024
#: Only where a file may be renamed over while it is open: on Windows an open file cannot be.
_CAN_HOLD = os.name == "posix"
#: Descriptors of replaced objects not yet closed, and the lock a fork waits for (see _forked).
_held: set[int] = set()
_held_lock = threading.Lock()


def _forked() -> None:
    """In a child made by ``fork``: close the replaced objects the parent still held. The
    parent's threads close theirs; the child's copies (a data-loader worker forked just after
    a save) would otherwise keep each object's disk space for the child's whole life."""
    global _held_lock
    _held_lock = threading.Lock()  # the parent's, taken before the fork, stays with the parent
    for fd in _held:
        try:
            os.close(fd)
        except OSError:  # pragma: no cover - nothing else closes these
            pass
    _held.clear()


if hasattr(os, "register_at_fork"):  # pragma: no branch - POSIX
    os.register_at_fork(
        before=lambda: _held_lock.acquire(),
        after_in_parent=lambda: _held_lock.release(),
        after_in_child=_forked,
    )


def _file_info(path: str) -> ObjectInfo | None:
    """The size and modification time of the file at ``path``; ``None`` if it is gone (or not a file)."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise _map_os_error(exc, Path(path), "read") from exc
    if not stat.S_ISREG(st.st_mode):
        return None
    version = _listed_version(st)
    return ObjectInfo(path, st.st_size, datetime.fromtimestamp(st.st_mtime, timezone.utc), version=version)


def _listed_version(st: os.stat_result) -> str:
    """The version a listing gives and a manifest compares: a replacement renamed into place
    is another inode (a writer's commit gives the same of the file it renames)."""
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def _nothing_there(exc: OSError) -> bool:
    """Whether a folder a listing would read cannot hold anything: it does not exist, is a
    file, or has a name longer than the file system takes (a sidecar ``X.fcp-history/`` of a
    243-byte ``X``: nothing was ever written there)."""
    return isinstance(exc, (FileNotFoundError, NotADirectoryError)) or exc.errno == errno.ENAMETOOLONG


def _map_os_error(exc: OSError, path: Path, action: str) -> Exception:
    if exc.errno == errno.ENAMETOOLONG:
        failed = exc.filename if isinstance(exc.filename, str) else None  # a temporary file's?
        return PathTooLongError.for_path(
            str(path), f"choose a shorter path to {action} the checkpoint", failed=failed
        )
    if isinstance(exc, FileNotFoundError):
        return NotFoundError(f"no checkpoint object at {path}")
    if isinstance(exc, PermissionError):
        return CheckpointPermissionError(
            f"permission denied to {action} {path}: check the file's and its folder's permissions"
        )
    if isinstance(exc, IsADirectoryError):
        return StoreError(f"{path} is a directory, not a checkpoint object: point the URI at a file")
    if exc.errno in (errno.EEXIST, errno.ENOTDIR):  # a folder of the path is a file
        blocker = _file_in_the_way(path)
        if blocker is not None:
            return StoreError(
                f"cannot {action} {path}: {blocker} is a file (an object), not a folder: choose"
                f" another URI, or remove {blocker}"
            )
    return StoreError(f"cannot {action} {path}: {exc.strerror or exc}")


def _file_in_the_way(path: Path) -> Path | None:
    """The first of ``path``'s folders that is something other than a folder, if one is."""
    for folder in reversed(path.parents):
        if os.path.lexists(folder) and not os.path.isdir(folder):
            return folder
    return None


def _temp_prefix(target: Path) -> str:
    """How the temporary files of writers of ``target`` begin (a token follows): short enough
    that they fit wherever ``target`` does."""
    return temp_prefix(target.name)


def leave_out_for(uri: str) -> LeaveOut | None:
    """What a save of a folder to the local ``uri`` leaves out, should the folder hold it: the
    object and its writers' temporary files (else each save would hold the one before it).
    None while the object's folder does not exist."""
    target = local_path(uri)
    try:
        st = os.stat(target.parent)
    except OSError:
        return None
    return LeaveOut((st.st_dev, st.st_ino), target.name, _temp_prefix(target))


def fsync_dir(path: str | Path) -> None:
    """fsync the folder ``path`` (a rename into it lasts a crash); errors are ignored: some file
    systems cannot fsync a folder."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def replace_object(new: str | Path, target: str | Path) -> None:
    """Rename ``new`` over ``target``, and free the file it replaces after returning.

    A rename over a file frees the file's blocks and cached pages before it returns: for
    1 GiB on ext4, 0.16-0.43 s, a quarter to a half of an incremental save that copied all but
    16 MiB of it. A descriptor held across the rename keeps the replaced file alive, and its
    close, on a thread of its own, does that work while the caller goes on (where no thread
    can start, at interpreter exit, the close is here). Nothing is left in the folder
    meanwhile; a process that ends first has the kernel free the file as it exits, and a child
    forked meanwhile closes its copy (:func:`_forked`). Only the disk space comes back a
    moment later (:func:`wait_for_freeing` waits for it).
    """
    held = _hold(target)
    try:
        os.replace(new, target)
    finally:
        if held is not None:
            _release_behind(held)


#: The name of the threads that free replaced objects.
FREEING_THREAD = "fcp-free-replaced"


def _release_behind(fd: int) -> None:
    try:
        threading.Thread(target=_release, args=(fd,), name=FREEING_THREAD).start()
    except RuntimeError:  # no new thread (the interpreter is exiting, or at a limit): here, then
        _release(fd)


def wait_for_freeing() -> None:
    """Wait until the replaced objects this process let go of are freed (for measurements
    that must not overlap that work, and for tests)."""
    for thread in threading.enumerate():
        if thread.name == FREEING_THREAD:
            thread.join()


def _hold(target: str | Path) -> int | None:
    """A descriptor of ``target`` if it is a file of at least ``_FREE_BEHIND`` bytes, else None."""
    # O_PATH needs no read permission and keeps the file all the same; O_NONBLOCK (where there
    # is no O_PATH) does not wait for a writer of a FIFO; a symbolic link is what the rename
    # replaces, not what it points to
    if not _CAN_HOLD:
        return None
    flags = getattr(os, "O_PATH", os.O_RDONLY | os.O_NONBLOCK) | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(target, flags)
    except OSError:
        return None  # nothing there, or not ours to open: the rename decides
    try:
        st = os.fstat(fd)
    except OSError:
        st = None
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_size < _FREE_BEHIND:
        os.close(fd)
        return None
    with _held_lock:
        _held.add(fd)
    return fd


def _release(fd: int) -> None:
    with _held_lock:  # so that a fork finds the descriptor either held or closed
        _held.discard(fd)
        os.close(fd)


class _NoLinks(Exception):
    """The file system makes no hard links (an exclusive create falls back to a check)."""


class _LocalWriter(BlobWriter):
    def __init__(self, uri: str, target: Path, *, exclusive: bool = False) -> None:
        super().__init__(uri)
        self._target = target
        #: Commit only if no file is at the target (``created`` says whether it did).
        self._exclusive = exclusive
        self.created = False
        self._unsynced = 0
        self._flusher: threading.Thread | None = None
        self._file: BinaryIO | None = None
        self._sources: dict[str, int] = {}  # copy sources: uri -> descriptor, checked when opened
        self._checker: ThreadPoolExecutor | None = None  # reads copied ranges back (see _check)
        self._checks: list[Future[None]] = []
        # The name is kept before the file exists, and the file object is made with the file,
        # so an abort (even of a writer whose constructor was interrupted) removes it.
        self._tmp = target.parent / f"{_temp_prefix(target)}{secrets.token_hex(6)}"
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self._tmp, "xb", buffering=0)  # noqa: SIM115 - closed by commit/abort
        except OSError as exc:
            raise _map_os_error(exc, target, "write") from exc

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        try:
            view = memoryview(data)
            while view:
                n = self._file.write(view)
                view = view[n:]
        except OSError as exc:
            raise _map_os_error(exc, self._target, "write") from exc
        self._unsynced += len(data)
        self._flush_behind()

    def _flush_behind(self) -> None:
        """Every 32 MiB written or copied, start writing back what is there while more
        arrives, so the fsync of the commit has only the tail left to wait for (durability
        costs overlap, not add up; on a file system without shared extents a copy is as many
        dirty pages as a write)."""
        if self._unsynced >= _FLUSH_EVERY and (self._flusher is None or not self._flusher.is_alive()):
            self._unsynced = 0
            self._flusher = threading.Thread(
                target=_quiet_datasync, args=(self._file.fileno(),), name="fcp-datasync", daemon=True
            )
            self._flusher.start()

    def _copy(self, source: CopySource, start: int, length: int, expect: CopyCheck | None) -> None:
        fd = self._source_fd(source)
        out = self._file.fileno()
        first = start
        try:
            while length:
                try:  # in the kernel: a reflink where the file system shares extents, else a copy
                    n = os.copy_file_range(fd, out, length, start)
                except OSError as exc:
                    if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                        raise
                    n = self._file.write(os.pread(fd, min(length, _COPY_CHUNK), start))
                if n == 0:  # the source is shorter than it was described
                    raise copy_source_changed(source, "it ended early")
                start, length = start + n, length - n
                self._unsynced += n
                self._flush_behind()
            if expect is not None:
                self._check(source, fd, first, expect)
        except OSError as exc:
            raise _map_os_error(exc, self._target, "write") from exc

    def _check(self, source: CopySource, fd: int, start: int, expect: CopyCheck) -> None:
        """Read the copied range back from the descriptor the copy read (the pages it shared or
        copied: a damaged byte of the source was copied as it is) and compare it with
        ``expect``, on a thread of its own: the packer and the next copies go on, and the
        commit's fsync waits for the disk meanwhile; the commit waits for it before the rename."""
        read = partial(_read_at, fd)
        damage = self.copy_damage  # not self: the check never holds the writer (see _end_checks)

        def check() -> None:
            damage.add(source, expect.damaged(start, read, _READ_BACK))

        try:
            if self._checker is None:
                self._checker = ThreadPoolExecutor(1, thread_name_prefix="fcp-copy-check")
            self._checks.append(self._checker.submit(check))
        except RuntimeError:  # no new thread (the interpreter is exiting): here, then
            check()

    def _end_checks(self, cancel: bool) -> None:
        """Wait for the copies' checks (dropping those not begun, with ``cancel``); raise the
        first one's error (a read that failed) unless cancelling. The sources stay open until
        no check reads them."""
        checks, self._checks = self._checks, []
        if cancel:
            for check in checks:
                check.cancel()
        if self._checker is not None:
            # A writer dropped by an interrupted save may be collected on its check thread (a
            # collection runs in any thread): that thread cannot join itself, and the abort
            # would stop there, leaving the temporary file behind.
            here = threading.current_thread() in getattr(self._checker, "_threads", ())
            self._checker.shutdown(wait=not here)
            self._checker = None
        if not cancel:
            for check in checks:
                check.result()

    def _source_fd(self, source: CopySource) -> int:
        """A descriptor of ``source``, opened once and checked against its version: every later
        copy reads that same file, whatever is renamed over its path meanwhile."""
        fd = self._sources.get(source.uri)
        if fd is None:
            try:
                fd = os.open(local_path(source.uri), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                raise copy_source_changed(source) from None
            except OSError as exc:
                raise _map_os_error(exc, local_path(source.uri), "read") from exc
            self._sources[source.uri] = fd
            if _version(os.fstat(fd)) != source.version:
                raise copy_source_changed(source)
        return fd

    def _close_sources(self) -> None:
        while self._sources:
            _, fd = self._sources.popitem()
            os.close(fd)

    def _join_flusher(self) -> None:
        if self._flusher is not None:
            self._flusher.join()
            self._flusher = None

    def _commit(self) -> None:
        self._join_flusher()
        try:
            os.fsync(self._file.fileno())  # while the last copies' checks run
            # Raising (a read failed, an interrupt), the abort ends the checks, then closes the
            # sources: a descriptor is never closed under a check still reading it.
            self._end_checks(cancel=False)
            self._close_sources()
            self.copy_damage.raise_found(self.uri)
            self._file.close()
            os.chmod(self._tmp, 0o666 & ~umask())
            self.committed_version = _listed_version(os.stat(self._tmp))  # a rename keeps them
            if self._exclusive:
                self.created = _link_new(self._tmp, self._target)
            else:
                replace_object(self._tmp, self._target)
        except OSError as exc:
            raise _map_os_error(exc, self._target, "write") from exc
        fsync_dir(self._target.parent)
        _sweep_stale_tmp(self._target.parent)

    def _abort(self) -> None:
        self._join_flusher()
        self._end_checks(cancel=True)
        self._close_sources()
        if self._file is not None:
            self._file.close()
        self._tmp.unlink(missing_ok=True)


def _link_new(tmp: Path, target: Path) -> bool:
    """Give ``tmp`` the name ``target`` if no file has it (a hard link, then ``tmp`` removed):
    whether it did.

    Raises:
        _NoLinks: the file system makes no hard links.
    """
    try:
        os.link(tmp, target)
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK):
            raise _NoLinks(str(exc)) from exc
        raise
    finally:
        tmp.unlink(missing_ok=True)
    return True


def _sweep_stale_tmp(folder: Path) -> None:
    """Remove temporary files of writers that died long ago (best effort, never raises)."""
    cutoff = time.time() - STALE_TMP_SECONDS
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith(_TMP_MARK) and entry.is_file(follow_symlinks=False):
                    try:
                        if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                            os.unlink(entry.path)
                    except OSError:
                        pass
    except OSError:
        pass


_read_buffers = threading.local()
#: Bytes a copy's check reads back at a time: a buffer that stays in the CPU's cache for the
#: CRC that follows (8 MiB reads took 17-20% longer than 256 KiB to 1 MiB ones here).
_READ_BACK = 1024 * 1024


def _read_at(fd: int, at: int, n: int) -> memoryview:
    """``n`` bytes of ``fd`` from ``at`` (fewer at its end), in a buffer of the calling thread
    reused from one read to the next (valid until its next call)."""
    buf = getattr(_read_buffers, "buf", None)
    if buf is None or len(buf) < n:
        buf = _read_buffers.buf = memoryview(bytearray(max(n, _READ_BACK)))
    if hasattr(os, "preadv"):
        got = os.preadv(fd, [buf[:n]], at)
    else:  # pragma: no cover - Windows has no preadv
        data = os.pread(fd, n, at)
        got = len(data)
        buf[:got] = data
    return buf[:got]


def _quiet_datasync(fd: int) -> None:
    try:
        os.fdatasync(fd)
    except OSError:
        pass  # the fsync of the commit reports any error that matters


def _version(st: os.stat_result) -> str:
    """A local file's version for copies: a commit renames a new file (a new inode) into place,
    and writing in place changes the times."""
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def umask() -> int:
    """The process's umask, for the mode of a file renamed into place (0o022 when unknown)."""
    mask = current_umask()
    return 0o022 if mask < 0 else mask


class _LocalPinned(PinnedObject):
    """A version of a local object: the file opened at the pin, read by ``pread``. A commit
    renames another file over the path; this one stays whole, and is what is read."""

    def __init__(self, uri: str, path: Path, fd: int, st: os.stat_result) -> None:
        self.uri, self.size, self.version = uri, st.st_size, _version(st)
        self._path = path
        self._lock = threading.Lock()
        self._fd: int | None = fd  # last: until it is set, pin() closes fd if this raises

    def _held(self) -> int:
        fd = self._fd
        if fd is None:
            raise ValueError(f"a read of {self._path} after its pin was closed")
        return fd

    def read_range(self, start: int, length: int) -> bytes:
        try:
            return _pread_all(self._held(), start, length)
        except OSError as exc:
            raise _map_os_error(exc, self._path, "read") from exc

    def open_read(self) -> BinaryIO:
        # a descriptor of its own, so the stream may outlive the pin (pread shares no offset)
        return io.BufferedReader(_PreadStream(os.dup(self._held()), self._path))

    def changed(self) -> bool:
        try:
            now = os.stat(self._path)
        except (FileNotFoundError, NotADirectoryError):
            return True
        return _version(now) != self.version or _version(os.fstat(self._held())) != self.version

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        # no lock and no call of ours: a finalizer runs at any moment, in any thread
        fd = getattr(self, "_fd", None)
        if fd is not None:
            self._fd = None
            os.close(fd)


_PREADV = hasattr(os, "preadv")


class _PreadStream(io.RawIOBase):
    """A forward stream of an open file by ``pread`` from its own position; owns ``fd``."""

    def __init__(self, fd: int, path: Path) -> None:
        super().__init__()
        self._fd, self._path, self._pos = fd, path, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            if _PREADV:
                n = os.preadv(self._fd, [buffer], self._pos)
            else:  # pragma: no cover - systems without preadv
                data = os.pread(self._fd, len(buffer), self._pos)
                n = len(data)
                buffer[:n] = data
        except OSError as exc:
            raise _map_os_error(exc, self._path, "read") from exc
        self._pos += n
        return n

    def close(self) -> None:
        if not self.closed:
            try:
                os.close(self._fd)
            finally:
                super().close()


def _pread_all(fd: int, start: int, length: int) -> bytes:
    """``length`` bytes from ``start`` (fewer only at the end of the file)."""
    data = os.pread(fd, length, start)
    if len(data) == length or not data:
        return data
    parts, got = [data], len(data)  # one pread returns at most about 2 GiB on Linux
    while got < length:
        more = os.pread(fd, length - got, start + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class LocalStore(BlobStore):
    """Objects are files; URIs are bare paths or ``file:`` URIs."""

    supports_ranges = True
    supports_list_details = True  # sizes and times from os.scandir
    supports_pinned_reads = True  # the file opened at the pin is read, whatever is renamed over it
    creates_atomically = True  # a hard link to a new name fails if the name exists
    # copy_file_range: any length, in the kernel; on XFS and btrfs whole blocks between offsets
    # that are multiples of the block size (4096 by default) are shared, not copied
    copy_limits = CopyLimits(align=4096)
    # part_size stays None: a writer fills a temporary file and renames it whole at the commit.

    def open_read(self, uri: str) -> BinaryIO:
        path = local_path(uri)
        try:
            return open(path, "rb")
        except OSError as exc:
            raise _map_os_error(exc, path, "read") from exc

    def open_write(self, uri: str) -> BlobWriter:
        return _LocalWriter(uri, local_path(uri))

    def write_bytes_if_absent(self, uri: str, data: bytes) -> bool:
        """Write a temporary file beside the object as a commit does, then hard-link it to the
        object's name, which fails if a file is there: the object appears whole, or not at all.
        A file system without hard links falls back to the default (a check, then a write)."""
        writer = _LocalWriter(uri, local_path(uri), exclusive=True)
        try:
            with writer:
                writer.write(data)
        except _NoLinks:
            return super().write_bytes_if_absent(uri, data)
        return writer.created

    def stat(self, uri: str) -> int | None:
        path = local_path(uri)
        try:
            st = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise _map_os_error(exc, path, "read") from exc
        if path.is_dir():
            raise _map_os_error(IsADirectoryError(errno.EISDIR, "is a directory"), path, "read")
        return st.st_size

    def copy_source(self, uri: str) -> CopySource | None:
        path = local_path(uri)
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise _map_os_error(exc, path, "read") from exc
        if stat.S_ISDIR(st.st_mode):
            raise _map_os_error(IsADirectoryError(errno.EISDIR, "is a directory"), path, "read")
        return CopySource(uri, st.st_size, _version(st))

    def pin(self, uri: str) -> PinnedObject | None:
        path = local_path(uri)
        try:  # O_NONBLOCK: a FIFO at the path is refused below, not waited on
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise _map_os_error(exc, path, "read") from exc
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise _map_os_error(IsADirectoryError(errno.EISDIR, "is a directory"), path, "read")
            if not stat.S_ISREG(st.st_mode):
                raise StoreError(f"{path} is not a regular file (not a checkpoint): point the URI at a file")
            return _LocalPinned(uri, path, fd, st)
        except BaseException:
            os.close(fd)
            raise

    def delete(self, uri: str) -> None:
        path = local_path(uri)
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise _map_os_error(exc, path, "delete") from exc

    def list(self, prefix: str) -> Iterator[str]:
        """The files whose path starts with ``prefix`` as text, as a cloud store's listing:
        ``/d/ck`` lists ``/d/ck/a``, ``/d/ck2/b`` and ``/d/ckpt``.

        Raises:
            CheckpointPermissionError: a folder that may hold some of them cannot be read (an
                empty listing would say there is nothing, a named run's attempts included).
        """
        base = local_path(prefix)
        text = str(base) + ("/" if prefix.endswith("/") else "")
        root = base if prefix.endswith("/") else base.parent

        def may_hold(folder: str) -> bool:  # inside the prefix, or on the way to it
            folder += "/"
            return folder.startswith(text) or text.startswith(folder)

        def refuse(exc: OSError) -> None:
            if not _nothing_there(exc):
                raise _map_os_error(exc, Path(exc.filename or root), "list") from exc

        found: list[str] = []
        for dirpath, dirs, files in os.walk(root, onerror=refuse):
            # not into another save's staging copy, a sharded save's pieces...
            dirs[:] = [d for d in dirs if not is_working_file(d) and may_hold(os.path.join(dirpath, d))]
            for name in files:
                full = os.path.join(dirpath, name)
                if full.startswith(text) and _TMP_MARK not in name and not is_working_file(name):
                    found.append(full)
        yield from sorted(found)

    def list_details(self, prefix: str, *, recursive: bool = True) -> Iterator[ObjectInfo]:
        if recursive:
            return details_from_listing(prefix, self.list(prefix), _file_info)
        return self._one_level(prefix)

    def _one_level(self, prefix: str) -> Iterator[ObjectInfo]:
        """The files and folders in one folder whose path starts with ``prefix``: the folder
        itself when ``prefix`` ends with ``/`` (or is one), else the folder holding it."""
        base = local_path(prefix)
        if prefix.endswith("/"):
            folder, start = base, ""
        else:
            folder, start = base.parent, base.name
        head = str(folder).rstrip("/") + "/"
        found: list[ObjectInfo] = []
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            if _nothing_there(exc):
                return
            raise _map_os_error(exc, folder, "list") from exc
        for entry in entries:
            if not entry.name.startswith(start) or _TMP_MARK in entry.name or is_working_file(entry.name):
                continue
            if entry.is_dir():
                found.append(ObjectInfo(head + entry.name + "/", None, None, is_folder=True))
            elif (info := _file_info(head + entry.name)) is not None:
                found.append(info)
        yield from sorted(found, key=lambda i: i.uri)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        path = local_path(uri)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise _map_os_error(exc, path, "read") from exc
        try:
            return os.pread(fd, length, start)
        finally:
            os.close(fd)

    def sharded_writes(self, uri: str):
        """One object from many ranks: per-rank files joined and renamed (:mod:`flyte_checkpoint.sharded`)."""
        return LocalShardedWrites(uri)

    def download_file(self, uri: str, path: str | os.PathLike[str]) -> None:
        src = local_path(uri)
        try:
            shutil.copyfile(src, path)
        except OSError as exc:
            raise _map_os_error(exc, src, "read") from exc


# --------------------------------------------------------------------------- sharded writes

Session = dict[str, Any]


def coordination_prefix(uri: str) -> str:
    """Where a sharded save to ``uri`` keeps its markers and temporary pieces: a folder beside
    the object (locally one that folder saves leave out, as they do writers' temporary files)."""
    if is_local(uri):
        target = local_path(uri)
        return f"{target.parent}/{shard_folder(target.name)}/"
    return uri + ".fcp-shard/"


class _FileSegment:
    def __init__(self, path: str) -> None:
        self.path = path
        self.name = os.path.basename(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._file: BinaryIO = open(path, "xb", buffering=0)  # noqa: SIM115 - closed by finish/abort

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data)
        while view:
            view = view[self._file.write(view) :]
        return len(data)

    def padding_needed(self) -> int:
        return 0

    def finish(self) -> dict[str, Any]:
        # No fsync: the piece is temporary; the commit fsyncs the joined object once.
        size = os.fstat(self._file.fileno()).st_size
        self._file.close()
        return {"size": size, "name": self.name}

    def abort(self) -> None:
        self._file.close()
        _unlink(self.path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class LocalShardedWrites:
    """Per-rank files beside the target; the others' are appended to rank 0's
    (``copy_file_range``: the kernel copies, or shares blocks where the file system can), which
    is fsynced and renamed over the target."""

    def __init__(self, uri: str) -> None:
        self.target = local_path(uri)
        self.folder = coordination_prefix(uri)

    def begin(self, token: str) -> Session:
        os.makedirs(self.folder, exist_ok=True)
        return {}

    def _piece(self, token: str, rank: int, joiner: str) -> str:
        return f"{self.folder}{token}.piece-{rank:05d}.{joiner}"

    def segment(self, session: Session, rank: int, world: int, joiner: str) -> _FileSegment:
        return _FileSegment(self._piece(session["token"], rank, joiner))

    def _path(self, token: str, rank: int, piece: dict[str, Any]) -> str:
        """The file of rank ``rank``'s ``piece`` (as its report names it, checked: a report is
        read from the store, and must not name a file elsewhere)."""
        name = str(piece.get("name", ""))
        if not name.startswith(f"{token}.piece-{rank:05d}.") or "/" in name or "\\" in name:
            raise ValueError(f"rank {rank}'s report names a piece {name!r} of another save")
        return self.folder + name

    def commit(self, session: Session, pieces: list[dict[str, Any]], tail: bytes) -> None:
        token = session["token"]
        joined = self._path(token, 0, pieces[0])  # rank 0's piece grows into the object: one copy less
        with open(joined, "r+b") as out:
            out.truncate(pieces[0]["size"])
            out.seek(0, os.SEEK_END)
            for rank, piece in enumerate(pieces[1:], start=1):
                with open(self._path(token, rank, piece), "rb") as src:
                    _copy_range(src.fileno(), out.fileno(), piece["size"])
            out.write(tail)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(joined, 0o666 & ~umask())
        replace_object(joined, self.target)
        fsync_dir(self.target.parent)
        self.abort(session)

    def abort(self, session: Session) -> None:
        token = session["token"]
        for name in _listdir(self.folder):
            if name.startswith(f"{token}.piece-"):
                _unlink(self.folder + name)

    def sweep(self, session: Session) -> None:
        # Everything but this save's files and the session marker: pieces and joins of saves
        # whose ranks were killed, and temporary files of marker writes they left (not those
        # being written now: this save's, and the session's renewal).
        token = session["token"]
        keep = (f"{token}.", "open", f"{TMP}{token}.", f"{TMP}open.")
        for name in _listdir(self.folder):
            if not name.startswith(keep):
                _unlink(self.folder + name)


def _listdir(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except FileNotFoundError:
        return []


def _copy_range(src: int, dst: int, size: int) -> None:
    """Append ``size`` bytes of ``src`` (from its start) to ``dst``, in the kernel."""
    left = size
    while left:
        try:
            n = os.copy_file_range(src, dst, left)
        except OSError:  # file systems that refuse it (across devices, old kernels)
            n = os.sendfile(dst, src, None, left)
        if n == 0:
            raise OSError(f"a segment ended {left} bytes early")
        left -= n
