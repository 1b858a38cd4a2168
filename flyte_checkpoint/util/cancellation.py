"""Cancelling a save or a load that runs in another thread.

``await save()`` and ``await load()`` run in a worker thread; cancelling the awaiting task
cannot stop that thread, so it cancels the operation's :class:`Scope` instead. The worker
runs the operation inside the scope (:func:`using`); what it opens there notices:

- a store writer (:class:`~flyte_checkpoint.storage.blobstore.BlobWriter`) captures the scope
  when it is opened, refuses further writes once it is cancelled and never commits
  (:meth:`Scope.check` runs right before the commit), so the upload is aborted;
- the pipeline's threads stop, and a reader waiting for data is woken with the error;
- a store's fast path that commits without a ``BlobWriter`` calls :func:`check` before
  its commit (and may between parts).

A cancel is honoured up to the start of the commit: a save whose commit has begun
completes. The error raised in the worker is
:class:`~flyte_checkpoint.errors.OperationCancelledError`.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator

from ..errors import OperationCancelledError

_current: contextvars.ContextVar[Scope | None] = contextvars.ContextVar(
    "flyte_checkpoint_scope", default=None
)


class Scope:
    """One operation that another thread may cancel (``what`` names it in the error)."""

    def __init__(self, what: str) -> None:
        self.what = what
        #: Set once cancelled; waits may use it to wake early.
        self.event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[BaseException], None]] = []

    @property
    def cancelled(self) -> bool:
        return self.event.is_set()

    def error(self) -> OperationCancelledError:
        """The error a cancelled operation raises."""
        return OperationCancelledError(f"the {self.what} was cancelled: nothing was committed or kept")

    def cancel(self) -> None:
        """Cancel the operation (idempotent): callbacks run now, in this thread."""
        with self._lock:
            if self.event.is_set():
                return
            self.event.set()
            callbacks, self._callbacks = self._callbacks, []
        exc = self.error()
        for callback in callbacks:
            callback(exc)

    def on_cancel(self, callback: Callable[[BaseException], None]) -> None:
        """Call ``callback(error)`` when the scope is cancelled (now, if it already is)."""
        with self._lock:
            if not self.event.is_set():
                self._callbacks.append(callback)
                return
        callback(self.error())

    def forget(self, callback: Callable[[BaseException], None]) -> None:
        """Drop a callback registered with :meth:`on_cancel` (no error if absent)."""
        with self._lock, contextlib.suppress(ValueError):
            self._callbacks.remove(callback)

    def check(self) -> None:
        """Raise :class:`OperationCancelledError` if the scope is cancelled."""
        if self.event.is_set():
            raise self.error()


def current() -> Scope | None:
    """The scope of the operation this thread runs, if any."""
    return _current.get()


def check() -> None:
    """Raise :class:`OperationCancelledError` if the current operation is cancelled."""
    scope = _current.get()
    if scope is not None:
        scope.check()


@contextlib.contextmanager
def using(scope: Scope) -> Iterator[Scope]:
    """Run the body as ``scope``'s operation (in this thread and what it opens)."""
    token = _current.set(scope)
    try:
        yield scope
    finally:
        _current.reset(token)
