"""Local files read by a save, and the proof that they did not change while they were read.

A file rewritten while a save reads it would be stored torn (the old head, the new tail) or
cut short, and would load without complaint. As GNU tar does ("file changed as we read it"),
the size, modification time and change time are taken from the open descriptor before the
first byte is read and again after the last; any difference, or a count of bytes that is not
the size, fails the save before anything is committed.

Every ``BlobStore.upload_file`` reads through :func:`open_source`: given a path it opens the
file; given the :class:`SourceFile` the core already opened, it hands that back, so the
size and times are those taken when the save started.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

from ..errors import SourceChangedError


def changed_error(path: str | os.PathLike[str], what: str) -> SourceChangedError:
    """The error for a file that changed while a save read it (``what`` says how)."""
    return SourceChangedError(
        f"{os.fspath(path)} changed while it was being saved ({what}): nothing was stored and the"
        " previous checkpoint is unchanged. Save again once the file is completely written"
    )


def check_unchanged(fd: int, before: os.stat_result, path: str | os.PathLike[str]) -> None:
    """Raise :class:`SourceChangedError` unless ``fd``'s size and times are still ``before``'s."""
    after = os.fstat(fd)  # the same descriptor: the same file, whatever was renamed meanwhile
    if (
        after.st_mtime_ns == before.st_mtime_ns
        and after.st_ctime_ns == before.st_ctime_ns
        and after.st_size == before.st_size
    ):
        return
    if after.st_size != before.st_size:
        what = f"its size went from {before.st_size} to {after.st_size} bytes"
    elif after.st_mtime_ns != before.st_mtime_ns:
        what = "it was written to"
    else:
        what = "its status changed"
    raise changed_error(path, what)


class SourceFile(os.PathLike):
    """A local file opened for one save; ``size`` and ``stat`` are as they were when opened.

    ``read``/``readinto`` read it in order and raise :class:`SourceChangedError` instead of
    returning the end of the file if it changed meanwhile (or grew past ``size``); ``pread``
    reads a range and raises if the range is no longer there. Whoever reads by ranges calls
    :meth:`verify` after the last one, before committing. It is also the path
    (``os.fspath``), so code that only wants a path still works.

    Raises (on construction): ``OSError`` from opening the file.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            self.stat = os.fstat(self.fd)
        except BaseException:
            os.close(self.fd)
            raise
        self.size = self.stat.st_size
        #: Set once :meth:`verify` has passed.
        self.verified = False
        self._pos = 0
        self._sequential = False
        self._lock = threading.Lock()

    def __fspath__(self) -> str:
        return self.path

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (all the rest when ``n < 0``); ``b""`` only at an unchanged end."""
        if n is None or n < 0:
            parts = []
            while chunk := self.read(self.size - self._pos + 1):  # one more: a short read is the end
                parts.append(chunk)
            return b"".join(parts)
        data = os.read(self.fd, n)
        self._advance(len(data), n)
        return data

    def readinto(self, buffer) -> int:
        """Read into ``buffer``; returns 0 only at an unchanged end."""
        got = os.readv(self.fd, [buffer])
        self._advance(got, len(buffer))
        return got

    def _advance(self, got: int, asked: int) -> None:
        self._sequential = True
        self._pos += got
        if self._pos > self.size:
            raise changed_error(self.path, f"it grew past the {self.size} bytes it had")
        if got == 0 and asked > 0:
            self.verify()

    def pread(self, n: int, offset: int) -> bytes:
        """Exactly ``n`` bytes from ``offset`` (within ``size``), or :class:`SourceChangedError`."""
        data = os.pread(self.fd, n, offset)
        if len(data) != n:
            raise changed_error(self.path, f"it ended at byte {offset + len(data)} of {self.size}")
        return data

    def verify(self) -> None:
        """Raise :class:`SourceChangedError` if the file changed since it was opened, or if it
        was read in order and not to exactly ``size`` bytes. Call it before committing."""
        with self._lock:
            if self._sequential and self._pos != self.size:
                raise changed_error(self.path, f"{self._pos} bytes were read of the {self.size} it had")
            check_unchanged(self.fd, self.stat, self.path)
            self.verified = True

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> SourceFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<SourceFile {self.path!r} size={self.size}>"


@contextlib.contextmanager
def open_source(path: str | os.PathLike[str]) -> Iterator[SourceFile]:
    """The :class:`SourceFile` to upload from: ``path`` itself when it is one (left open for
    its owner), else the file opened here and closed on exit."""
    if isinstance(path, SourceFile):
        yield path
        return
    with SourceFile(path) as source:
        yield source


__all__ = ["SourceFile", "changed_error", "check_unchanged", "open_source"]
