"""An asyncio loop in a daemon thread: what the kit's proxies serve their connections on.

:class:`~flyte_checkpoint.testing.FaultProxy` and the benchmarks' ``LinkProxy`` each listen on
a free port of 127.0.0.1 from a loop of their own, so that the test (or the save measured) runs
in the calling thread meanwhile::

    self._loop = LoopThread("fault-proxy", "the fault proxy")
    self._loop.start(self._open)      # opens the listeners on the loop; their error raised here
    self._loop.call(lambda: ...)      # run on the loop's thread, its result returned
    self._loop.stop(self._shutdown)   # closes what is open, stops the loop, joins the thread

:meth:`LoopThread.start` returns once the loop runs (not merely once the listeners are open),
so a :meth:`LoopThread.stop` right after it always reaches the loop. Every wait is bounded by
:data:`HANG_GUARD`, a hang guard rather than a timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

#: Deadline of every internal wait (start, stop, a call on the loop): a hang guard, not a timing.
HANG_GUARD = 120.0

T = TypeVar("T")


class LoopThread:
    """An event loop run by a daemon thread named ``name``; ``what`` names it in errors."""

    def __init__(self, name: str, what: str) -> None:
        self.name, self.what = name, what
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self, opening: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Start the thread, run ``opening()`` on its loop (it opens the listeners), and return
        once the loop is running; an exception of ``opening`` is raised here (the loop closed)."""
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            try:
                loop.run_until_complete(opening())
            except BaseException as exc:
                errors.append(exc)
                ready.set()
                loop.close()
                return
            loop.call_soon(ready.set)  # set once run_forever runs: stop() then finds it running
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self.loop = loop
        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        if not ready.wait(HANG_GUARD):
            raise RuntimeError(f"{self.what} did not start within {HANG_GUARD:.0f} s (hang guard)")
        if errors:
            self._thread.join(HANG_GUARD)
            self.loop = self._thread = None
            raise errors[0]

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` run on the loop's thread (where the proxy's state lives), and its result."""
        loop = self.loop
        assert loop is not None, f"{self.what} is not running"

        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), loop).result(HANG_GUARD)

    def stop(self, closing: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``closing()`` on the loop (bounded; an error of it is ignored: the loop stops
        anyway), stop the loop and join the thread (bounded). Nothing when it is not running."""
        loop, thread = self.loop, self._thread
        if loop is None or thread is None:
            return
        if loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(closing(), loop).result(HANG_GUARD)
            loop.call_soon_threadsafe(loop.stop)
        thread.join(HANG_GUARD)
        self.loop = self._thread = None


__all__ = ["HANG_GUARD", "LoopThread"]
