"""The content hash of the files an incremental save may copy, hashed ahead on other threads.

An incremental save must hash every large file whose size the previous object's index lists
before it knows whether to copy it (size and time alone are not enough). Hashed by the
packer's thread one after the other, that pass was most of the save's time, and the copies of
the previous files waited behind it. Here the packer announces a folder's candidates
(:meth:`Lookahead.schedule`) when it lists the folder, a few threads hash them in that order,
and the packer takes each digest (:meth:`Lookahead.take`) when it reaches the file.

A digest is used only for the same unchanged file: its job records the file's identity
(device, inode, size, modification and change times, in nanoseconds) before and after it
reads it, and :meth:`Lookahead.take` returns the digest only if both equal what the packer's
own ``fstat`` of the file it opened says. Anything else (the file was replaced, written, or
the job failed) returns None, and the packer hashes the file itself as before.

An incremental save to a store over a network starts hashing before it knows which files may
be copied (:func:`~.archive.hash_ahead`: every large file of the tree, in the order the
packer takes them) while it reads the previous object's index; once the index is read, the
jobs not started of files whose size it does not hold are dropped (:meth:`Lookahead.retain`).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from . import digests

Identity = tuple[int, int, int, int, int]


def identity(st: os.stat_result) -> Identity:
    """What must be equal for two looks at a file to have seen the same content."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _hash(path: str, stop: threading.Event) -> tuple[Identity, str] | None:
    """The file's identity and hash, or None if it changed while read or the save ended."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        before = identity(os.fstat(fd))
        digest = digests.of_file(fd, before[2], stop=stop)
        if digest is None or identity(os.fstat(fd)) != before:
            return None
        return before, digest
    except OSError:
        return None
    finally:
        os.close(fd)


def _stop(stop: threading.Event, pool: ThreadPoolExecutor) -> None:
    stop.set()
    pool.shutdown(wait=False, cancel_futures=True)


class Lookahead:
    """Hashes announced files on ``workers`` threads, in the order they were announced.

    :meth:`close` ends the threads (a job stops at its next read); a lookahead dropped without
    it, its save interrupted, ends them when collected."""

    def __init__(self, workers: int | None = None) -> None:
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(
            workers or min(4, os.cpu_count() or 1), thread_name_prefix="fcp-lookahead"
        )
        self._jobs: dict[str, Future[tuple[Identity, str] | None]] = {}
        #: The size each file had when it was announced, where the announcer gave it
        #: (:func:`~.archive.hash_ahead`): :meth:`retain` drops the jobs of sizes not wanted.
        self.sizes: dict[str, int] = {}
        self._finalizer = weakref.finalize(self, _stop, self._stop, self._pool)
        #: Digests taken from a job, and files hashed again by the packer (for tests and logs).
        self.used = 0
        self.missed = 0

    def schedule(self, path: str) -> None:
        """Start hashing ``path`` (a regular file, not followed if a link) after those before it."""
        if path not in self._jobs and not self._stop.is_set():
            self._jobs[path] = self._pool.submit(_hash, path, self._stop)

    def retain(self, wanted: Callable[[int], bool]) -> int:
        """Drop the jobs not yet started of the files announced with a size that ``wanted``
        refuses (hashed before the previous object's index said which sizes it holds); returns
        how many were dropped."""
        dropped = 0
        for path, size in list(self.sizes.items()):
            job = self._jobs.get(path)
            if job is not None and not wanted(size) and job.cancel():
                del self._jobs[path]
                dropped += 1
        self.sizes.clear()
        return dropped

    def take(self, path: str, st: os.stat_result) -> str | None:
        """The hash of ``path`` if its job saw exactly the file ``st`` describes; else None
        (also when ``path`` was never announced). Waits for the job if it is still running."""
        job = self._jobs.pop(path, None)
        found = job.result() if job is not None else None
        if found is not None and found[0] == identity(st):
            self.used += 1
            return found[1]
        self.missed += 1
        return None

    def peek(self, path: str) -> str | None:
        """The hash ``path``'s job found (waiting for it), without taking it; None if it was
        never announced, changed while hashed, or the job failed. Not checked against the
        packer's look at the file (:meth:`take` is): for planning only."""
        job = self._jobs.get(path)
        found = job.result() if job is not None else None
        return None if found is None else found[1]

    def close(self) -> None:
        """Stop the jobs still queued or running, and wait for the threads to end."""
        self._stop.set()
        self._jobs.clear()
        try:
            self._pool.shutdown(wait=True, cancel_futures=True)
        finally:
            self._finalizer.detach()


__all__ = ["Lookahead", "identity"]
