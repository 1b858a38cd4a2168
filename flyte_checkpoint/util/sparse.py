"""Write restored file data with its runs of zeros left as holes, as the saved file had them.

A tar stream (and a payload) holds a sparse file's holes as zeros; writing them would
allocate every block, so a 2 GiB file holding a few bytes would take 2 GiB of disk.
Skipping zero runs in a new file is exact: what was never written reads as zeros.
"""

from __future__ import annotations

import os

from .limits import DiskBudget

_HOLE = 64 * 1024  # zero runs are found in pieces of this size, aligned to the file's offsets
_MIN_HOLE = 4096  # a file system block: shorter zero runs are written
_ZEROS = bytes(_HOLE)


class SparseWriter:
    """Writes data to the start of a new, empty file ``fd``, skipping zero runs.

    Each write is claimed from ``budget`` first (holes cost nothing). :meth:`finish`
    sets the file's length when it ends in a hole.
    """

    def __init__(self, fd: int, budget: DiskBudget) -> None:
        self._fd = fd
        self._budget = budget
        self.pos = 0  # bytes of data given so far
        self._end = 0  # end of what was written to the file

    def write(self, data: bytes | memoryview) -> None:
        """Append ``data`` (written, or skipped where it is zeros)."""
        view = memoryview(data)
        n = len(view)
        base = self.pos
        self.pos += n
        if n < _MIN_HOLE:
            self._put(view, base)
            return
        start = i = 0  # [start, i) is data not yet written
        while i < n:
            j = min(n, i + _HOLE - (base + i) % _HOLE)
            if j - i >= _MIN_HOLE and not view[i] and _ZEROS.startswith(view[i:j]):
                if start < i:
                    self._put(view[start:i], base + start)
                start = j
            i = j
        if start < n:
            self._put(view[start:n], base + start)

    def _put(self, view: memoryview, offset: int) -> None:
        self._budget.claim(len(view))
        while view:
            done = os.pwrite(self._fd, view, offset)
            view = view[done:]
            offset += done
        self._end = offset

    def finish(self) -> None:
        """Give the file its full length (a trailing hole is not written)."""
        if self.pos > self._end:
            os.ftruncate(self._fd, self.pos)
