"""Working folders held by a lock while their maker lives, and the sweep that removes those
whose maker is gone (killed: SIGKILL, out of memory), however and wherever it ran.

A held folder (a background save's staging folder, a ``Checkpoint``'s local root) holds the
file :data:`~flyte_checkpoint.util.workfiles.LOCK`, which its maker keeps open under an exclusive
``flock`` until it has removed the folder. The kernel releases the lock when the process
ends, however it ends, so a folder whose lock another process can take belongs to no living
process. Liveness is decided by what the living process holds, never by its PID: a PID means
nothing in another PID namespace (two containers of one pod share the host name, the kernel
and maybe a volume, but not their PIDs), and a PID is reused. The lock file also names the
maker's host: a folder of another machine, on a volume whose locks may not reach across
machines, is kept (the host's full name: ``trainer-0`` is not ``trainer0``).

- A process forked from the maker inherits its descriptor, hence its hold: a folder is kept
  while any process forked from its maker lives (such a child may use its parent's root).
- Making a folder and locking it are three steps (the folder, its lock file, the lock). A
  folder without a lock file is kept; a sweep between the last two takes the lock and removes
  the folder, and the maker, finding its lock file taken or gone, makes another: a folder is
  never removed once its maker holds its lock.
- A folder without a lock file (made by an older version of this library, or whose maker
  died between its first two steps: an empty folder) is kept.
- Where no lock can be taken (no ``fcntl``: Windows; a file system without locks, whose
  ``flock`` fails) nothing is proved abandoned: every folder is kept, and a killed process's
  copy stays until removed by hand (its name says whose it is).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import stat
import threading
from collections.abc import Callable, Iterator

from .workfiles import LOCK, is_root, named, new_name

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: nothing is ever swept
    fcntl = None  # type: ignore[assignment]

#: Names tried before :meth:`HeldFolder.make` gives up (each lost only to a sweep's race).
_ATTEMPTS = 8
_SAFE = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
#: O_NONBLOCK: a FIFO planted under the lock's name must not block a sweep.
_OPEN_LOCK = os.O_RDONLY | _SAFE | getattr(os, "O_NONBLOCK", 0)
_NEW_LOCK = os.O_RDWR | os.O_CREAT | os.O_EXCL | _SAFE
#: Folders this process holds: never judged by a lock (a file system that emulates ``flock``
#: with per-process locks would let the process take its own lock again).
_mine: set[str] = set()
_mine_lock = threading.Lock()
#: (folder, prefix) swept by :func:`holding` in this process.
_swept: set[tuple[str, str]] = set()


def host() -> str:
    """This machine's name as it goes into working files' names (letters and digits only)."""
    return "".join(c for c in socket.gethostname() if c.isalnum())[:40] or "host"


def _owner() -> bytes:
    """What a lock file says of its maker: its host's full name, then its PID (for people)."""
    return f"{socket.gethostname()}\n{os.getpid()}\n".encode(errors="replace")


class _Lost(Exception):
    """A sweep removed the folder, or holds its lock, before its maker locked it."""


class HeldFolder:
    """A folder this process made and holds; :meth:`release` removes it. ``path`` is set
    (a ``str``) once the folder exists."""

    def __init__(self) -> None:
        self.path: str | None = None
        self._fd: int | None = None
        self._guard = threading.Lock()

    def make(self, parent: str, name: Callable[[], str]) -> str:
        """Make a new folder ``parent/name()`` (mode 0700), take its lock, and return its path.

        Raises:
            OSError: the folder or its lock file could not be made (no permission, no space,
                a name too long...); nothing is left behind.
        """
        for _ in range(_ATTEMPTS):
            path = os.path.join(parent, name())
            os.mkdir(path, 0o700)
            with self._guard:
                self.path = path  # from here release() removes it, whatever interrupts
            try:
                fd = _take_new(path)
            except _Lost:
                with self._guard:
                    self.path = None  # the sweep that took it removes it
                continue
            except BaseException:
                self.release()
                raise
            with self._guard:
                self._fd = fd
            with _mine_lock:
                _mine.add(path)
            return path
        raise OSError(
            errno.EAGAIN,
            f"could not make a working folder in {parent}: {_ATTEMPTS} were removed by other processes'"
            " sweeps as they were made",
        )

    def release(self) -> None:
        """Remove the folder, then give up its lock (idempotent, never raises)."""
        with self._guard:
            path, fd = self.path, self._fd
            self.path = self._fd = None
        if path is not None:
            _remove(path)
            with _mine_lock:
                _mine.discard(path)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:  # pragma: no cover - nothing else closes it
                pass


