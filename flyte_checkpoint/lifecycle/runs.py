"""A local run's attempts on disk: resumed after the process dies, removed when it is done.

``@fc.task`` keeps attempt *k*'s checkpoint at ``{root}/{run}/{function}/{k}/_flytecheckpoints``.
**The same run** is the same ``run_name``, the same function name and the same root (the
``checkpoint_root`` argument, else ``$FLYTE_CHECKPOINT_ROOT``, else a temporary folder). A
call of a named run that already has attempts there (its process was killed: SIGKILL, out
of memory, Ctrl-C twice) goes on with the next attempt number, and its first attempt loads
the newest checkpoint any earlier attempt saved.

- Each attempt of a named run leaves a zero-byte marker, ``{k}/.attempt``, so numbering goes on
  after attempts that saved nothing.
- Every attempt resumes from the newest checkpoint any earlier attempt of the run committed:
  its source is the highest-numbered earlier attempt whose checkpoint exists and is not empty
  (an attempt that failed or was killed before its first save leaves none, and a zero-byte
  object is "no checkpoint" by the contract), found by size lookups from the attempt just
  before it downwards: one when that attempt saved. Attempt numbers give the order of the
  commits, since a run's attempts run one after another (one process at a time holds a named
  run on a local root; an attempt's background saves end, or are cancelled, before the next
  attempt starts). With no earlier checkpoint at all, the source is the attempt just before
  (which holds none: ``load()`` returns ``None``), as in Flyte.
- When a run succeeds, its attempts are removed, unless kept (``keep_checkpoints=True`` or
  ``$FLYTE_CHECKPOINT_KEEP_RUNS=1``); a named run that fails keeps it, to be resumed. A run
  without a ``run_name`` gets a random one, can never be resumed, and is removed however it
  ends (except by a kill).
- Two processes running one named run at once: on a local root the second is refused with
  :class:`~flyte_checkpoint.errors.RunInUseError` (a lock on ``{root}/{run}/.{function}.lock``,
  released by the system when its holder dies); a remote root has no lock, so give concurrent
  runs different names.
"""

from __future__ import annotations

import contextvars
import functools
import os
import re
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING

from ..errors import ConfigurationError, RunInUseError, StoreError
from ..uri import is_local, join, local_path, normalize, redact
from ..util.logs import logger

if TYPE_CHECKING:
    from ..taskcontext import TaskContext

MARKER = ".attempt"
KEEP_ENV = "FLYTE_CHECKPOINT_KEEP_RUNS"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")

ROOT_ENV = "FLYTE_CHECKPOINT_ROOT"
CHECKPOINT_NAME = "_flytecheckpoints"

#: The local runner's attempt running now (``fc.ctx()`` inside ``@task``); set by the runner.
current_attempt: contextvars.ContextVar[TaskContext | None] = contextvars.ContextVar(
    "flyte_checkpoint_task", default=None
)


def current_names() -> tuple[str, str] | None:
    """(run name, action name) of the local runner's task, if there is one that has them.

    Only the local runner's: ``Checkpoint`` uses these to repair a previous-attempt URI, and
    inside a Flyte task that repair is decided by the Flyte adapter instead (it must not
    undo a deliberate "resume from this attempt's own destination").
    """
    current = current_attempt.get()
    if current is not None and current.run_name and current.action_name:
        return current.run_name, current.action_name
    return None


def default_root() -> str:
    """Where the local runner keeps attempts' checkpoints: ``$FLYTE_CHECKPOINT_ROOT`` or a temp folder."""
    root = os.environ.get(ROOT_ENV, "").strip()
    if root:
        return normalize(root)
    import tempfile

    return os.path.join(tempfile.gettempdir(), "flyte-checkpoint-runs")


def keep_from_env() -> bool:
    """``$FLYTE_CHECKPOINT_KEEP_RUNS`` as a flag (unset: ``False``).

    Raises:
        ConfigurationError: the value is not one of 1/0, true/false, yes/no, on/off.
    """
    raw = os.environ.get(KEEP_ENV, "").strip()
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise ConfigurationError(
        f"{KEEP_ENV}={raw!r} is not valid: set it to 1 to keep a finished run's checkpoints, 0 to"
        " remove them (the default), or unset it"
    )


