"""Per-process resources: pools, clients and locks that a forked child makes afresh.

A child made by ``fork`` (``multiprocessing``'s ``fork`` method, data-loader workers)
inherits the parent's memory but only the thread that forked: a thread pool whose threads
do not exist there, a lock held by a thread that does not exist there, an SDK client whose
pooled connections are the parent's sockets. Each such resource of this project is held
in a :class:`PerProcess` (a lock: :func:`lock`), which a child rebuilds on its
first use. The parent's copy is dropped in the child without being closed: closing it
there could touch the parent's connections or wait for threads that never run.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

#: Bumped in a child after every fork: a value made in an older generation is the parent's.
_generation = 0
#: Guards the replacement of per-value locks; replaced in the child, so never inherited held.
_guard = threading.Lock()


def _after_fork_in_child() -> None:
    global _generation, _guard
    _generation += 1
    _guard = threading.Lock()


if hasattr(os, "register_at_fork"):  # pragma: no branch - POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


def generation() -> int:
    """How many forks lie between the first process and this one (0 in the first)."""
    return _generation


class PerProcess(Generic[T]):
    """A value made by ``factory`` on first use in each process, then shared by its threads.

    :meth:`get` builds it once (other threads wait for that build); in a forked child the
    first :meth:`get` builds a new one instead of using the parent's.
    """

    __slots__ = ("_built", "_factory", "_lock", "_lock_generation")

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._built: tuple[int, T] | None = None
        self._lock = threading.Lock()
        self._lock_generation = _generation

    def get(self) -> T:
        """This process's value, built now if it has none (``factory``'s errors propagate)."""
        built = self._built
        if built is not None and built[0] == _generation:
            return built[1]
        with self._build_lock():
            built = self._built
            if built is None or built[0] != _generation:
                built = (_generation, self._factory())
                self._built = built
            return built[1]

    def peek(self) -> T | None:
        """This process's value if it has been built, else ``None`` (never builds)."""
        built = self._built
        return built[1] if built is not None and built[0] == _generation else None

    def take(self) -> T | None:
        """Forget this process's value and return it (to be closed by the caller), or ``None``.

        The next :meth:`get` builds a new one. A value inherited from the parent is
        forgotten too, and not returned: it must not be closed here.
        """
        with self._build_lock():
            built, self._built = self._built, None
        return built[1] if built is not None and built[0] == _generation else None

    def _build_lock(self) -> threading.Lock:
        if self._lock_generation != _generation:
            with _guard:
                if self._lock_generation != _generation:
                    self._lock = threading.Lock()
                    self._lock_generation = _generation
        return self._lock


def lock(*, reentrant: bool = False) -> PerProcess[threading.Lock]:
    """A lock (an ``RLock`` if ``reentrant``) that a forked child finds unlocked, whoever held it.

    Hold it with ``with held.get(): ...``: ``get()`` picks this process's lock and the
    ``with`` statement acquires it, so an interrupt can never leave it half-acquired.
    A thread that forks while holding it leaves the ``with`` in the child releasing the
    inherited copy, not the child's own lock.
    """
    return PerProcess(threading.RLock if reentrant else threading.Lock)  # type: ignore[arg-type]
