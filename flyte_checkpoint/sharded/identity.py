"""Who is saving: the job, which of its saves, and the process (see :mod:`.coordinate`).

A sharded save's session names all three, and every rank's report names them back, so that a
rank joins only the save of its own call (issue 32: ranks of another job, or a rank still in an
earlier save, once joined any session they had not seen).

- **The job**: ``job=``, else ``$FLYTE_CHECKPOINT_JOB``, else the first the launcher set of
  :data:`JOB_SOURCES` (torchrun's run id, Slurm's job id, Flyte's run and action, the
  rendezvous address and port), else none: jobs without a name cannot be told apart (docs/sharded.md).
- **The save**: ``step=``, else the count of this process's ``save_sharded`` calls for that
  destination, rank and job (the n-th call of every rank is one save, as collectives match).
- **The process**: host, pid, PID namespace and start time, so that a session whose leader
  is provably gone (same host and namespace, that process no longer there) is taken over at
  once instead of after its lease.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Collection
from typing import Any

from ..errors import ConfigurationError

JOB_ENV = "FLYTE_CHECKPOINT_JOB"
LEASE_ENV = "FLYTE_CHECKPOINT_SHARD_LEASE"
#: How long a session is held without its leader renewing it (renewed every third of it).
DEFAULT_LEASE = 30.0

#: Variables that name a job, looked at in this order: each a tuple of variables that must all
#: be set (their values joined by "/"), and the label that goes before them.
JOB_SOURCES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("TORCHELASTIC_RUN_ID",), "torchrun"),
    (("SLURM_JOB_ID",), "slurm"),
    (("RUN_NAME", "ACTION_NAME"), "flyte"),
    (("MASTER_ADDR", "MASTER_PORT"), "rendezvous"),
)
#: Rendezvous addresses that name no host: jobs on two machines may both use one, so this
#: machine's name is added (one machine's port serves one job at a time).
LOOPBACK = ("localhost", "127.0.0.1", "::1", "0.0.0.0")

Save = dict[str, Any]
Process = dict[str, Any]

_calls: dict[tuple[str, int, str | None], int] = {}
_calls_lock = threading.Lock()


def job_identity(job: str | None = None) -> str | None:
    """The job's name (see the module docstring), or None when nothing names it.

    Raises:
        ConfigurationError: ``job`` is given but is not a non-blank string.
    """
    if job is not None:
        if not isinstance(job, str) or not job.strip():
            raise ConfigurationError(f"job={job!r}: give save_sharded a non-blank string that names the job")
        return job.strip()
    mine = os.environ.get(JOB_ENV, "").strip()
    if mine:
        return mine
    for names, label in JOB_SOURCES:
        values = [os.environ.get(name, "").strip() for name in names]
        # torchrun's --rdzv-id defaults to "none": every job would share that name.
        if all(values) and values != ["none"]:
            if label == "rendezvous" and values[0] in LOOPBACK:
                values.insert(0, socket.gethostname())
            return f"{label}:{'/'.join(values)}"
    return None


def next_save(dest: str, rank: int, job: str | None, step: int | None) -> Save:
    """Which save this call is: ``{"by": "step", "n": step}``, or the count of this process's
    calls for ``dest``, ``rank`` and ``job`` (``{"by": "call", "n": count}``, from 1).

    Raises:
        ConfigurationError: ``step`` is not a whole number of 0 or more.
    """
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ConfigurationError(f"step={step!r}: give save_sharded a whole number of 0 or more")
        return {"by": "step", "n": step}
    with _calls_lock:
        key = (dest, rank, job)
        _calls[key] = _calls.get(key, 0) + 1
        return {"by": "call", "n": _calls[key]}


def forget_saves(dest: str | None = None, jobs: Collection[str | None] | None = None) -> None:
    """Count the saves to ``dest`` (default: every destination) of ``jobs`` (default: every
    job) from 1 again, as a restarted process does (for tests that restart a job in-process)."""
    with _calls_lock:
        for key in [k for k in _calls if (dest is None or k[0] == dest) and (jobs is None or k[2] in jobs)]:
            del _calls[key]


def describe_save(save: Save) -> str:
    """``save #3`` (the third call) or ``step 1200`` (``step=1200``)."""
    return f"step {save.get('n')}" if save.get("by") == "step" else f"save #{save.get('n')}"


