"""Snapshots for background saves: a file or folder copied aside, so its owner may change it at once.

:func:`stage` copies the data into a new staging folder (``.fcp-staging-*``) on the source's
own filesystem, so each file can be a reflink (``FICLONE``: the copy shares the source's
blocks until either is written, so it takes no time and no space), and otherwise a kernel
copy (``os.copy_file_range``, then ``shutil``'s fast copy). The folder is:

- under the checkpoint's local root (beside its workspace) when that root is on the same
  filesystem as the source;
- else beside the source, in the folder that holds it (for a link, the folder that holds
  what it leads to);
- else (that folder cannot be written) under the local root all the same, by plain copy.

A staging folder (``.fcp-staging-HOST-PID-*``) is held by its process while it lives
(:mod:`flyte_checkpoint.util.heldfolders`: a lock the kernel releases when the process ends).
Making one removes those beside it whose process is gone (:func:`sweep`), and the local
roots in the temp folder whose process is gone (with the staging copies and workspaces they
hold), so uploads cut by a kill leave nothing behind for long.

Each file is copied through one descriptor whose size and times are compared before and after
(as a save does, :mod:`flyte_checkpoint.util.sources`), so a file rewritten while it is copied fails
the snapshot instead of being staged torn. The data given may be a link (to a file or a
folder): what it leads to is copied, as a synchronous save reads it. Links inside a folder
that stay inside it are copied as links; a link that leaves it becomes a link to the same
absolute place (what it leads to is read when the upload runs, not snapshotted). Hard links
stay hard links. Entries a save leaves out (its own destination inside the folder, and this
library's working files: :mod:`flyte_checkpoint.util.workfiles`) are left out of the copy too.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

from ..errors import CheckpointError, UnsupportedDataError, WorkspaceError
from ..util import heldfolders
from ..util.paths import LeaveOut
from ..util.sources import check_unchanged
from ..util.workfiles import LOCK, STAGING, is_staging, is_working_file

#: Prefix of staging folders (in the local root, or beside the source).
PREFIX = STAGING
#: ``ioctl(dest_fd, FICLONE, src_fd)``: Linux's whole-file reflink (btrfs, XFS, bcachefs, ...).
FICLONE = 0x40049409
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
#: The data given to a save: a link to a file is followed, as a synchronous save follows it.
_FOLLOW_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)


class Staged:
    """A staged copy: :attr:`path` is what to upload; :meth:`remove` deletes the staging folder."""

    def __init__(self, held: heldfolders.HeldFolder, path: str, reflinked: int, copied: int) -> None:
        assert held.path is not None
        self._held = held
        self.folder = held.path
        self.path = Path(path)
        #: Files cloned by reflink, and copied byte by byte.
        self.reflinked = reflinked
        self.copied = copied

    def remove(self) -> None:
        """Delete the staging folder and give up its hold (idempotent)."""
        self._held.release()


def stage(
    src: Path,
    is_dir: bool,
    local_root: Callable[[], str],
    leave_out: LeaveOut | None = None,
    what: str = "background save",
) -> Staged:
    """Copy ``src`` into a new staging folder and return it.

    ``local_root()`` makes (if needed) and returns the checkpoint's local root. ``leave_out``
    (a local save's :class:`~flyte_checkpoint.util.paths.LeaveOut`) names entries of
    one folder to skip. ``what`` names the save in messages (``save to URI``, redacted).

    Raises:
        SourceChangedError: a file changed while it was copied.
        UnsupportedDataError: the folder holds something other than files, folders and links.
        WorkspaceError: the disk (or the quota) of the staging folder is full; it names
            ``what``, ``src`` and the folder, and says what to do.
        OSError: the copy failed otherwise (no permission...).
    """
    held = _make_folder(src, local_root)
    try:
        assert held.path is not None
        name = src.name if src.name not in ("", LOCK) else "data"
        copier = _Copier(leave_out)
        target = os.path.join(held.path, name)
        if is_dir:
            copier.root_real, copier.dest_root = os.path.realpath(src), target
            copier.tree(str(src), target)
        else:
            copier.file(str(src), target, follow=True)
        return Staged(held, target, copier.reflinked, copier.copied)
    except OSError as exc:
        where = os.path.dirname(held.path or "")
        held.release()
        if exc.errno in (errno.ENOSPC, errno.EDQUOT) and not isinstance(exc, CheckpointError):
            raise WorkspaceError(
                exc.errno,
                f"no space left in {where} to stage a copy of {src} for the {what}: nothing was"
                " saved and the previous checkpoint is unchanged. Free space there (the copy goes"
                " beside the data, or under the temp folder when that is on the same file system),"
                " or save it with save_sync(), which reads the data in place",
            ) from exc
        raise
    except BaseException:
        held.release()
        raise


def _make_folder(src: Path, local_root: Callable[[], str]) -> heldfolders.HeldFolder:
    source_dev = os.stat(src).st_dev
    root = local_root()
    held = heldfolders.HeldFolder()
    if os.stat(root).st_dev != source_dev:
        parent = os.path.dirname(os.path.realpath(src))
        try:
            held.make(parent, _name)
        except OSError:
            pass  # a folder we may not write: a plain copy under the root
        else:
            sweep(parent)
            heldfolders.sweep_roots(os.path.dirname(root))
            return held
    held.make(root, _name)
    sweep(root)
    heldfolders.sweep_roots(os.path.dirname(root))
    return held


def _name() -> str:
    return f"{PREFIX}{heldfolders.host()}-{os.getpid()}-{secrets.token_hex(6)}"


def sweep(parent: str) -> int:
    """Remove the staging folders in ``parent`` whose process is gone (killed mid-upload:
    SIGKILL, out of memory), told by their lock (:mod:`flyte_checkpoint.util.heldfolders`); the
    number removed. A folder of a live process (in any PID namespace), of another machine (a
    shared volume) or of unknown shape is kept. Best effort: never raises."""
    return heldfolders.sweep(parent, _of_this_host)


def _of_this_host(name: str) -> bool:
    if not is_staging(name):
        return False
    machine, _, rest = name[len(PREFIX) :].partition("-")
    return machine == heldfolders.host() and bool(rest)


class _Copier:
    def __init__(self, leave_out: LeaveOut | None) -> None:
        self.leave_out = leave_out
        self.reflinked = 0
        self.copied = 0
        self.links: dict[tuple[int, int], str] = {}  # hard links: (dev, ino) -> first copy
        self.root_real = self.dest_root = ""

    def tree(self, src: str, dest: str) -> None:
        st = os.stat(src)
        os.mkdir(dest, 0o700)
        skip = (
            self.leave_out
            if self.leave_out is not None and self.leave_out.folder == (st.st_dev, st.st_ino)
            else None
        )
        with os.scandir(src) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            if (skip is not None and skip(entry.name)) or is_working_file(entry.name):
                continue
            s, d = entry.path, os.path.join(dest, entry.name)
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISLNK(mode):
                self.link(s, d)
            elif stat.S_ISDIR(mode):
                self.tree(s, d)
            elif stat.S_ISREG(mode):
                self.file(s, d)
            else:
                raise UnsupportedDataError(
                    f"{s} is not a file, folder or link: a checkpoint holds only those. Move it out"
                    " of the folder or save another folder; nothing was saved"
                )
        shutil.copystat(src, dest, follow_symlinks=False)

    def link(self, src: str, dest: str) -> None:
        target = os.readlink(src)
        real = os.path.realpath(src)
        root = self.root_real
        if real == root or real.startswith(root.rstrip("/") + "/"):
            # Inside the folder: the same place in the copy, by a relative link.
            there = os.path.join(self.dest_root, os.path.relpath(real, root))
            os.symlink(
                target if not target.startswith("/") else os.path.relpath(there, os.path.dirname(dest)), dest
            )
        elif os.path.lexists(real):
            os.symlink(real, dest)  # leaves the folder: the same place, from anywhere
        else:
            os.symlink(target, dest)  # leads nowhere: as it is (the save says so)

    def file(self, src: str, dest: str, *, follow: bool = False) -> None:
        fd = os.open(src, _FOLLOW_FLAGS if follow else _READ_FLAGS)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise UnsupportedDataError(f"{src} is not a regular file: nothing was saved")
            key = (st.st_dev, st.st_ino)
            if st.st_nlink > 1 and key in self.links:
                os.link(self.links[key], dest)
                return
            out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
            try:
                if _reflink(fd, out):
                    self.reflinked += 1
                else:
                    _copy(fd, out, st.st_size)
                    self.copied += 1
                check_unchanged(fd, st, src)
            finally:
                os.close(out)
            os.chmod(dest, stat.S_IMODE(st.st_mode))
            os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))
            if st.st_nlink > 1:
                self.links[key] = dest
        finally:
            os.close(fd)


def _reflink(src_fd: int, dest_fd: int) -> bool:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return False
    try:
        fcntl.ioctl(dest_fd, FICLONE, src_fd)
        return True
    except OSError:
        return False  # not supported here (EOPNOTSUPP, EXDEV, EINVAL...): copy instead


def _copy(src_fd: int, dest_fd: int, size: int) -> None:
    done = 0
    copy_range = getattr(os, "copy_file_range", None)
    if copy_range is not None:
        with contextlib.suppress(OSError):
            while done < size:
                n = copy_range(src_fd, dest_fd, size - done, done, done)
                if n == 0:
                    break
                done += n
    if done < size:
        _copy_plain(src_fd, dest_fd, done)  # a full disk: stage() says so


def _copy_plain(src_fd: int, dest_fd: int, offset: int) -> None:
    os.lseek(src_fd, offset, os.SEEK_SET)
    os.lseek(dest_fd, offset, os.SEEK_SET)
    with open(src_fd, "rb", closefd=False) as s, open(dest_fd, "wb", closefd=False) as d:
        shutil.copyfileobj(s, d, 1 << 20)
