"""One thread pool per store, rebuilt in a forked child, its threads named for the backend."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from ...util.forksafe import PerProcess, lock

T = TypeVar("T")

#: Per process, per backend: the number of the next pool thread (a child counts from 1 again).
_numbers: PerProcess[dict[str, Iterator[int]]] = PerProcess(dict)
_numbers_lock = lock()  # a forked child finds it free, whoever held it


def _next_number(backend: str) -> int:
    counters = _numbers.get()
    with _numbers_lock.get():
        counter = counters.setdefault(backend, itertools.count(1))
    return next(counter)


class StorePool:
    """The worker threads of one store: ``workers`` of them, named ``flyte-checkpoint-<backend>-<N>``.

    N counts from 1 in each process, across the backend's pools, so names stay unique when a
    process has several stores of one backend. The executor is built on first use in each
    process (:class:`~flyte_checkpoint.util.forksafe.PerProcess`): a forked child gets its own and
    never shuts down the parent's. Threads start as work arrives, up to ``workers``.
    """

    def __init__(self, backend: str, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"a pool needs at least one worker, not {workers}")
        self.backend = backend
        self.workers = workers
        self._executor: PerProcess[ThreadPoolExecutor] = PerProcess(self._build)

    def _build(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(
            max_workers=self.workers,
            thread_name_prefix=f"flyte-checkpoint-{self.backend}",
            initializer=self._name_thread,
        )

    def _name_thread(self) -> None:
        # thread_name_prefix alone would give "<prefix>_0"; the project names threads "-1", "-2"...
        threading.current_thread().name = f"flyte-checkpoint-{self.backend}-{_next_number(self.backend)}"

    @property
    def executor(self) -> ThreadPoolExecutor:
        """This process's executor, built now if it has none (for ``map`` or an SDK that takes one)."""
        return self._executor.get()

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Run ``fn(*args, **kwargs)`` on one of this process's pool threads."""
        return self._executor.get().submit(fn, *args, **kwargs)

    def close(self) -> None:
        """Cancel the queued calls, wait for the running ones, and end this process's threads.

        Idempotent. A later :meth:`submit` builds a new executor. In a forked child the
        parent's executor is dropped, not shut down (its threads do not exist there).
        """
        executor = self._executor.take()
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)

    def __repr__(self) -> str:
        return f"StorePool({self.backend!r}, workers={self.workers})"


__all__ = ["StorePool"]