def describe_job(job: str | None) -> str:
    return f"job {job!r}" if job is not None else "a job with no name"


def this_process() -> Process:
    """Where this process runs: host, pid, PID namespace and start time (where /proc has them)."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "pidns": _pid_namespace(),
        "start": _start("self"),
    }


def describe_process(process: Any) -> str:
    if not isinstance(process, dict):
        return "an unknown host"
    return f"host {process.get('host')} (pid {process.get('pid')})"


def gone(process: Any) -> bool:
    """Whether ``process`` (a session's leader) provably no longer runs: it ran on this host in
    this PID namespace and its pid is free, a zombie, or another process's (a different start
    time)."""
    if not isinstance(process, dict):
        return False
    if process.get("host") != socket.gethostname() or process.get("pidns") != _pid_namespace():
        return False  # elsewhere: only its lease tells
    pid = process.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    if pid == os.getpid():
        return False  # this process (another thread's save): it runs
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # another user's process: it runs
    start = _start(str(pid))
    if start is None:
        return False
    return start == "Z" or (process.get("start") is not None and start != process.get("start"))


def lease_seconds() -> float:
    """``$FLYTE_CHECKPOINT_SHARD_LEASE`` (``30``, ``30s``, ``1m``), else 30 s.

    Raises:
        ConfigurationError: the variable is not a duration of more than 0 (the message names it).
    """
    raw = os.environ.get(LEASE_ENV, "").strip()
    if not raw:
        return DEFAULT_LEASE
    from ..storage.kit.settings import SECONDS, parse

    value = float(parse(SECONDS, raw, name="shard_lease", source=LEASE_ENV, example="30s"))
    if value <= 0:
        raise ConfigurationError(f"{LEASE_ENV}={raw!r}: give a duration of more than 0, such as 30s")
    return value


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _start(pid: str) -> str | None:
    """The process's start time in clock ticks since boot ("Z" for a zombie), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # the command name may hold spaces and ")"
    if len(fields) < 20:
        return None
    return "Z" if fields[0] == "Z" else fields[19]


class Caller:
    """One rank's call of ``save_sharded``: who calls, and which save it means."""

    def __init__(self, rank: int, world: int, job: str | None, save: Save) -> None:
        import secrets

        self.rank = rank
        self.world = world
        self.job = job
        self.save = save
        #: Tells this call's report from another process's for the same rank (two jobs at once).
        self.joiner = secrets.token_hex(8)
        self.process = this_process()

    def stamp(self) -> dict[str, Any]:
        """What a session (on rank 0) or a report carries of the call."""
        return {
            "rank": self.rank,
            "world": self.world,
            "job": self.job,
            "save": self.save,
            "joiner": self.joiner,
            "process": self.process,
        }

    def mismatch(self, session: dict[str, Any]) -> str | None:
        """Why this call cannot take part in rank 0's ``session`` (None when it can)."""
        if session.get("world") != self.world:
            return (
                f"rank {self.rank} was started with WORLD_SIZE={self.world}, rank 0 with"
                f" {session.get('world')}: every rank of a job needs the same world size"
            )
        theirs = session.get("save") or {}
        if theirs != self.save:
            return out_of_step(theirs, self.save)
        return None


def out_of_step(leader: Save, mine: Save) -> str:
    """Why a rank cannot join rank 0's save ``leader`` in its call for save ``mine``."""
    text = (
        f"rank 0 is at {describe_save(leader)}, this rank at {describe_save(mine)}: the ranks are out of step"
    )
    if leader.get("by") != mine.get("by"):
        return text + " (give step= to save_sharded on every rank, or on none)"
    return text + (
        " (a rank's earlier save_sharded call failed or timed out while the others went on)."
        " Call save_sharded for the same save on every rank; step= names a save explicitly"
    )