def _take_new(path: str) -> int:
    """Create and lock ``path``'s lock file; the descriptor that holds the lock.

    Raises:
        _Lost: a sweep removed the folder or holds the lock: make another folder.
    """
    lock = os.path.join(path, LOCK)
    try:
        fd = os.open(lock, _NEW_LOCK, 0o600)
    except FileNotFoundError:
        raise _Lost from None
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise _Lost from None
            except OSError:
                pass  # no locks on this file system: every sweep keeps the folder
        with contextlib.suppress(OSError):  # a full disk: the lock holds all the same
            os.write(fd, _owner())
        mine = os.fstat(fd)
        try:
            now = os.stat(lock, follow_symlinks=False)
        except FileNotFoundError:
            raise _Lost from None
        if (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino):
            raise _Lost
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def holding(parent: str, prefix: str) -> Iterator[str]:
    """A new folder ``parent/PREFIXXXXXXXXX`` (:func:`~flyte_checkpoint.util.workfiles.new_name`)
    held while the block runs and removed after it, however it ends. The first one a process
    makes in ``parent`` sweeps the folders of the same prefix there whose makers are gone (a
    process killed while it staged a restore or a pull there leaves one: the next attempt's
    first restore there removes it).

    Once per process and place, not each time: a sweep lists ``parent``, which may be a data
    folder of 100,000 files (0.3-0.5 s on a busy machine), and restoring files one by one
    into it must not pay that for each.

    Raises:
        OSError: the folder could not be made (see :meth:`HeldFolder.make`).
    """
    folder = HeldFolder()
    path = folder.make(parent, lambda: new_name(prefix))
    place = (os.path.abspath(parent), prefix)
    try:
        with _mine_lock:
            first = place not in _swept
            _swept.add(place)
        if first:
            sweep(parent, named(prefix))
        yield path
    finally:
        folder.release()


def sweep(parent: str, match: Callable[[str], bool]) -> int:
    """Remove the folders in ``parent`` whose names ``match`` and whose makers are gone (see
    the module's docstring); the number removed. Best effort: never raises."""
    try:
        with os.scandir(parent) as it:
            paths = [e.path for e in it if match(e.name) and e.is_dir(follow_symlinks=False)]
    except OSError:
        return 0
    return sum(_reap(path) for path in paths)


def sweep_roots(temp: str) -> int:
    """Remove the ``Checkpoint`` local roots (``flyte-checkpoint-ws-*``) in the temp folder
    ``temp`` whose process is gone, with the workspaces and staging copies they hold; the
    number removed. Best effort: never raises."""
    return sweep(temp, is_root)


def _reap(path: str) -> bool:
    """Remove ``path`` if its maker is gone; whether it did."""
    with _mine_lock:
        if path in _mine:
            return False
    if fcntl is None:  # pragma: no cover - not POSIX
        return False
    try:
        fd = os.open(os.path.join(path, LOCK), _OPEN_LOCK)
    except OSError:
        # No lock: its maker has not made it yet, or is an older version of this library
        # (whose folders are empty for a moment after they are made): not proved abandoned.
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # held: its maker lives (or no lock can be taken here)
        owner = os.read(fd, 1024).split(b"\n")[0]
        if owner and owner != _owner().split(b"\n")[0]:
            return False  # another machine's: its lock may not reach this one
        _remove(path)
        return not os.path.lexists(path)
    except OSError:
        return False
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    """Remove the folder ``path``, its lock file last: a removal cut short (a kill) leaves a
    folder that a later sweep still proves abandoned, not one without a lock that it keeps."""
    try:
        with os.scandir(path) as it:
            entries = [e for e in it if e.name != LOCK]
    except OSError:
        entries = []
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(path, LOCK))
    shutil.rmtree(path, ignore_errors=True)  # and whatever came meanwhile


__all__ = ["HeldFolder", "holding", "host", "sweep", "sweep_roots"]
