"""The running task's context, and a local runner that retries a function like Flyte does.

``ctx()`` is the context of the task running now: inside ``@task`` it is the local
runner's; inside a Flyte v2 task it is built from Flyte's own ``TaskContext`` (see
:mod:`flyte_checkpoint.integrations.flyte`); outside any task it is a falsy :class:`NoContext`.
Flyte is consulted only if the ``flyte`` package is already imported (it always is inside a
Flyte task), so importing this module stays light.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast, overload

from .lifecycle.runs import current_attempt
from .taskcontext import CheckpointPaths, NoContext, TaskContext
from .uri import redact
from .util.logs import logger

if TYPE_CHECKING:
    from .history.retention import Retention
    from .lifecycle.runs import Run

P = ParamSpec("P")
R = TypeVar("R")

_NO_CONTEXT = NoContext()


def ctx() -> TaskContext | NoContext:
    """The running task's context; a falsy ``NoContext`` outside any task.

    In order: the local runner's (inside ``@task``), then the running Flyte v2 task's (a
    :class:`~flyte_checkpoint.integrations.flyte.FlyteTaskContext` with the destination and
    previous paths and the attempt number Flyte gave this attempt; looked up only when
    ``flyte`` is in ``sys.modules``), else ``NoContext``. Within one task attempt every call
    returns the same object, so ``ctx().checkpoint`` is one checkpoint.
    """
    current = current_attempt.get()
    if current is not None:
        return current
    flyte_ctx = _flyte_context()
    return flyte_ctx if flyte_ctx is not None else _NO_CONTEXT


def _flyte_context() -> TaskContext | None:
    """The running Flyte task's context, or ``None``; imports nothing unless Flyte is loaded."""
    if "flyte" not in sys.modules:
        return None
    from .integrations.flyte import current_context

    return current_context()


def _attempts(run: Run, retries: int, retention: Retention | None = None) -> Iterator[TaskContext]:
    """Yield the context of each attempt of this call: run/action/attempt folders under the root."""
    from .lifecycle.runs import attempts

    for attempt, dest, prev in attempts(run, retries):
        yield TaskContext(attempt, CheckpointPaths(dest, prev), run.name, run.action, retention=retention)


@contextlib.contextmanager
def _run(
    func: Callable[..., Any],
    root: str | None,
    run_name: str | None,
    keep: bool | None,
    retention: Retention | None = None,
) -> Iterator[Run]:
    """The run of one call: opened (locked, earlier attempts found) and closed (removed when
    done; with a ``retention`` policy, a run that succeeded keeps what the policy keeps)."""
    from .lifecycle.runs import Run, base_of

    run = Run(base_of(root), run_name, func.__name__, keep=keep)
    run.open()
    succeeded = False
    try:
        yield run
        succeeded = True
    finally:
        if succeeded and retention is not None and not run.keep:
            _finish_with_policy(run, retention)
        run.close(succeeded=succeeded)


def _finish_with_policy(run: Run, retention: Retention) -> None:
    """A run that succeeded with a policy: its checkpoints (every attempt's) thinned to what the
    policy keeps, the rest kept; the run's folder is then left in place (``run.keep``)."""
    from .history.cleanup import clean_prefix
    from .storage.registry import store_for

    prefix = run.folder.rstrip("/") + "/"
    try:
        deleted = clean_prefix(store_for(prefix), prefix, retention, run=run.name, infer_run=False)
    except OSError as exc:  # the run has ended: a leftover is worth a warning, not a failure
        logger().warning(
            "run %s succeeded; its retention clean-up under %s failed (run flyte-checkpoint gc %s"
            " to finish it): %s",
            run.name,
            redact(prefix),
            redact(prefix),
            exc,
        )
    else:
        logger().info(
            "run %s succeeded: kept what %s keeps under %s (%d deleted)",
            run.name,
            retention.describe(),
            redact(prefix),
            deleted,
        )
    run.keep = True


@overload
def task(
    fn: Callable[P, R],
    *,
    retries: int | None = None,
    checkpoint_root: str | None = None,
    run_name: str | None = None,
    retention: Retention | None = None,
    keep_checkpoints: bool | None = None,
) -> Callable[P, R]: ...


