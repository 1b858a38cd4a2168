"""The lines a child process prints, one at a time, as it prints them.

``select`` on a pipe and then ``readline`` loses lines: the buffered reader may take two
lines from the pipe at once, and ``select`` then waits for a third. A thread reads the
child's stdout into a queue instead; :meth:`Lines.next` waits for the next line (``""`` once
the child closed it), failing the test after :data:`HANG` seconds (a guard, not a timing).
"""

from __future__ import annotations

import os
import queue
import threading
from typing import BinaryIO

HANG = float(os.environ.get("FCP_HANG", "120"))


class Lines:
    """Reads ``stream`` (a child's stdout) line by line in a daemon thread."""

    def __init__(self, stream: BinaryIO) -> None:
        self._queue: queue.Queue[str | None] = queue.Queue()
        #: Set once :meth:`next` has returned the end of the output.
        self.ended = False
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: BinaryIO) -> None:
        for raw in iter(stream.readline, b""):
            self._queue.put(raw.decode(errors="replace").rstrip("\n"))
        self._queue.put(None)

    def next(self, what: str = "the child") -> str:
        """The next line, stripped (``""`` at the end of the output, and :attr:`ended` set)."""
        try:
            line = self._queue.get(timeout=HANG)
        except queue.Empty:
            raise AssertionError(f"{what} printed nothing within {HANG}s") from None
        if line is None:
            self.ended = True
            return ""
        return line.strip()

    def rest(self) -> str:
        """Every line left, once the child has ended."""
        self._thread.join(HANG)
        lines = []
        while not self._queue.empty():
            line = self._queue.get_nowait()
            if line is not None:
                lines.append(line)
        return "\n".join(lines)
