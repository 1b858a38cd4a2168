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

import _thread
import threading
import weakref
from collections import deque
from collections.abc import Callable

from ..errors import OperationCancelledError
from ..util.cancellation import Scope
from ..util.forksafe import PerProcess, generation


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
        #: The thread that will save in this turn: the one that took it, until one waits on it.
        self.thread = threading.get_ident()
        self._scope: Scope | None = None
        self._dropped = False
        self._ready = threading.Event()
        self._ref: weakref.ref[Turn] | None = None
        self._lines: _Lines | None = None

    def wait(self, scope: Scope | None = None) -> None:
        """Block until every earlier save to the destination has ended.

        Raises:
            OperationCancelledError: ``scope`` was cancelled first, or the turn was dropped
                (:func:`drop_thread`).
        """
        self.thread, self._scope = threading.get_ident(), scope
        self._check_dropped()
        if scope is not None:
            scope.on_cancel(self._wake)
            try:
                self._ready.wait()
            finally:
                scope.forget(self._wake)
            self._check_dropped()
            scope.check()
        else:
            self._ready.wait()
        self._check_dropped()

    def _check_dropped(self) -> None:
        if self._dropped:
            raise OperationCancelledError(
                f"the save to {self.dest} was stopped by SIGTERM and cancelled, so that the final"
                " save could go first: nothing was committed"
            )

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


def drop_thread(dest: str, thread: int) -> int:
    """Take every turn of ``thread`` out of ``dest``'s line, cancelling its save; how many.

    For the final save on SIGTERM, called by the signal handler in the thread it stopped:
    that thread cannot end a save while the handler runs, so its turns would block the line.
    Its save, if it ever goes on, raises :class:`~flyte_checkpoint.errors.OperationCancelledError`
    and commits nothing (unless its commit had begun).

    The stopped thread may hold any lock of its save at that moment. The line's lock is
    reentrant; the locks that cancelling and waking its save take (its scope's, its events')
    are not, so a separate thread does that, and nothing here waits for it: it finishes
    when the stopped thread goes on, if it ever does.
    """
    lines = _lines.get()
    with lines.lock:
        turns = [t for ref in lines.queues.get(dest, ()) if (t := ref()) is not None and t.thread == thread]
    for turn in turns:
        turn._dropped = True
        turn.leave()
    if turns:
        start_thread(lambda: _wake_dropped(turns))
    return len(turns)


def _wake_dropped(turns: list[Turn]) -> None:
    for turn in turns:
        if turn._scope is not None:
            turn._scope.cancel()
        turn._ready.set()


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


#: The final saves' worker threads still running (tests wait for them: see test_preemption).
workers: set[threading.Event] = set()


def start_thread(fn: Callable[[], None]) -> threading.Event:
    """Run ``fn`` in a new thread; an event set when it has returned.

    A low-level thread: ``threading.Thread.start`` takes a lock that the thread the signal
    stopped may hold (it was starting a thread of its own), and would then wait for ever.
    """
    ended = threading.Event()
    workers.add(ended)

    def run() -> None:
        try:
            fn()
        finally:
            ended.set()
            workers.discard(ended)

    _thread.start_new_thread(run, ())
    return ended