@overload
def task(
    fn: None = None,
    *,
    retries: int | None = None,
    checkpoint_root: str | None = None,
    run_name: str | None = None,
    retention: Retention | None = None,
    keep_checkpoints: bool | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def task(
    fn: Callable[P, R] | None = None,
    *,
    retries: int | None = None,
    checkpoint_root: str | None = None,
    run_name: str | None = None,
    retention: Retention | None = None,
    keep_checkpoints: bool | None = None,
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """Run a function as a local task: up to ``retries + 1`` attempts, each with a checkpoint.

    Attempt *k* saves under ``{root}/{run}/{function}/{k}/`` and gets as its source the
    checkpoint of the newest earlier attempt that holds one (attempt *k-1*'s, unless that
    attempt saved nothing; see :mod:`flyte_checkpoint.lifecycle.runs`); ``ctx()`` inside the function
    gives both. An exception starts
    the next attempt; when attempts run out the last exception is raised. Works on ``def``
    and ``async def`` functions. ``root`` is ``checkpoint_root``, else
    ``$FLYTE_CHECKPOINT_ROOT`` (any URI), else a local temporary folder.

    A call with a ``run_name`` that was run before and did not finish (its process was
    killed) goes on with that run's next attempt number, its first attempt loading the newest
    checkpoint an earlier attempt saved. A run that
    succeeds has its checkpoints removed, unless ``$FLYTE_CHECKPOINT_KEEP_RUNS`` is set (keep
    them all); so does a run without ``run_name``, however it ends. See
    :mod:`flyte_checkpoint.lifecycle.runs`.

    ``retention`` (a :class:`~flyte_checkpoint.Retention`): each attempt's checkpoint keeps
    older generations as the policy says (cleaned up after each save, off the training thread;
    see docs/retention.md), and a run that succeeds keeps what the policy keeps, every
    attempt's checkpoints considered, instead of being removed. Inside a Flyte task, only
    generations within the attempt are deleted, unless ``Retention(earlier_attempts=True)``.
    ``keep_checkpoints`` is deprecated (a ``DeprecationWarning``): ``True`` keeps everything,
    as ``$FLYTE_CHECKPOINT_KEEP_RUNS=1`` does; pass ``retention`` instead.

    Stacked on a Flyte v2 task, on either side of ``@env.task``: inside a Flyte task the
    function runs once, as it is (Flyte owns the retries, and ``ctx()`` gives Flyte's paths
    and attempt number); called outside Flyte, the local runner retries it. Without
    ``retries``, the local runner retries as often as the Flyte task does (0 times for a
    function that is not one). Above ``@env.task`` the Flyte task itself is returned, its
    function now run by the local runner; under it, the Flyte task is found by the
    function's name in its module, as Flyte's own resolver finds tasks.

    Raises:
        ValueError: ``retries`` is negative.
        ConfigurationError: (a ``ValueError``) ``run_name`` is not one plain folder name of at
            most 255 bytes, or the function's name is over 249 bytes (with the run's lock
            file ``.{function}.lock`` it must fit in 255).
        TypeError: given a Flyte task that does not run a Python function.
        RunInUseError: (on a call) the named run is running in another process.
        ConfigurationError: (on a call) ``$FLYTE_CHECKPOINT_KEEP_RUNS`` is invalid.
    """
    if retries is not None and retries < 0:
        raise ValueError("retries must be 0 or more")
    from .lifecycle.runs import check_run_name

    check_run_name(run_name)
    _check_retention(retention, keep_checkpoints)

    def decorate(target: Callable[P, R]) -> Callable[P, R]:
        flyte_task = _function_task(target)
        if flyte_task is None:
            return _local_runner(
                target, retries, checkpoint_root, run_name, keep_checkpoints, None, retention
            )
        flyte_task.func = _local_runner(
            flyte_task.func, retries, checkpoint_root, run_name, keep_checkpoints, flyte_task, retention
        )
        return target  # the Flyte task itself (its function now run by the local runner)

    return decorate(fn) if fn is not None else decorate


def _check_retention(retention: object, keep_checkpoints: bool | None) -> None:
    """Warn of ``keep_checkpoints``; refuse it with ``retention``, and a policy of the wrong type.

    Raises:
        ConfigurationError: both are given, or ``retention`` is not a ``Retention``.
    """
    from .errors import ConfigurationError

    if retention is not None:
        from .history.retention import Retention

        if not isinstance(retention, Retention):
            raise ConfigurationError(
                f"retention= takes fc.Retention(...), not {type(retention).__name__}: e.g."
                " retention=fc.Retention(keep_last=3)"
            )
        if keep_checkpoints is not None:
            raise ConfigurationError(
                "give retention= or keep_checkpoints=, not both: keep_checkpoints is deprecated;"
                " retention=fc.Retention(...) says what a finished run keeps"
            )
    if keep_checkpoints is not None:
        import warnings

        warnings.warn(
            "@fc.task(keep_checkpoints=...) is deprecated: pass retention=fc.Retention(...) (what a"
            " finished run keeps), or set FLYTE_CHECKPOINT_KEEP_RUNS=1 to keep everything",
            DeprecationWarning,
            stacklevel=3,
        )


def _function_task(target: Any) -> Any | None:
    """``target`` when it is a Flyte task made from a function; ``None`` when it is no Flyte task."""
    if "flyte" not in sys.modules:
        return None
    from .integrations.flyte import function_task

    return function_task(target)


def _local_retries(wrapper: Callable[..., Any], retries: int | None, flyte_task: Any | None) -> int:
    """``retries`` when given, else the retries of the Flyte task running ``wrapper``, else 0."""
    if retries is not None:
        return retries
    if "flyte" not in sys.modules:
        return 0
    from .integrations.flyte import task_retries

    return task_retries(wrapper, flyte_task)


def _local_runner(
    func: Callable[P, R],
    retries: int | None,
    root: str | None,
    run_name: str | None,
    keep: bool | None,
    flyte_task: Any | None,
    retention: Retention | None = None,
) -> Callable[P, R]:
    """``func`` wrapped: retried by the local runner outside Flyte, run once inside a Flyte task.

    Raises:
        ConfigurationError: ``func``'s name is too long to name its runs' folder.
    """
    import inspect

    from .lifecycle.runs import check_function_name

    check_function_name(func.__name__)

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            if current_attempt.get() is None and (flyte_ctx := _flyte_context()) is not None:
                with _flyte_attempt(flyte_ctx, retention):
                    return await func(*args, **kwargs)
            count = _local_retries(run_async, retries, flyte_task)
            failures: list[Exception] = []
            with _run(func, root, run_name, keep, retention) as run:
                for tctx in _attempts(run, count, retention):
                    with _attempt(func, tctx, run.first + count, failures):
                        return await func(*args, **kwargs)
                raise failures[-1]

        # A coroutine function's wrapper is one too: it returns what ``func`` returns, a coroutine.
        return cast("Callable[P, R]", run_async)

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        if current_attempt.get() is None and (flyte_ctx := _flyte_context()) is not None:
            with _flyte_attempt(flyte_ctx, retention):
                return func(*args, **kwargs)
        count = _local_retries(run, retries, flyte_task)
        failures: list[Exception] = []
        with _run(func, root, run_name, keep, retention) as this_run:
            for tctx in _attempts(this_run, count, retention):
                with _attempt(func, tctx, this_run.first + count, failures):
                    return func(*args, **kwargs)
            raise failures[-1]

    return run


@contextlib.contextmanager
def _flyte_attempt(flyte_ctx: TaskContext, retention: Retention | None = None) -> Iterator[None]:
    """One attempt inside a Flyte task: its checkpoint follows ``retention`` (if given); its
    final-save registrations end with it."""
    if retention is not None:
        flyte_ctx.retention = retention
    try:
        yield
    finally:
        flyte_ctx.end_final_saves()


@contextlib.contextmanager
def _attempt(
    func: Callable[..., Any], tctx: TaskContext, last: int, failures: list[Exception]
) -> Iterator[None]:
    """One attempt: ``ctx()`` is ``tctx`` inside; an exception is logged and kept in ``failures``
    (the caller goes on to the next attempt, up to the number ``last``), and the attempt's
    checkpoint is closed after."""
    token = current_attempt.set(tctx)
    try:
        yield
    except Exception as exc:
        failures.append(_log_failure(func, tctx, last, exc))
    finally:
        current_attempt.reset(token)
        tctx.close()


def _log_failure(func: Callable[..., Any], tctx: TaskContext, last: int, exc: Exception) -> Exception:
    # A resumed named run numbers on from its earlier calls: what is left is counted from the
    # last attempt of this call, not from 0.
    left = last - tctx.attempt_number
    logger().warning(
        "task %s attempt %d failed (%s: %s); %s",
        func.__name__,
        tctx.attempt_number,
        type(exc).__name__,
        exc,
        f"{left} retr{'y' if left == 1 else 'ies'} left" if left else "no retries left",
    )
    logger().debug(
        "attempt %d checkpoint: %s", tctx.attempt_number, redact(tctx.checkpoint_paths.checkpoint_path or "")
    )
    return exc


__all__ = ["CheckpointPaths", "NoContext", "TaskContext", "ctx", "task"]
