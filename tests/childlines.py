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


class Child:
    """A child process the test talks to: lines in on stdin, lines out on stdout.

    ``stderr`` is a file the child's stderr goes to (kept for messages), or ``None`` for a
    pipe read at the end by :meth:`end`.
    """

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str | os.PathLike, stderr=None) -> None:
        import subprocess

        self.stderr_file = stderr
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr if stderr is not None else subprocess.PIPE,
            env={**env, "PYTHONFAULTHANDLER": "1"},
            cwd=cwd,
        )
        assert self.proc.stdout is not None
        self.lines = Lines(self.proc.stdout)

    def next(self) -> str:
        """The child's next line (``""`` at the end of its output)."""
        return self.lines.next(f"the child ({self.proc.args[:3]})")

    def say(self, line: str = "") -> None:
        """Write ``line`` to the child's stdin."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def end(self, sig: int | None = None) -> tuple[int, str]:
        """Send ``sig`` (if given) and wait for the child to end, its stdin left open until
        then; its exit status and the rest of its output (stdout, then a piped stderr).

        A child that does not end within :data:`HANG` seconds gets SIGABRT, which makes
        ``faulthandler`` print every thread's stack to its stderr, and fails the test.
        """
        import signal
        import subprocess

        if sig is not None:
            self.proc.send_signal(sig)
        try:
            try:
                code = self.proc.wait(HANG)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGABRT)
                self.proc.wait(HANG)
                raise AssertionError(f"the child did not end within {HANG}s; its stacks are in its stderr")
            out = self.lines.rest()
            assert self.proc.stdout is not None
            self.proc.stdout.close()
            err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr is not None else ""
            return code, out + "\n" + err
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stderr):
                if stream is not None:
                    stream.close()