#: The longest file name (bytes, UTF-8) the common file systems take (ext4, XFS, APFS, NTFS's
#: 255 characters): a run's folder, and its lock file ``.{function}.lock``, must fit.
NAME_MAX = 255
_LOCK_AFFIXES = len(".") + len(".lock")


def check_run_name(name: str | None) -> None:
    """Refuse a ``run_name`` that is not one plain folder name: it names the run's folder under
    the root, which a finished run removes, so ``..`` or a ``/`` would reach outside the root;
    and a name longer than a file system takes would fail at every call.

    Raises:
        ConfigurationError: (a ``ValueError``) naming the value and what a run name may be.
    """
    if name is None or name == "":
        return  # no name: a random one
    if name.strip() != name or name in (".", "..") or any(c in name for c in "/\\\0"):
        raise ConfigurationError(
            f"run_name {name!r} is not a plain folder name: it names the run's folder under the"
            " checkpoint root (removed when the run finishes), so it may not contain '/' or '\\',"
            " be '.' or '..', or start or end with a space. Use letters, digits, '-', '_' and '.'"
        )
    _check_length("run_name", name, NAME_MAX, "the run's folder under the checkpoint root")


def check_function_name(name: str) -> None:
    """Refuse a function whose name cannot name a run's folder and lock file (``.{name}.lock``).

    Raises:
        ConfigurationError: (a ``ValueError``) naming the function and the limit.
    """
    _check_length("the function name", name, NAME_MAX - _LOCK_AFFIXES, "the folder of its runs' attempts")


def _check_length(what: str, name: str, limit: int, names: str) -> None:
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: no object store, and not every file system, takes it
        raise ConfigurationError(
            f"{what} {name[:40]!r}... cannot be written as UTF-8 (it holds a lone surrogate): it"
            f" names {names}; use letters, digits, '-', '_' and '.'"
        ) from None
    if size > limit:
        raise ConfigurationError(
            f"{what} {name[:40]!r}... is {size} bytes long (UTF-8), and it names {names}: file"
            f" systems take at most {NAME_MAX} bytes per name, so it may be at most {limit}; use"
            " a shorter one"
        )


class Run:
    """One call of a local task: its folder, lock and attempt numbers."""

    def __init__(self, root: str, run_name: str | None, action: str, *, keep: bool | None = None) -> None:
        self.root = root
        self.named = bool(run_name)
        self.name = run_name or f"run-{os.urandom(6).hex()}"
        self.action = action
        self.keep = keep_from_env() if keep is None else keep
        self.folder = join(root, self.name, action)
        self._lock: IO[bytes] | None = None
        #: Attempt numbers the earlier calls of this run used (ascending).
        self.earlier: list[int] = []
        self._first = 0

    def dest(self, attempt: int) -> str:
        return join(self.folder, str(attempt), CHECKPOINT_NAME)

    def open(self) -> None:
        """Lock the run (named runs on a local root) and find its earlier attempts.

        Raises:
            RunInUseError: another process holds the run.
        """
        if not self.named:
            return
        if is_local(self.root):
            self._lock = _lock_file(local_path(join(self.root, self.name, f".{self.action}.lock")), self)
        try:
            self.earlier = self._find_attempts()
            self._first = self.earlier[-1] + 1 if self.earlier else 0
        except BaseException:
            self.close(succeeded=False)  # releases the lock; a named run's attempts stay
            raise
        if self.earlier:
            logger().info(
                "run %s of %s: %d earlier attempt(s) found under %s; going on with attempt %d",
                self.name,
                self.action,
                len(self.earlier),
                redact(self.folder),
                self.earlier[-1] + 1,
            )

    @property
    def first(self) -> int:
        """The number of this call's first attempt."""
        return self._first

    def started(self, attempt: int) -> None:
        """Mark ``attempt`` as begun (named runs), so a later call numbers after it."""
        if self.named:
            from ..storage.registry import store_for

            marker = join(self.folder, str(attempt), MARKER)
            store_for(marker).write_bytes(marker, b"")
            self.earlier.append(attempt)

    def source(self, attempt: int) -> str | None:
        """What ``attempt`` loads: the checkpoint of the newest earlier attempt that holds one
        (see the module's doc), else the attempt just before it.

        Raises:
            OSError: a size lookup failed (after retries of transient errors): a failure is
                never taken for "no checkpoint there".
        """
        if attempt == 0:
            return None
        from ..storage.registry import store_for
        from ..util.retry import RetryPolicy

        policy = RetryPolicy.from_env()
        earlier = {n for n in (*self.earlier, *range(self.first, attempt)) if n < attempt}
        for n in sorted(earlier, reverse=True):
            uri = self.dest(n)
            store = store_for(uri)
            if policy.call(functools.partial(store.stat, uri), f"size of {redact(uri)}"):
                if n != attempt - 1:
                    logger().info(
                        "attempt %d of run %s resumes from attempt %d's checkpoint: the attempts"
                        " after it saved nothing",
                        attempt,
                        self.name,
                        n,
                    )
                return uri
        return self.dest(attempt - 1)

    def close(self, *, succeeded: bool) -> None:
        """Remove the run's checkpoints if it is done with them, and release its lock."""
        try:
            if not self.keep and (succeeded or not self.named):
                self._remove()
        finally:
            if self._lock is not None:
                self._lock.close()
                self._lock = None

    def _find_attempts(self) -> list[int]:
        from ..storage.registry import store_for

        prefix = self.folder.rstrip("/") + "/"
        numbers = set()
        for uri in store_for(prefix).list(prefix):
            first = uri[len(prefix) :].split("/", 1)[0] if uri.startswith(prefix) else ""
            if re.fullmatch(r"\d+", first):
                numbers.add(int(first))
        return sorted(numbers)

    def _remove(self) -> None:
        from ..storage.registry import store_for

        prefix = self.folder.rstrip("/") + "/"
        try:
            if is_local(self.folder):
                import shutil

                # A named run's lock file stays: removing it would let two processes lock two
                # different files of one name. One zero-byte file per name, not per call.
                shutil.rmtree(local_path(self.folder if self.named else join(self.root, self.name)), True)
                return
            store = store_for(prefix)
            for uri in list(store.list(prefix)):
                store.delete(uri)
        except OSError as exc:  # the run has ended: a leftover is worth a warning, not a failure
            logger().warning(
                "could not remove the finished run's checkpoints under %s: %s", redact(prefix), exc
            )


