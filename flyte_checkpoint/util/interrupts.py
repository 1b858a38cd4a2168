"""Cleanup that an interrupt cannot cut half-way.

A ``KeyboardInterrupt`` lands wherever the main thread happens to be, cleanup code
included. Stopping a pipeline is therefore done in two parts: first one atomic step that
lets its threads end by themselves (an ``Event`` they watch), then waiting for them and
releasing resources through :func:`finish`, which resumes after an interrupt and raises
it once done. Objects whose owner is interrupted before either part runs stop when they
are garbage-collected (each says how).
"""

from __future__ import annotations

from collections.abc import Callable

#: Interrupts after which cleanup gives up and lets the last one through (a user pressing
#: Ctrl-C again and again wants out); the threads still end by themselves.
MAX_INTERRUPTS = 3


def finish(cleanup: Callable[[], None]) -> None:
    """Run ``cleanup`` to its end; an interrupt landing in it runs it again, and is raised after.

    ``cleanup`` must be safe to run again from the start after being cut anywhere.
    Its own errors propagate as they are.
    """
    interrupted: list[BaseException] = []
    while True:
        try:
            cleanup()
            break
        except KeyboardInterrupt as exc:
            interrupted.append(exc)
            if len(interrupted) >= MAX_INTERRUPTS:
                raise
    if interrupted:
        first = interrupted[0]
        interrupted.clear()
        try:
            raise first
        finally:
            del first  # no cycle through this frame: what it holds is freed with the traceback
