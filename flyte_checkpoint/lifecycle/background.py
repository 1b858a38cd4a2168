"""Background saves: one upload in flight and one waiting per ``Checkpoint``, errors never lost.

``Checkpoint.save_background(data)`` snapshots the data (:mod:`flyte_checkpoint.lifecycle.snapshot`),
takes the save's turn (:mod:`flyte_checkpoint.lifecycle.saveorder`, so saves commit in call order) and
hands a :class:`Job` to the checkpoint's :class:`Lane`. A lane runs at most one upload at a time
in its worker thread and keeps at most one job waiting: a newer job replaces the waiting one,
whose handle then reports :attr:`SaveHandle.superseded` (not an error), gives up its turn and
removes its staging copy. The worker thread exists only while there is work; it and the lane's
lock live in a :class:`~flyte_checkpoint.util.forksafe.PerProcess`, so a forked child starts with an
empty lane of its own.

A failed save raises from :meth:`SaveHandle.result`; a failure nobody collected that way is
raised once by the checkpoint's next save, ``wait()`` or ``close()``. ``close()`` and
interpreter exit wait for the saves started, for at most :data:`CLOSE_TIMEOUT_ENV` seconds
(default :data:`DEFAULT_CLOSE_TIMEOUT`), then cancel what is left: a cancelled save commits
nothing, so the previous checkpoint stays whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import SaveTimeoutError
from ..util.forksafe import generation
from ..util.logs import logger

if TYPE_CHECKING:
    from ..util.cancellation import Scope
    from .saveorder import Turn
    from .snapshot import Staged

#: The most seconds ``close()``, leaving ``with`` and interpreter exit wait for background saves.
CLOSE_TIMEOUT_ENV = "FLYTE_CHECKPOINT_CLOSE_TIMEOUT"
DEFAULT_CLOSE_TIMEOUT = 300.0
#: The worker threads' name.
THREAD_NAME = "flyte-checkpoint-background"


def close_timeout() -> float:
    """``$FLYTE_CHECKPOINT_CLOSE_TIMEOUT`` in seconds (``10``, ``10s``, ``500ms``, ``2m``).

    Raises:
        ConfigurationError: the value is not a duration (the message names the variable).
    """
    raw = os.environ.get(CLOSE_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_CLOSE_TIMEOUT
    from ..storage.kit.settings import SECONDS, parse

    return float(parse(SECONDS, raw, name="close_timeout", source=CLOSE_TIMEOUT_ENV, example="300s"))


class SaveHandle:
    """One background save: ``done()``, ``result(timeout)``, ``superseded``."""

    def __init__(self, what: str, scope: Scope) -> None:
        self.what = what
        self._scope = scope
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._superseded = False
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        #: Set once the error was raised to someone (by ``result()`` or by the lane).
        self.seen = False

    @property
    def superseded(self) -> bool:
        """Whether a newer save replaced this one before its upload began (it stored nothing)."""
        return self._superseded

    def done(self) -> bool:
        """Whether the save has ended: committed, failed, superseded or cancelled."""
        return self._done.is_set()

    def result(self, timeout: float | None = None) -> None:
        """Wait for the save to end; raise its error if it failed (``None`` if superseded).

        Raises:
            SaveTimeoutError: it has not ended within ``timeout`` seconds (it goes on).
            the save's own error.
        """
        if not self._done.wait(timeout):
            raise SaveTimeoutError(
                f"the {self.what} has not ended within {timeout:g}s; it goes on: wait again, or close()"
            )
        self._raise()

    async def result_async(self, timeout: float | None = None, *, cancel: bool = False) -> None:
        """:meth:`result` without blocking the event loop.

        Cancelling the awaiting task leaves the save running, unless ``cancel`` is true: then the
        save is cancelled too (it commits nothing unless its commit had begun).
        """
        await wait_handles([self], timeout, cancel=cancel)
        self._raise()

    def cancel(self) -> None:
        """Cancel the save: it commits nothing unless its commit had begun (its error is then
        :class:`~flyte_checkpoint.errors.OperationCancelledError`, raised by ``result()`` only)."""
        self.seen = True
        self._scope.cancel()

    def _raise(self) -> None:
        error = self._error
        if error is not None:
            self.seen = True
            raise error

    # -- the lane's side -------------------------------------------------------------

    def _end(self, error: BaseException | None = None, *, superseded: bool = False) -> None:
        with self._lock:
            self._error, self._superseded = error, superseded
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def _on_done(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def _forget(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    def __repr__(self) -> str:
        state = (
            "superseded"
            if self._superseded
            else "failed"
            if self._error
            else "done"
            if self.done()
            else "running"
        )
        return f"<SaveHandle {self.what}: {state}>"


class Job:
    """A save waiting for, or running in, a lane's worker."""

    def __init__(
        self,
        handle: SaveHandle,
        turn: Turn,
        scope: Scope,
        run: Callable[[], None],
        staged: Staged | None,
        owner: object,
    ) -> None:
        self.handle = handle
        self.turn = turn
        self.scope = scope
        self.run = run
        self.staged = staged
        self.owner = owner  # the Checkpoint: alive (its local root too) until the save ends

    def release(self) -> None:
        """Give up the turn and the staging copy (idempotent)."""
        self.turn.leave()
        if self.staged is not None:
            self.staged.remove()
        self.owner = None


