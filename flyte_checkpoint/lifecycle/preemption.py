"""A last save when the machine is reclaimed: run what the task registered on SIGTERM.

A task says what to save when its process is told to stop (spot reclaim, node drain,
Flyte aborting the attempt)::

    fc.ctx().on_terminate(lambda: model_dir)    # or cp.on_terminate(...); bytes, file or folder

On SIGTERM every registered entry runs, in the order registered, within one grace budget
(:data:`GRACE_ENV`, default :data:`DEFAULT_GRACE` seconds: a little under Kubernetes' default
30 s between SIGTERM and SIGKILL); then the process ends as it would have without us. An
entry is "run with a budget of N seconds": a save (:func:`on_terminate`), waiting for the
background saves (:func:`wait_for_background`), or any other kind through :func:`register`.

The handler:

- is installed when the first entry is registered (never at import), from the main thread;
- chains the handler installed before it: a Python handler is called after the saves;
  with ``SIG_DFL`` (or a handler set outside Python) the default action is re-raised, so the
  process ends by SIGTERM; with ``SIG_IGN`` the process goes on;
- stays in front of handlers set after it: one that does not call ours (it would silently
  disable every final save) is noticed when an entry is registered and when the main thread
  saves or loads, and ours is installed again in front of it, which it then calls after the
  saves (see :mod:`flyte_checkpoint.lifecycle.handlerchain`; a WARNING says so once). Where that cannot be
  done (a registration from another thread), a WARNING says the final saves will not run, and
  the registration reports ``active`` False; a SIGTERM that comes then says it again;
- runs the saves once: a SIGTERM arriving while they run is ignored, a later one only chains;
- works whatever the main thread is doing (sync code, an ``asyncio`` loop); inside a save
  or load of its own (:func:`deferring`) the signal is handled when that call ends, since
  the thread may hold locks any save needs;
- aborts a save that has not finished when the budget is spent: a cancelled save commits
  nothing, so the previous checkpoint stays whole.

:func:`preempt` runs the same saves by hand (a cloud's preemption notice) without ending
the process. An entry goes when its :class:`Registration` is removed, when its owner
(the ``Checkpoint``) is garbage-collected, and, for a task's, when the attempt ends.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import ConfigurationError, OperationCancelledError
from ..uri import redact
from ..util.logs import log_transfer, logger
from .handlerchain import Chain, describe, reaches

if TYPE_CHECKING:
    from ..checkpoint import Checkpoint, Data

#: The grace budget in seconds for all final saves together.
GRACE_ENV = "FLYTE_CHECKPOINT_GRACE_SECONDS"
#: Kubernetes waits 30 s by default between SIGTERM and SIGKILL; leave some for the rest.
DEFAULT_GRACE = 25.0
#: Seconds an aborted save is given to stop (abort its upload) before the process goes on.
ABORT_WAIT = 5.0

#: What a final save is given: bytes, a file or a folder; ``None`` saves nothing.
Saver = Callable[[], "Data | None"]


def grace_seconds() -> float:
    """The grace budget: ``$FLYTE_CHECKPOINT_GRACE_SECONDS``, else :data:`DEFAULT_GRACE`.

    Raises:
        ConfigurationError: the value is not a number of seconds above 0.
    """
    raw = os.environ.get(GRACE_ENV, "").strip()
    if not raw:
        return DEFAULT_GRACE
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ConfigurationError(
            f"{GRACE_ENV}={raw!r} is not valid: set it to a number of seconds above 0 (the time the"
            f" final save may take after SIGTERM; default {DEFAULT_GRACE:g}, keep it under the"
            " pod's terminationGracePeriodSeconds), or unset it"
        )
    return value


@dataclass(frozen=True)
class Outcome:
    """How one entry ended: ``"done"``, ``"skipped"`` (nothing to save), ``"aborted"`` (out
    of budget: nothing committed) or ``"failed"`` (``error`` says why)."""

    what: str
    status: str
    seconds: float
    error: BaseException | None = None


@dataclass(eq=False)
class _Entry:
    what: str
    run: Callable[[float, int | None], str]
    owner: weakref.ref[Any] | None = None
    pid: int = field(default_factory=os.getpid)

    def alive(self) -> bool:
        return self.pid == os.getpid() and (self.owner is None or self.owner() is not None)


class Registration:
    """Registered entries; :meth:`remove` (or leaving a ``with`` block) unregisters them."""

    def __init__(self, entries: _Entry | list[_Entry]) -> None:
        self._entries = entries if isinstance(entries, list) else [entries]

    @property
    def active(self) -> bool:
        """Whether SIGTERM will run the entries: they are still registered, and the process's
        SIGTERM handler is ours or calls it (not so where ours could not be installed, or a
        handler set after it from another thread took its place: see :func:`install`)."""
        with _lock:
            return all(e in _entries for e in self._entries) and _reached()

    def remove(self) -> None:
        """Unregister the entries (idempotent)."""
        _remove(lambda e: any(e is mine for mine in self._entries))

    def __enter__(self) -> Registration:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"Registration({[e.what for e in self._entries]!r}, active={self.active})"


_lock = threading.RLock()  # reentrant: a handler may land while the main thread holds it
_entries: list[_Entry] = []


class _State:
    def __init__(self) -> None:
        self.reset()

    def reset(self, chain: Chain | None = None) -> None:
        self.installed_pid = 0
        #: What our handler calls after the saves (see :mod:`.handlerchain`).
        self.chain = chain if chain is not None else Chain()
        #: Handlers set after ours already warned about (each is named once).
        self.warned: list[Any] = []
        self.reaches: tuple[Any, bool] | None = None  # the last handler looked into, and the answer
        self.running = False
        self.fired = False
        self.pending: tuple[int, Any] | None = None  # a SIGTERM that came during preempt()
        # A SIGTERM that came while the main thread was in a save of its own: handled when
        # that save ends (see deferring()), with the time it came.
        self.deferred: tuple[int, Any, float] | None = None
        self.outcomes: list[Outcome] = []


class _Depth:
    """How deep the main thread is in saves of its own (only the main thread changes it)."""

    value = 0


_depth = _Depth()
_state = _State()

T = TypeVar("T")


def deferring(fn: Callable[[], T]) -> T:
    """``fn()``, a save or load made in the main thread; elsewhere just ``fn()``.

    SIGTERM stops the main thread wherever it is, and the handler runs the final saves while
    it stays stopped: inside a save of its own it may hold locks that any save needs (the
    line of its destination, a thread pool's, a logging handler's), and the final save would
    wait for them until the budget is spent. So a SIGTERM that comes while the main thread
    is inside one is handled as soon as that save ends (committed, failed or cancelled),
    with the budget that is left: that save keeps its place in the order, and the final
    save goes after it.

    The count is raised right before the ``try`` whose ``finally`` lowers it, with no call
    between: an interrupt (``KeyboardInterrupt``) cannot leave it raised.
    """
    if threading.get_ident() != _main_ident():
        return fn()
    notice()
    _depth.value += 1
    try:
        return fn()
    finally:
        _depth.value -= 1
        if _depth.value == 0 and _state.deferred is not None:
            _run_deferred()


def notice() -> None:
    """In the main thread, put ours in front again of a handler set after it that does not
    call it (see :mod:`flyte_checkpoint.lifecycle.handlerchain`); elsewhere, nothing.

    Every save and load the main thread makes calls this (:func:`deferring` does, and the
    async ones when they are called, before their worker thread runs): an asyncio program
    saves only with ``await``, and its loop's ``add_signal_handler`` is the handler set after.
    """
    if (
        _state.installed_pid == os.getpid()
        and threading.get_ident() == _main_ident()
        and signal.getsignal(signal.SIGTERM) is not _handle
    ):
        with _lock:
            _keep_in_front()


def _main_ident() -> int | None:
    return threading.main_thread().ident


def _run_deferred() -> None:
    deferred = _state.deferred
    if deferred is None:
        return
    _state.deferred = None
    signum, frame, since = deferred
    logger().warning(
        "SIGTERM came %.2f s ago, during a save or load of the main thread, which has now ended",
        time.monotonic() - since,
    )
    _handle_now(signum, frame, since)


def register(
    run: Callable[[float, int | None], str], *, what: str, owner: object | None = None
) -> Registration:
    """Register ``run(budget, interrupted)`` to run on SIGTERM (and :func:`preempt`).

    ``budget`` is the seconds left of the grace budget; ``interrupted`` is the thread the
    signal handler stopped (it cannot make progress while ``run`` runs), or ``None``. ``run``
    returns ``"done"`` or ``"skipped"``, or raises (:class:`TimeoutError` when it could not
    finish within ``budget``). With an ``owner``, the entry lives no longer than it.
    Installs the SIGTERM handler if this is the main thread and it is not installed yet.
    """
    entry = _Entry(what, run, weakref.ref(owner) if owner is not None else None)
    with _lock:
        _entries.append(entry)
    install()
    return Registration(entry)


def on_terminate(checkpoint: Checkpoint, fn: Saver, *, owner: object | None = None) -> Registration:
    """Save ``fn()`` (bytes, a file or folder path; ``None``: nothing) to ``checkpoint`` on SIGTERM.

    The save is ordered after the saves already started to the same destination (except
    one the handler interrupted, which is cancelled) and aborted if the budget runs out.
    The entry lives as long as ``owner`` (default: the checkpoint).
    """
    if not callable(fn):
        raise TypeError(f"on_terminate() takes a function returning what to save, not {type(fn).__name__}")
    _import_what_a_save_needs(checkpoint.remote_destination)
    checkpoint._import_what_a_manifest_needs()
    ref = weakref.ref(checkpoint)

    def run(budget: float, interrupted: int | None) -> str:
        cp = ref()
        if cp is None:
            return "skipped"
        return _save_within(cp, fn, budget, interrupted)

    what = f"save to {redact(checkpoint.remote_destination)}"
    return register(run, what=what, owner=checkpoint if owner is None else owner)


def terminate_entries(
    checkpoint: Checkpoint, fn: Saver | None, *, wait_background: bool, owner: object | None = None
) -> Registration:
    """What ``Checkpoint.on_terminate`` and ``TaskContext.on_terminate`` register: the wait for
    the background saves (if asked), then the save of ``fn()`` (if given), as one registration.

    Raises:
        TypeError: neither ``fn`` nor ``wait_background``, or ``fn`` is not callable.
    """
    if fn is None and not wait_background:
        raise TypeError("on_terminate() needs a function returning what to save, or wait_background=True")
    parts = []
    if wait_background:
        parts.append(wait_for_background(checkpoint, owner=owner))
    if fn is not None:
        parts.append(on_terminate(checkpoint, fn, owner=owner))
    return parts[0] if len(parts) == 1 else Registration([e for r in parts for e in r._entries])


def wait_for_background(checkpoint: Checkpoint, *, owner: object | None = None) -> Registration:
    """On SIGTERM, let ``checkpoint``'s background saves end (``checkpoint.wait``) within the budget.

    Registered before a final save of the same checkpoint, the latest background save ends
    first. Saves still running when the budget is spent are reported ``aborted``: they are
    cut when the process ends (a store commits nothing half-written), so the checkpoint
    stays the last one committed. The entry lives as long as ``owner`` (default: the checkpoint).
    """
    ref = weakref.ref(checkpoint)

    def run(budget: float, interrupted: int | None) -> str:
        cp = ref()
        if cp is None:
            return "skipped"
        from ..errors import SaveTimeoutError

        try:
            cp.wait(timeout=budget)
        except SaveTimeoutError as exc:  # a TimeoutError: reported "aborted"
            raise SaveTimeoutError(
                f"the background saves to {redact(cp.remote_destination)} did not end within the"
                f" {budget:.2g} s left of the grace budget ({GRACE_ENV}); if the process ends now they"
                " are cut, and a store commits nothing half-written"
            ) from exc
        return "done"

    what = f"wait for the background saves to {redact(checkpoint.remote_destination)}"
    return register(run, what=what, owner=checkpoint if owner is None else owner)


def _import_what_a_save_needs(dest: str) -> None:
    """Import now the modules a save imports on first use, and make ``dest``'s store.

    The final save runs in a worker thread while the handler holds the main thread, which
    may have stopped inside the import of one of them (its first save): the worker would
    then wait for that import for ever, or fail on the half-made module.
    """
    import importlib

    for name in (  # by full name, so that a module that moves is found here by its name
        "flyte_checkpoint.util.cancellation",
        "flyte_checkpoint.lifecycle.saveorder",
        "flyte_checkpoint.util.sources",
        "flyte_checkpoint.format.archive",
        "flyte_checkpoint.format.pipeline",
        "flyte_checkpoint.storage.stores.local",
        "flyte_checkpoint.storage.kit.checksums",  # the manifest's digest
        "flyte_checkpoint.lifecycle.runs",  # the run and attempt its manifest records
    ):
        importlib.import_module(name)
    from ..storage.registry import store_for

    store_for(dest)
    logger()


def forget(owner: object) -> None:
    """Unregister every entry whose owner is ``owner`` (the attempt that registered them ended)."""
    _remove(lambda e: e.owner is not None and e.owner() is owner)


def registered() -> int:
    """How many live entries are registered in this process."""
    with _lock:
        return sum(e.alive() for e in _entries)


def preempt(budget: float | None = None) -> list[Outcome]:
    """Run the registered final saves now, as SIGTERM would, and return; the process goes on.

    For a cloud's preemption notice. ``budget`` defaults to the grace budget. Each call runs
    them (a later SIGTERM too, once), except while they are already running: then it returns
    ``[]`` at once. Returns how each entry ended.

    Raises:
        ConfigurationError: ``$FLYTE_CHECKPOINT_GRACE_SECONDS`` is invalid (and no ``budget``).
    """
    return _run(grace_seconds() if budget is None else budget, None, "by hand")


def install() -> bool:
    """Install the SIGTERM handler now (idempotent); whether SIGTERM reaches it in this process.

    Only the main thread may install a signal handler: from another thread this logs a
    warning, and :func:`preempt` still works. Once installed, a handler set after ours that
    does not call it is noticed here: from the main thread ours is installed again in front
    of it (and calls it after the saves); from another thread a WARNING names it, once, and
    this returns ``False``.
    """
    with _lock:
        if _state.installed_pid == os.getpid():
            return _keep_in_front()
        if threading.current_thread() is not threading.main_thread():
            logger().warning(
                "the SIGTERM final save cannot be installed from thread %s (only the main thread may"
                " set a signal handler): call flyte_checkpoint.lifecycle.preemption.install() from the main"
                " thread first, or fc.preempt() on a preemption notice",
                threading.current_thread().name,
            )
            return False
        current = signal.getsignal(signal.SIGTERM)
        if _state.installed_pid:  # a forked child: its parent's chain, ours maybe still in place
            _state.reset(Chain(_state.chain.found, _state.chain.above))
            _state.installed_pid = os.getpid()
            if current is not _handle:
                _keep_in_front()
        else:
            signal.signal(signal.SIGTERM, _handle)
            _state.reset(Chain(current))
            _state.installed_pid = os.getpid()
        _relay()
        return True


def _relay() -> None:
    from .signalrelay import start

    # A SIGTERM landing on another thread still reaches the handler; one no handler of ours
    # will see is reported when it comes.
    start(signal.SIGTERM, notice=_unheard)


def _reached() -> bool:
    """Whether SIGTERM reaches our handler in this process: it is installed, and the handler
    set now is ours or one that calls it."""
    if _state.installed_pid != os.getpid():
        return False
    current = signal.getsignal(signal.SIGTERM)
    if current is _handle:
        return True
    if _state.reaches is None or _state.reaches[0] is not current:
        _state.reaches = (current, reaches(current, _handle))
    return _state.reaches[1]


def _keep_in_front() -> bool:
    """Whether SIGTERM reaches our handler; from the main thread, install it again in front of
    a handler set after it that does not call it. Called with ``_lock`` held, once installed."""
    if _reached():
        return True
    current = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _handle)
        _state.chain.put_above(current)
        _relay()  # the wakeup fd may have been taken and given back since
        log = logger().warning if not _state.warned else logger().info
        _state.warned.append(current)
        log(
            "SIGTERM's handler was replaced after flyte-checkpoint installed its own, by %s, which"
            " does not call it: the final saves would not have run. Ours is installed again in"
            " front of it: on SIGTERM the final saves run, then %s is called",
            describe(current),
            describe(current),
        )
        return True
    if not any(current is h for h in _state.warned):
        _state.warned.append(current)
        logger().warning(
            "SIGTERM's handler was replaced after flyte-checkpoint installed its own, by %s, which"
            " does not call it: on SIGTERM the final saves will NOT run, and their registrations"
            " report active=False. Only the main thread may set a handler (this is thread %s):"
            " call flyte_checkpoint.lifecycle.preemption.install() from the main thread after %s is set,"
            " or fc.preempt() on a preemption notice",
            describe(current),
            threading.current_thread().name,
            describe(current),
        )
    return False


def _unheard() -> None:
    """Run by the signal relay's thread as a SIGTERM arrives: say so when it cannot reach our
    handler while final saves are registered (no lock is taken: the main thread may hold it)."""
    count = sum(e.alive() for e in list(_entries))
    if not count or _reached():
        return
    logger().warning(
        "SIGTERM came, and its handler is %s, set after flyte-checkpoint's and not calling it:"
        " the %d final save(s) registered do not run",
        describe(signal.getsignal(signal.SIGTERM)),
        count,
    )


def uninstall() -> None:
    """Put back the handler right below ours (main thread only; for tests)."""
    with _lock:
        if _state.installed_pid == os.getpid() and signal.getsignal(signal.SIGTERM) is _handle:
            signal.signal(signal.SIGTERM, _state.chain.below_ours())
        _state.reset()
        _entries.clear()


def _remove(match: Callable[[_Entry], bool]) -> None:
    with _lock:
        _entries[:] = [e for e in _entries if e.alive() and not match(e)]


def _handle(signum: int, frame: Any) -> None:
    if _state.chain.at is not None:  # a handler set after ours, called by ours, calls it again
        _state.chain.call(signum, frame)
        return
    with _lock:
        if _state.deferred is not None:
            return  # the first one is handled when the main thread's save ends
        if _depth.value > 0 and not _state.running and not _state.fired:
            # Nothing is logged here: the main thread may be inside a logging call.
            _state.deferred = (signum, frame, time.monotonic())
            return
    _handle_now(signum, frame, time.monotonic())


def _handle_now(signum: int, frame: Any, since: float) -> None:
    with _lock:
        if _state.running:
            if not _state.fired:  # preempt() is running them: end the process once it is done
                _state.pending = (signum, frame)
            logger().warning("SIGTERM while the final saves run: they go on")
            return
        first = _state.installed_pid == os.getpid() and not _state.fired
        _state.fired = True
    if first:
        try:
            budget = grace_seconds()
        except ConfigurationError as exc:
            logger().error("SIGTERM: %s; using %g s", exc, DEFAULT_GRACE)
            budget = DEFAULT_GRACE
        _run(max(budget - (time.monotonic() - since), 0.0), threading.get_ident(), "SIGTERM")
    _chain(signum, frame)


def _chain(signum: int, frame: Any) -> None:
    """End the process as the handlers below ours would have (see :class:`.handlerchain.Chain`)."""
    _state.chain.call(signum, frame)


def _run(budget: float, interrupted: int | None, why: str) -> list[Outcome]:
    with _lock:
        if _state.running:
            return []
        _state.running = True
        entries = [e for e in _entries if e.alive()]
    outcomes: list[Outcome] = []
    try:
        deadline = time.monotonic() + budget
        if entries:
            logger().warning("%s: running %d final save(s) within %.3g s", why, len(entries), budget)
        for entry in entries:
            started = time.monotonic()
            left = deadline - started
            error: BaseException | None = None
            try:
                if left <= 0:
                    raise TimeoutError(f"no time left of the {budget:g} s budget")
                status = entry.run(left, interrupted)
            except (TimeoutError, OperationCancelledError) as exc:
                status, error = "aborted", exc
            except Exception as exc:  # one failing entry must not stop the others
                status, error = "failed", exc
            outcome = Outcome(entry.what, status, time.monotonic() - started, error)
            outcomes.append(outcome)
            _log(outcome)
    finally:
        with _lock:
            _state.running = False
            _state.outcomes = outcomes
            pending, _state.pending = _state.pending, None
    if pending is not None:
        _chain(*pending)
    return outcomes


def _log(outcome: Outcome) -> None:
    if outcome.status == "done":
        logger().warning("final %s: done in %.2f s", outcome.what, outcome.seconds)
    elif outcome.status == "skipped":
        logger().warning("final %s: nothing to save", outcome.what)
    else:
        logger().error(
            "final %s %s after %.2f s (%s); the previous checkpoint stays as it was",
            outcome.what,
            outcome.status,
            outcome.seconds,
            outcome.error,
        )


def _within(done: threading.Event, budget: float) -> bool:
    """Whether ``done`` is set within ``budget`` seconds (tests replace this: see test_preemption)."""
    return done.wait(budget)


def _save_within(cp: Checkpoint, fn: Saver, budget: float, interrupted: int | None) -> str:
    """Save ``fn()`` to ``cp`` in a worker thread; cancel it if ``budget`` runs out.

    Raises:
        TimeoutError: the save did not finish within ``budget`` (it was cancelled: nothing
            committed, unless its commit had begun).
        Exception: what ``fn`` or the save raised.
    """
    from ..util.cancellation import Scope
    from .saveorder import drop_thread, start_thread, take

    dest = cp.remote_destination
    scope = Scope(f"final save to {redact(dest)}")
    done = threading.Event()
    result: list[Any] = []
    # The thread the signal stopped never goes on while this runs, and it may hold any lock of
    # a save of its own. So the work on the destination's line (whose lock is reentrant) is
    # done here, in the handler's thread, which is that thread; the worker only uploads, on
    # paths that take no lock a save may hold across a step (see test_preemption).
    if interrupted is not None:
        # A save of the stopped thread can never end while this one waits for it: cancel it,
        # so it cannot commit its older state after this one either (before taking this
        # save's turn, which is taken by the same thread).
        drop_thread(dest, interrupted)
    # What its manifest records, made here: the worker thread has not the task's context.
    record = cp._final_record()
    committed = threading.Event()
    turn = take(dest)
    try:

        def work() -> None:
            try:
                data = fn()
                if data is None:
                    result.append("skipped")
                    return
                result.append(cp._final_save(data, turn, scope, record, committed.set))
            except BaseException as exc:
                result.append(exc)
            finally:
                done.set()

        start_thread(work)
        if not _within(done, budget):
            if committed.is_set():  # only its manifest is left (one listing and two writes)
                _log_warnings(record.warnings)
                logger().warning(
                    "the final save to %s was committed, but its manifest was not written within the"
                    " %.2g s left of the grace budget (%s): fc.history lists it without one",
                    redact(dest),
                    budget,
                    GRACE_ENV,
                )
                return "done"
            scope.cancel()
            done.wait(ABORT_WAIT)
            raise TimeoutError(
                f"the final save to {redact(dest)} did not finish within the {budget:.2g} s left of the"
                f" grace budget ({GRACE_ENV}) and was cancelled: nothing was committed; give it more"
                " time, or save less at the end"
            )
    finally:
        turn.leave()
    _log_warnings(record.warnings)
    if isinstance(result[0], BaseException):
        raise result[0]
    if isinstance(result[0], tuple):
        log_transfer("saved", dest, *result[0])
        return "done"
    return str(result[0])


def _log_warnings(warnings: list[tuple[str, tuple[Any, ...]]] | None) -> None:
    """Log what the final save's worker kept instead of logging (in the handler's thread)."""
    for message, args in list(warnings or ()):
        logger().warning(message, *args)


__all__ = [
    "DEFAULT_GRACE",
    "GRACE_ENV",
    "Outcome",
    "Registration",
    "deferring",
    "forget",
    "grace_seconds",
    "install",
    "notice",
    "on_terminate",
    "preempt",
    "register",
    "registered",
    "terminate_entries",
    "wait_for_background",
]
