"""A terminal progress bar for saves and loads: bytes, rate and time left.

A :class:`ProgressBar` is a ``progress(done, total)`` callback, the form
:class:`flyte_checkpoint.Checkpoint` takes, so task code can opt in::

    from flyte_checkpoint.progress import progress_bar

    with progress_bar("save") as bar:          # None when stderr is not a terminal
        Checkpoint(dest, progress=bar).save_sync(model_dir)

The library never shows progress on its own: ``Checkpoint`` reports none unless given a
callback. :func:`progress_bar` gives a bar only when its stream is a terminal (and
``TERM`` is not ``dumb``), so output that is piped or logged stays clean. Standard library
only; drawing is throttled, and safe from several threads.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TextIO

__all__ = [
    "ProgressBar",
    "estimate_is_meaningful",
    "format_bytes",
    "format_duration",
    "format_line",
    "is_terminal",
    "progress_bar",
]

#: No time left is shown before this much time has passed: the first samples of a transfer
#: (threads starting, a connection opening) say nothing about its rate.
ESTIMATE_AFTER_SECONDS = 1.0
#: ... nor before this fraction of the bytes is done, unless the transfer has run this long.
ESTIMATE_AFTER_FRACTION = 0.01
ESTIMATE_ANYWAY_AFTER_SECONDS = 5.0

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(n: float) -> str:
    """``n`` bytes in binary units with three significant digits: ``"512 B"``, ``"1.50 MiB"``."""
    value = float(n)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            if unit == "B":
                return f"{int(value)} B"
            return f"{value:.3g} {unit}" if value < 1000 else f"{value:.0f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def format_duration(seconds: float) -> str:
    """``"0:07"``, ``"12:34"`` or ``"1:02:03"`` (whole seconds, rounded up)."""
    total = max(0, int(-(-seconds // 1)))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def estimate_is_meaningful(done: int, total: int | None, seconds: float) -> bool:
    """Whether ``done`` of ``total`` bytes in ``seconds`` is enough to estimate the time left:
    at least :data:`ESTIMATE_AFTER_SECONDS` have passed, some bytes are done, and either 1% of
    the total is or :data:`ESTIMATE_ANYWAY_AFTER_SECONDS` have passed."""
    if total is None or total <= 0 or done <= 0 or seconds < ESTIMATE_AFTER_SECONDS:
        return False
    return done >= total * ESTIMATE_AFTER_FRACTION or seconds >= ESTIMATE_ANYWAY_AFTER_SECONDS


def format_line(
    label: str, done: int, total: int | None, seconds: float, width: int = 80, *, final: bool = False
) -> str:
    """One line of progress, at most ``width`` characters.

    With a known ``total``: ``label [####----]  42% 1.20 MiB / 2.86 MiB  3.10 MiB/s  0:01 left``
    (``in 0:02`` instead of the time left when ``final``; no time left until
    :func:`estimate_is_meaningful`); without a total, the bytes done, the rate and the time
    spent. The rate is the average since the start.
    """
    rate = done / seconds if seconds > 0 else 0.0
    rate_text = f"{format_bytes(rate)}/s" if seconds > 0 else "-/s"
    head = f"{label} " if label else ""
    if total is None or total <= 0:
        tail = f"{format_bytes(done)}  {rate_text}  {'in' if final else 'for'} {format_duration(seconds)}"
        return (head + tail)[:width]
    fraction = min(1.0, done / total)
    if final:
        when = f"in {format_duration(seconds)}"
    elif estimate_is_meaningful(done, total, seconds):
        when = f"{format_duration((total - done) / rate)} left"
    else:
        when = ""
    amounts = f"{format_bytes(done):>9} / {format_bytes(total)}"
    tail = f" {fraction * 100:3.0f}% {amounts}  {rate_text:>11}  {when:<10}"  # fixed widths: a steady bar
    room = width - len(head) - len(tail) - 2
    if room >= 10:
        cells = min(room, 30)
        filled = int(cells * fraction)
        bar = "[" + "#" * filled + "-" * (cells - filled) + "]"
        return (head + bar + tail).rstrip()
    return (head + tail.lstrip())[:width].rstrip()


def is_terminal(stream: TextIO) -> bool:
    """True when ``stream`` is an interactive terminal that can redraw a line."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
    return bool(tty) and os.environ.get("TERM", "") != "dumb"


class ProgressBar:
    """A ``progress(done, total)`` callback that redraws one line of ``stream`` (stderr).

    It draws on the first call, then at most every ``interval`` seconds, and
    :meth:`close` draws the final line and ends it with a newline. It draws whether or
    not ``stream`` is a terminal: use :func:`progress_bar` to get one only on a terminal.
    Calls may come from any thread.
    """

    def __init__(
        self,
        label: str = "",
        *,
        stream: TextIO | None = None,
        interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self._stream = stream if stream is not None else sys.stderr
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._started: float | None = None
        self._last_draw = float("-inf")
        self._last_len = 0
        self._done = 0
        self._total: int | None = None
        self._closed = False

    @property
    def done(self) -> int:
        """Bytes reported so far."""
        return self._done

    def __call__(self, done: int, total: int | None) -> None:
        with self._lock:
            if self._closed:
                return
            now = self._clock()
            if self._started is None or done < self._done:  # first call, or a retry starting over
                self._started = now
                self._last_draw = float("-inf")
            self._done, self._total = done, total
            if now - self._last_draw >= self._interval:
                self._draw(now, final=False)

    def clear(self) -> None:
        """Blank the bar's line (before other output on the same stream); the next update redraws it."""
        with self._lock:
            self._blank()

    @contextlib.contextmanager
    def hidden(self) -> Iterator[None]:
        """Blank the bar's line, let the caller write whole lines to the stream, then redraw the
        bar below them. No update draws in between (updates from other threads wait)."""
        with self._lock:
            self._blank()
            try:
                yield
            finally:
                if self._started is not None and not self._closed:
                    self._draw(self._clock(), final=False)

    def _blank(self) -> None:
        if self._last_len and not self._closed:
            self._write("\r" + " " * self._last_len + "\r")
        self._last_len = 0
        self._last_draw = float("-inf")

    def close(self) -> None:
        """Draw the final state and end the line (nothing if nothing was reported). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._started is None:
                return
            self._draw(self._clock(), final=True)
            self._write("\n")

    def _draw(self, now: float, *, final: bool) -> None:
        assert self._started is not None
        width = max(20, shutil.get_terminal_size((80, 24)).columns - 1)
        line = format_line(self.label, self._done, self._total, now - self._started, width, final=final)
        pad = " " * max(0, self._last_len - len(line))
        self._write("\r" + line + pad)
        self._last_len = len(line)
        self._last_draw = now

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):  # a closed or broken terminal must not fail the transfer
            self._closed = True

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _NoBar:
    """What :func:`progress_bar` yields off a terminal: ``None``, closed on exit."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def progress_bar(label: str = "", *, stream: TextIO | None = None, enabled: bool | None = None):
    """A context manager giving a :class:`ProgressBar` on ``stream`` (stderr), or ``None``.

    ``enabled=None`` (the default) shows the bar only when ``stream`` is a terminal;
    ``True`` always shows it, ``False`` never. The bar's line is ended on exit.
    """
    out = stream if stream is not None else sys.stderr
    show = is_terminal(out) if enabled is None else enabled
    return ProgressBar(label, stream=out) if show else _NoBar()