class Lane:
    """A checkpoint's background saves: one running, one waiting (see the module's docstring)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._running: Job | None = None
        self._waiting: Job | None = None
        self._thread: threading.Thread | None = None
        self._ended: threading.Thread | None = None  # the last worker, ending: wait() joins it
        self._unseen: list[SaveHandle] = []
        self.generation = generation()
        _lanes.add(self)

    def submit(self, job: Job) -> None:
        """Queue ``job``; a job already waiting is superseded by it."""
        with self._cond:
            replaced, self._waiting = self._waiting, job
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=THREAD_NAME, daemon=True)
                self._thread.start()
        if replaced is not None:
            replaced.release()
            replaced.handle._end(superseded=True)

    def busy(self) -> bool:
        with self._cond:
            return self._running is not None or self._waiting is not None

    def handles(self) -> list[SaveHandle]:
        with self._cond:
            return [j.handle for j in (self._running, self._waiting) if j is not None]

    def wait(self, timeout: float | None) -> bool:
        """Wait until no save is running or waiting and the worker has ended; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if not self._cond.wait_for(lambda: self._running is None and self._waiting is None, timeout):
                return False
            thread = self._thread or self._ended
        if thread is not None and thread is not threading.current_thread():
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return True

    def cancel(self) -> None:
        """Cancel the running save and drop the waiting one (used when a wait timed out)."""
        with self._cond:
            running, waiting, self._waiting = self._running, self._waiting, None
            self._cond.notify_all()
        if waiting is not None:
            waiting.release()
            waiting.handle._end(waiting.scope.error())
            self._keep_unseen(waiting.handle)
        if running is not None:
            running.scope.cancel()

    def take_unseen(self) -> BaseException | None:
        """The first failure no one has seen (all are marked seen), or ``None``."""
        with self._cond:
            unseen, self._unseen = self._unseen, []
        errors = [h._error for h in unseen if not h.seen and h._error is not None]
        for handle in unseen:
            handle.seen = True
        if len(errors) > 1:
            logger().error("%d background saves failed; raising the first: %s", len(errors), errors[1:])
        return errors[0] if errors else None

    def _keep_unseen(self, handle: SaveHandle) -> None:
        with self._cond:
            self._unseen.append(handle)

    def _work(self) -> None:
        while True:
            with self._cond:
                job = self._waiting
                self._waiting = None
                self._running = job
                if job is None:
                    self._thread, self._ended = None, threading.current_thread()
                    self._cond.notify_all()
                    return
            error: BaseException | None = None
            try:
                job.run()
            except BaseException as exc:  # kept for the handle; the thread goes on
                error = exc
                logger().error("background %s failed: %s", job.handle.what, exc)
            finally:
                job.release()
            if error is not None:
                self._keep_unseen(job.handle)
            job.handle._end(error)
            with self._cond:
                self._running = None
                self._cond.notify_all()


async def wait_handles(handles: list[SaveHandle], timeout: float | None, *, cancel: bool = False) -> None:
    """Wait for ``handles`` in the event loop (never blocking it); see ``result_async``."""
    loop = asyncio.get_running_loop()
    pending = [h for h in handles if not h.done()]
    if not pending:
        return
    future: asyncio.Future[None] = loop.create_future()
    left = [len(pending)]
    lock = threading.Lock()

    def one_done() -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(_finish, future)

    for handle in pending:
        handle._on_done(one_done)
    try:
        await asyncio.wait_for(asyncio.shield(future), timeout)
    except asyncio.TimeoutError:
        raise SaveTimeoutError(
            f"{len(pending)} background save(s) have not ended within {timeout:g}s; they go on"
        ) from None
    except asyncio.CancelledError:
        if cancel:
            for handle in pending:
                handle.cancel()
        raise
    finally:
        for handle in pending:
            handle._forget(one_done)


def _finish(future: asyncio.Future[None]) -> None:
    if not future.done():  # not cancelled meanwhile
        future.set_result(None)


#: Every lane of this process, for the wait at interpreter exit.
_lanes: weakref.WeakSet[Lane] = weakref.WeakSet()


def _wait_at_exit() -> None:
    """At interpreter exit: wait for every lane's saves, bounded, then cancel what is left."""
    # A forked child's copy of its parent's lanes: their threads and locks are not here.
    lanes = [lane for lane in list(_lanes) if lane.generation == generation() and lane.busy()]
    if not lanes:
        return
    try:
        timeout = close_timeout()
    except Exception as exc:
        logger().error("%s; waiting %gs", exc, DEFAULT_CLOSE_TIMEOUT)
        timeout = DEFAULT_CLOSE_TIMEOUT
    deadline = time.monotonic() + timeout
    for lane in lanes:
        if not lane.wait(max(0.0, deadline - time.monotonic())):
            lane.cancel()
            logger().error(
                "a background save did not end within %gs (%s) at interpreter exit: it was cancelled,"
                " and the previous checkpoint was kept",
                timeout,
                CLOSE_TIMEOUT_ENV,
            )
        error = lane.take_unseen()
        if error is not None:
            logger().error("a background save failed and no one collected its error: %s", error)


def _register_exit() -> None:
    # Before concurrent.futures stops accepting work at shutdown (its hook is registered with
    # threading's, which run in reverse order and before atexit's), so uploads can finish.
    import concurrent.futures.thread  # noqa: F401 - registers its hook first

    register: Any = getattr(threading, "_register_atexit", None)
    if register is None:  # pragma: no cover - every supported Python has it
        import atexit

        atexit.register(_wait_at_exit)
    else:
        try:
            register(_wait_at_exit)
        except RuntimeError:  # first used while the interpreter exits: too late to wait
            logger().warning("background saves started during interpreter exit are not waited for")


_register_exit()
