"""Saves to one destination run one at a time, in the order they were called (FIFO).

Within a process, every save takes a :class:`Turn` for its (normalized) destination URI
when it is called, whatever the thread, the ``Checkpoint`` object or sync/async, and
uploads only once every earlier save to that destination has ended: committed, failed,
or cancelled. So an older save never commits after a newer one was called, and a
cancelled save that is still unwinding finishes (aborting its upload) before the next
one starts. Saves to different destinations do not wait for each other.

A turn that is lost without being left (its owner interrupted at an unlucky moment) is
left when it is garbage-collected, so it can never block later saves for good. The
lines are per process: a forked child starts with none.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque

from .cancellation import Scope
from .forksafe import PerProcess, generation


class _Lines:
    """Each destination's queue of turns (weak references; the head's owner is saving)."""

    def __init__(self) -> None:
        # Reentrant: a turn collected by the garbage collector leaves from inside any call.
        self.lock = threading.RLock()
        self.queues: dict[str, deque[weakref.ref[Turn]]] = {}
        self.generation = generation()


_lines: PerProcess[_Lines] = PerProcess(_Lines)


class Turn:
    """A place in a destination's line. Use as ``with take(dest) as turn: turn.wait(scope); ...``."""

    def __init__(self, dest: str) -> None:
        self.dest = dest
        self._ready = threading.Event()
        self._ref: weakref.ref[Turn] | None = None
        self._lines: _Lines | None = None

    def wait(self, scope: Scope | None = None) -> None:
        """Block until every earlier save to the destination has ended.

        Raises:
            OperationCancelledError: ``scope`` was cancelled first.
        """
        if scope is not None:
            scope.on_cancel(self._wake)
            try:
                self._ready.wait()
            finally:
                scope.forget(self._wake)
            scope.check()
        else:
            self._ready.wait()

    def leave(self) -> None:
        """Give the turn up (idempotent): the next save to the destination may start."""
        lines, ref = self._lines, self._ref
        if lines is not None and ref is not None:
            # Dropping the only other reference to ``ref`` with it means its callback (for a
            # turn lost without leaving) never runs for this one.
            self._lines = self._ref = None
            _leave(lines, self.dest, ref)

    def _wake(self, _: BaseException) -> None:
        self._ready.set()

    def __enter__(self) -> Turn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.leave()


def take(dest: str) -> Turn:
    """A new turn at the end of ``dest``'s line (ready at once when the line is empty)."""
    turn = Turn(dest)
    lines = _lines.get()
    with lines.lock:
        ref = weakref.ref(turn, lambda r: _leave(lines, dest, r))
        queue = lines.queues.setdefault(dest, deque())
        queue.append(ref)
        turn._ref, turn._lines = ref, lines
        if len(queue) == 1:
            turn._ready.set()
    return turn


def waiting(dest: str) -> int:
    """How many saves to ``dest`` hold or wait for a turn in this process (for tests)."""
    lines = _lines.get()
    with lines.lock:
        return len(lines.queues.get(dest, ()))


def _leave(lines: _Lines, dest: str, ref: weakref.ref[Turn]) -> None:
    if lines.generation != generation():
        return  # a turn of the parent's, in a forked child: the child's lines never held it
    with lines.lock:
        queue = lines.queues.get(dest)
        if queue is None or ref not in queue:
            return
        was_head = queue[0] is ref
        queue.remove(ref)
        if not queue:
            del lines.queues[dest]
            return
        if was_head:
            head = queue[0]()
            if head is not None:
                head._ready.set()
