"""``fc.ctx()`` inside a Flyte v2 task: the paths and attempt number Flyte gave this attempt.

:func:`flyte_checkpoint.ctx` calls :func:`current_context` when the ``flyte`` package is
loaded, so task code needs nothing from here::

    @env.task(retries=3)                   # a Flyte task; the same body runs under @fc.task
    def train(n: int) -> int:
        cp = fc.ctx().checkpoint           # dest/prev from Flyte's TaskContext.checkpoint_paths
        path = cp.load_sync()
        ...

What is taken from Flyte's ``TaskContext`` (``flyte.ctx()``):

- ``checkpoint_paths.checkpoint_path``: where this attempt saves;
- ``checkpoint_paths.prev_checkpoint_path``: the previous attempt's checkpoint (blank: none);
- ``attempt_number`` (Flyte reads ``FLYTE_ATTEMPT_NUMBER``; Flyte's local mode leaves it 0 in
  every attempt, though it retries: whether ``load()`` found a checkpoint is what tells a
  resumed attempt);
- ``action.run_name`` / ``action.name``;
- ``restart_attempt`` (``JOBSET_RESTART_ATTEMPT``, set on the pods of clustered tasks);
- ``TORCHELASTIC_RESTART_COUNT``, set by torch's elastic agent (``torchrun``, Flyte's PyTorch
  plugin) on the worker processes it starts: above 0 when it restarted them after one failed
  (``max_restarts``), within the same pod and the same Flyte attempt.

Where ``load()`` reads (:func:`resolve_source`):

1. **A pod restarted within one attempt.** A clustered (JobSet) task whose pod set restarts
   keeps the same Flyte attempt: the previous path stays what it was (blank on the first
   attempt) while this attempt's destination already holds what the earlier pods saved. So
   do workers that torch's elastic agent restarts inside a pod. When
   ``JOBSET_RESTART_ATTEMPT > 0``, ``TORCHELASTIC_RESTART_COUNT > 0`` or the previous path
   is blank, and the destination holds a non-empty object, ``load()`` resumes from the
   destination. (Flyte's own
   ``TaskContext.checkpoint`` does this on ``JOBSET_RESTART_ATTEMPT > 0`` alone, and then
   reads only the destination, even when it is still empty and an earlier attempt's
   checkpoint exists; here the previous attempt's is used in that case.)
2. **Flyte's local mode** (``flyte run --local``, ``flyte.run`` without a cluster): every
   attempt of a run, and every re-run with the same raw data path, saves to the same
   destination, and Flyte copies it to the previous path only before a retry. So when the
   destination holds a non-empty object, it is the newest checkpoint (a process killed
   after a final save on SIGTERM left it there): ``load()`` resumes from it.
3. Otherwise the previous path, as Flyte gave it, except that a remote previous URI naming
   this very attempt's ``{run}/{action}/{n}`` folder is stepped back to ``n - 1``
   (:func:`flyte_checkpoint.repair_union_prev_checkpoint_uri`).
4. **An earlier attempt that saved nothing.** Flyte hands attempt *n* only attempt *n - 1*'s
   path, and an attempt that failed before its first save (out of memory building the
   model) leaves no object there: attempt *n* would start from nothing, though attempt
   *n - 2* had saved. When the previous path follows Flyte's attempt layout
   ``.../{run}/{action}/{n-1}/...`` and holds no object (or a zero-byte one: "no checkpoint"
   by the contract), ``load()`` reads the newest earlier attempt's that holds one, looking
   back through ``n - 2, n - 3, ...`` down to 0, at most :data:`LOOK_BACK` of them (one size
   lookup each; Flyte's retries are rarely more). Attempt numbers order the commits: Flyte
   starts attempt *n* once *n - 1* has ended, so the highest-numbered one holding a checkpoint
   committed last. This costs one size lookup of the previous path when it follows the
   layout, and more only when it holds nothing; a previous path in another layout is used
   as given (its object is not looked at here).

``@fc.task`` stacked on a Flyte task uses :func:`function_task` and :func:`task_retries`
from here; log lines follow Flyte's level through :mod:`.flyte_logging`.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..taskcontext import CheckpointPaths, TaskContext, no_destination
from ..uri import redact
from ..util.paths import points_at_same_attempt

if TYPE_CHECKING:
    from ..checkpoint import Checkpoint
    from ..util.retry import RetryPolicy

log = logging.getLogger("flyte_checkpoint")

#: Key under which our context is cached in the Flyte ``TaskContext.data`` of the attempt.
CONTEXT_KEY = "__flyte_checkpoint_context__"
#: Set by JobSet on the pods of clustered tasks: how often the pod set restarted in this attempt.
RESTART_ENV = "JOBSET_RESTART_ATTEMPT"
#: Set by torch's elastic agent on the workers it starts: how often it restarted them (in one pod).
ELASTIC_RESTART_ENV = "TORCHELASTIC_RESTART_COUNT"

#: How many attempts before the previous one ``load()`` looks back through when the previous
#: attempt saved nothing (one size lookup each; see the module's doc, point 4).
LOOK_BACK = 8

_lock = threading.Lock()


@dataclass
class FlyteTaskContext(TaskContext):
    """``fc.ctx()`` inside a Flyte task: :class:`~flyte_checkpoint.TaskContext` plus Flyte's own.

    ``attempt_number``, ``checkpoint_paths``, ``run_name`` and ``action_name`` are Flyte's (a
    blank previous path is ``None``). ``restart_attempt`` is the JobSet restart count (``None``
    outside clustered tasks), ``elastic_restart`` the elastic agent's (``None`` outside its
    workers); ``flyte_context`` is Flyte's ``TaskContext`` itself.
    """

    restart_attempt: int | None = None
    elastic_restart: int | None = None
    flyte_context: Any = field(default=None, repr=False, compare=False)
    #: Flyte's local mode, where every attempt and every re-run with the same raw data path
    #: saves to the same destination (see :func:`resolve_source`).
    local_mode: bool = False

    @property
    def checkpoint(self) -> Checkpoint:
        """This attempt's checkpoint, made on first use.

        Saves go to Flyte's destination; loads read what :func:`resolve_source` picks.

        Raises:
            NoCheckpointDestinationError: (a ``NoTaskContextError`` and a ``ValueError``) Flyte
                gave this attempt no checkpoint destination.
            OSError: deciding whether a restarted pod resumes from the destination needed
                the size of the object there and the store could not tell (only when
                ``JOBSET_RESTART_ATTEMPT > 0`` or ``TORCHELASTIC_RESTART_COUNT > 0``; with a
                blank previous path the error is logged and the previous path is used); or
                the size of an earlier attempt's checkpoint could not be read (see
                :func:`resolve_source`).
        """
        if self._checkpoint is None and self.checkpoint_paths.checkpoint_path:
            with _lock:
                if self._checkpoint is None:
                    from ..checkpoint import Checkpoint

                    dest = self.checkpoint_paths.checkpoint_path
                    src = resolve_source(
                        dest,
                        self.checkpoint_paths.prev_checkpoint_path,
                        restart_attempt=self.restart_attempt,
                        elastic_restart=self.elastic_restart,
                        run_name=self.run_name,
                        action_name=self.action_name,
                        local_mode=self.local_mode,
                    )
                    self._checkpoint = Checkpoint(dest, src, retention=self.retention)
        if self._checkpoint is None:
            raise no_destination()
        return self._checkpoint


def flyte_task_context() -> Any | None:
    """Flyte's ``TaskContext`` of the running task, or ``None`` outside one.

    Never imports Flyte: without ``flyte`` in ``sys.modules`` there is no Flyte task.
    """
    module = sys.modules.get("flyte")
    if module is None:
        return None
    get = getattr(module, "ctx", None)
    if get is None:  # a partly imported or unrelated "flyte" module
        return None
    tctx = get()
    return tctx if tctx else None


def current_context() -> FlyteTaskContext | None:
    """Our context for the running Flyte task (the same object on every call), or ``None``.

    Making it (once per attempt) also lets our log lines follow Flyte's level and handlers,
    unless logging is set up for ``flyte_checkpoint`` (:mod:`.flyte_logging`).
    """
    tctx = flyte_task_context()
    if tctx is None:
        return None
    data = getattr(tctx, "data", None)
    cached = data.get(CONTEXT_KEY) if isinstance(data, dict) else None
    if isinstance(cached, FlyteTaskContext):
        return cached
    made = from_flyte(tctx)
    if isinstance(data, dict):
        with _lock:
            made = data.setdefault(CONTEXT_KEY, made)
    from .flyte_logging import follow_flyte

    follow_flyte()  # once per attempt: Flyte's level may have changed since the last one
    return made


def from_flyte(tctx: Any) -> FlyteTaskContext:
    """Build our context from a Flyte ``TaskContext`` (``flyte.models.TaskContext``)."""
    paths = getattr(tctx, "checkpoint_paths", None)
    dest = _blank_to_none(getattr(paths, "checkpoint_path", None))
    prev = _blank_to_none(getattr(paths, "prev_checkpoint_path", None))
    action = getattr(tctx, "action", None)
    return FlyteTaskContext(
        attempt_number=int(getattr(tctx, "attempt_number", 0) or 0),
        checkpoint_paths=CheckpointPaths(dest, prev),
        run_name=str(getattr(action, "run_name", "") or ""),
        action_name=str(getattr(action, "name", "") or ""),
        restart_attempt=_restart_attempt(tctx),
        elastic_restart=_env_count(ELASTIC_RESTART_ENV),
        flyte_context=tctx,
        local_mode=getattr(tctx, "mode", None) == "local",
    )


def function_task(target: Any) -> Any | None:
    """``target`` when it is a Flyte task made from a function (what ``@env.task`` returns for a
    ``def`` or ``async def``: ``flyte.AsyncFunctionTaskTemplate``); ``None`` when it is no Flyte task.

    Raises:
        TypeError: ``target`` is a Flyte task that runs no Python function of its own.
    """
    module = sys.modules.get("flyte")
    base = getattr(module, "TaskTemplate", None)
    if base is None or not isinstance(target, base):
        return None
    if isinstance(target, getattr(module, "AsyncFunctionTaskTemplate", ())) and callable(
        getattr(target, "func", None)
    ):
        return target
    raise TypeError(
        f"@fc.task runs a Python function, and the Flyte task {getattr(target, 'name', target)!r} "
        f"({type(target).__name__}) runs none: put @fc.task on a function, above or under @env.task"
    )


def task_retries(wrapper: Callable[..., Any], flyte_task: Any | None = None) -> int:
    """Flyte's retry count for the Flyte task whose function is ``wrapper``; 0 when there is none.

    The task is ``flyte_task`` when given, else the Flyte task bound to the wrapped function's
    name in the function's module (where Flyte's own resolver finds tasks).
    """
    if flyte_task is None:
        func = getattr(wrapper, "__wrapped__", wrapper)
        namespace = getattr(func, "__globals__", None)
        if namespace is None:
            module = sys.modules.get(getattr(func, "__module__", None) or "")
            namespace = vars(module) if module is not None else {}
        candidate = namespace.get(getattr(func, "__name__", ""))
        if getattr(candidate, "func", None) is wrapper and function_task(candidate) is not None:
            flyte_task = candidate
    if flyte_task is None:
        return 0
    strategy = flyte_task.retries
    return int(getattr(strategy, "count", strategy) or 0)


def resolve_source(
    dest: str,
    prev: str | None,
    *,
    restart_attempt: int | None = None,
    elastic_restart: int | None = None,
    run_name: str = "",
    action_name: str = "",
    retry: RetryPolicy | None = None,
    local_mode: bool = False,
) -> str | None:
    """The URI ``load()`` should read for a Flyte attempt saving to ``dest`` (see the module doc).

    Looks at the store (one size query of ``dest``) only when ``restart_attempt > 0`` (JobSet
    restarted the pods), ``elastic_restart > 0`` (the elastic agent restarted the workers),
    ``prev`` is blank, or in Flyte's local mode; and (one size query of the previous path, and
    of up to :data:`LOOK_BACK` earlier attempts' when it holds nothing) when the previous path
    follows Flyte's attempt layout with an attempt number above 0.

    Raises:
        OSError: after a restart or in local mode, the size of the object at
            ``dest`` could not be read (after retries of transient errors). With a blank ``prev``
            and no restart (on a cluster) the error is logged and ``None`` returned, which is what
            Flyte itself would load. Or the size of the previous attempt's checkpoint, or of an
            earlier one's, could not be read: never taken for "no checkpoint there".
    """
    prev = _blank_to_none(prev)
    restarts = []
    if restart_attempt is not None and restart_attempt > 0:
        restarts.append(f"pod restart {restart_attempt}")
    if elastic_restart is not None and elastic_restart > 0:
        restarts.append(f"worker restart {elastic_restart} by the elastic agent")
    restarted = bool(restarts)
    if restarted or prev is None or local_mode:
        try:
            size = _size_of(dest, retry)
        except OSError as exc:
            if restarted or local_mode:  # there, the destination may hold the newest checkpoint
                where = f"{' and '.join(restarts)} of this attempt" if restarted else "Flyte's local mode"
                raise type(exc)(
                    f"{where}: could not check for this "
                    f"attempt's own checkpoint at {redact(dest)} ({exc}); check the store's "
                    "credentials and that the task may read its checkpoint destination"
                ) from exc
            log.warning(
                "could not check %s for a checkpoint saved earlier in this attempt (%s): "
                "starting without one",
                redact(dest),
                exc,
            )
            size = None
        if size:
            if restarted or not local_mode:
                why = "the task restarted within the attempt"
                why += f" ({', '.join(restarts)})" if restarted else ""
            else:
                why = "Flyte's local mode saves every attempt and re-run there, so it is the newest"
            log.info(
                "this attempt's destination %s already holds a checkpoint (%d bytes): %s; resuming from it",
                redact(dest),
                size,
                why,
            )
            return dest
    if prev is not None and points_at_same_attempt(prev, dest, run_name=run_name, action_name=action_name):
        from ..util.paths import repair_union_prev_checkpoint_uri

        fixed = repair_union_prev_checkpoint_uri(prev, run_name=run_name, action_name=action_name)
        if fixed != prev:
            log.info("previous checkpoint URI %s names this attempt: using %s", redact(prev), redact(fixed))
        prev = fixed
    if prev is None or local_mode:
        return prev
    return newest_earlier(prev, run_name=run_name, action_name=action_name, retry=retry)


def newest_earlier(
    prev: str,
    *,
    run_name: str,
    action_name: str,
    retry: RetryPolicy | None = None,
    look_back: int = LOOK_BACK,
) -> str:
    """``prev``, or when it holds nothing, the newest earlier attempt's checkpoint in Flyte's
    layout that holds one (see the module's doc, point 4); ``prev`` when none does, or when it
    does not follow the layout.

    Raises:
        OSError: a size could not be read (after retries of transient errors), naming the URI.
    """
    from ..util.paths import attempt_number_in, with_attempt_number

    number = attempt_number_in(prev, run_name=run_name, action_name=action_name)
    if not number:  # not in the layout, or attempt 0: there is no earlier attempt to look at
        return prev
    for n in range(number, max(number - look_back, 0) - 1, -1):
        uri = (
            prev if n == number else with_attempt_number(prev, n, run_name=run_name, action_name=action_name)
        )
        try:
            size = _size_of(uri, retry)
        except OSError as exc:
            raise type(exc)(
                f"could not check attempt {n}'s checkpoint at {redact(uri)} for the newest earlier"
                f" checkpoint to resume from ({exc}); check the store's credentials and that the task"
                " may read its run's earlier checkpoints"
            ) from exc
        if size:
            if n != number:
                log.info(
                    "the previous attempt's checkpoint %s holds nothing (it saved nothing): resuming"
                    " from attempt %d's, the newest earlier one, %s (%d bytes)",
                    redact(prev),
                    n,
                    redact(uri),
                    size,
                )
            return uri
    return prev


def _size_of(uri: str, retry: RetryPolicy | None) -> int | None:
    from ..storage.registry import store_for
    from ..util.retry import RetryPolicy

    policy = retry or RetryPolicy.from_env()
    return policy.call(lambda: store_for(uri).stat(uri), f"size of {redact(uri)}")


def _restart_attempt(tctx: Any) -> int | None:
    value = getattr(type(tctx), "restart_attempt", None)
    if value is not None:  # Flyte >= 2.12 has the property
        return getattr(tctx, "restart_attempt", None)
    return _env_count(RESTART_ENV)


def _env_count(name: str) -> int | None:
    raw = os.environ.get(name)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        log.warning("ignoring %s=%r: not an integer", name, raw)
        return None


def _blank_to_none(value: object) -> str | None:
    if value is None:
        return None
    text = str(value).strip().strip('"').strip()
    return text or None


__all__ = [
    "CONTEXT_KEY",
    "LOOK_BACK",
    "FlyteTaskContext",
    "current_context",
    "flyte_task_context",
    "from_flyte",
    "function_task",
    "newest_earlier",
    "resolve_source",
    "task_retries",
]