#: The lock file is opened, never followed or waited on: a FIFO there must not block the call.
_OPEN_LOCK = (
    os.O_RDONLY
    | os.O_CREAT
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def _lock_file(path, run: Run) -> IO[bytes]:
    """The run's lock file, open and locked.

    Raises:
        RunInUseError: another process (or call) holds it.
        StoreError: something other than a file is at ``path`` (a folder, a link, a FIFO...).
        ConfigurationError: the system has no ``fcntl`` (Windows).
    """
    import stat

    try:
        import fcntl
    except ImportError:  # Windows: no flock
        raise ConfigurationError(
            f"run {run.name!r} of {run.action} needs a lock on {path}, and this system has no"
            " fcntl (Windows): nothing was run. Run it on Linux or macOS, or give the task a"
            " remote checkpoint_root (s3://..., gs://..., abfs://...), which takes no lock"
        ) from None
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, _OPEN_LOCK, 0o644)
    except OSError as exc:
        kind = "a link" if os.path.islink(path) else "a folder" if os.path.isdir(path) else ""
        if not kind:
            raise
        raise _not_a_lock(path, kind, run) from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _not_a_lock(path, "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket", run)
    handle = os.fdopen(fd, "rb")  # held open for the whole run: the lock is on it
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise RunInUseError(
            f"run {run.name!r} of {run.action} is already running (another process, or another"
            f" call in this one, holds {path}): wait for it to end, or give this call another run_name"
        ) from None
    except BaseException:
        handle.close()
        raise
    return handle


def _not_a_lock(path, kind: str, run: Run) -> StoreError:
    return StoreError(
        f"{path} is {kind}, not the run's lock file (an empty file) of run {run.name!r} of"
        f" {run.action}: nothing was run. If no process runs it, remove it; the next call makes the file"
    )


def attempts(run: Run, retries: int) -> Iterator[tuple[int, str, str | None]]:
    """``(attempt number, destination, source)`` of each of this call's attempts."""
    for attempt in range(run.first, run.first + retries + 1):
        run.started(attempt)
        yield attempt, run.dest(attempt), run.source(attempt)


def base_of(root: str | None) -> str:
    """The root a run's folders are under: ``root`` if given, else :func:`default_root`."""
    return normalize(root) if root else default_root()


__all__ = ["KEEP_ENV", "Run", "attempts", "base_of", "keep_from_env"]
