"""Kill points: a child process stops at a point of a save that it reports, and is SIGKILLed there.

A crash test must not depend on how fast the machine is. So instead of killing a child
after some delay, the parent names a point; the child runs until it reaches that point,
prints ``AT <point>``, and waits there; the parent reads the line and sends SIGKILL. Where
the kill lands is then decided by the code's own progress, never by timing.

In the child (a script; see :data:`SAVE_SCRIPT` for the plain save)::

    from tests.reliability import killpoints
    killpoints.arm(dest)              # the point named by FCP_KILL_AT, on dest's store
    ...                               # the operation under test
    killpoints.reach("saved")         # any point of the script's own
    killpoints.done()

:func:`arm` routes the destination's scheme through a store that reports, for every
writer it opens:

- ``open``: the writer is open, nothing written (a local temporary file exists);
- ``bytes:N``: right after the write that brought what the store was given to N bytes
  or more (pick N at part boundaries to cover the whole upload);
- ``commit``: the commit is called, before the store's own commit starts;
- ``committed``: the store's commit has returned;
- ``delete`` and ``deleted``: before and after the store deletes an object (with
  :data:`DELETE_ENV` set to *n*, only at the *n*-th delete, counted from 1: a clean-up's
  steps);
- a write into a history sidecar (``X.fcp-history/``) is no writer here unless
  :data:`SIDECAR_ENV` is set (then its ``open``/``commit``/``committed`` count as any other's);
- on S3 also ``s3:commit-sent`` (the CompleteMultipartUpload or PutObject request is about
  to be sent) and ``s3:commit-answered`` (S3 has answered it; the store has not returned).

The thread that reaches the point stops there; others go on until they wait for it.
With :data:`WRITER_ENV` set to *n*, only the *n*-th writer opened (counted from 1) has
points, so a child making many saves is stopped inside the one chosen (the ``s3:`` points,
which are hooked on the client, are not counted per writer).

In the parent, :func:`kill_at` starts the script, waits for the point (or for the end,
when the point is never reached) and kills the child. Later crash tests (background,
incremental and sharded saves) reuse both halves with their own scripts and points.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from flyte_checkpoint.storage.blobstore import BlobStore, BlobWriter

#: The environment variable naming the point a child stops at.
ENV = "FCP_KILL_AT"
#: The environment variable naming which writer (1 = the first opened) has the points.
WRITER_ENV = "FCP_KILL_WRITER"
#: The environment variable naming which delete (1 = the first) has the points.
DELETE_ENV = "FCP_KILL_DELETE"
#: Set: the writes of the history's sidecar (``X.fcp-history/``: manifests, a clean-up's
#: markings) are writers with points too (by default they are neither counted nor stopped at).
SIDECAR_ENV = "FCP_KILL_SIDECARS"
ROOT = Path(__file__).resolve().parents[2]
#: Seconds a child may take to reach its point or finish before the test fails (a guard only).
HANG = float(os.environ.get("FCP_HANG", "120"))

#: A child that saves ``argv[2]`` (a path) to ``argv[1]`` with ``Checkpoint.save_sync``.
SAVE_SCRIPT = r"""
import sys
from tests.reliability import killpoints

dest, data = sys.argv[1], sys.argv[2]
killpoints.arm(dest)
import flyte_checkpoint as fc

fc.Checkpoint(dest).save_sync(data)
killpoints.reach("saved")
killpoints.done()
"""

# -- the child's half -------------------------------------------------------------------

_armed: str | None = None
_lock = threading.Lock()


def reach(point: str) -> None:
    """Report ``point`` and wait there to be killed, if it is the armed one (else return)."""
    global _armed
    with _lock:
        if point != _armed:
            return
        _armed = None  # each point is reached once
    sys.stdout.write(f"AT {point}\n")
    sys.stdout.flush()
    threading.Event().wait()  # until SIGKILL


def done() -> None:
    """Report that the script ran to its end without reaching the armed point."""
    sys.stdout.write("DONE\n")
    sys.stdout.flush()


def arm(uri: str) -> None:
    """Arm the point named by :data:`ENV` on the store of ``uri``'s scheme (nothing if unset)."""
    global _armed
    _armed = os.environ.get(ENV) or None
    if _armed is None:
        return
    from flyte_checkpoint.storage.registry import register_store, store_for
    from flyte_checkpoint.uri import scheme_of

    real = store_for(uri)
    register_store("killpoints", (scheme_of(uri),), lambda: _PointStore(real), priority=100)
    if _armed.startswith("s3:"):
        events = getattr(real, "inner", real).client.get().meta.events
        for op in ("CompleteMultipartUpload", "PutObject"):
            events.register(f"before-send.s3.{op}", lambda **_: reach("s3:commit-sent"))
            events.register(f"after-call.s3.{op}", lambda **_: reach("s3:commit-answered"))


class _PointWriter(BlobWriter):
    def __init__(self, inner: BlobWriter) -> None:
        super().__init__(inner.uri)
        self._inner = inner
        self._given = 0

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        self._inner.write(data)
        before, self._given = self._given, self._given + len(data)
        armed = _armed
        if armed is not None and armed.startswith("bytes:") and before < int(armed[6:]) <= self._given:
            reach(armed)

    def _commit(self) -> None:
        reach("commit")
        self._inner.close()
        reach("committed")

    def _abort(self) -> None:
        self._inner.abort()


class _PointStore(BlobStore):
    def __init__(self, inner: BlobStore) -> None:
        self.inner = inner
        self.only = int(os.environ.get(WRITER_ENV) or 0)  # 0: every writer
        self.opened = 0
        self.only_delete = int(os.environ.get(DELETE_ENV) or 0)  # 0: every delete
        self.sidecars = bool(os.environ.get(SIDECAR_ENV))  # count the history's writes too
        self.deletes = 0
        self.lock = threading.Lock()

    def open_write(self, uri: str) -> BlobWriter:
        if ".fcp-history/" in uri and not self.sidecars:  # a save's manifest, after its commit:
            return self.inner.open_write(uri)  # not a writer counted here (unless SIDECAR_ENV)
        with self.lock:
            self.opened += 1
            chosen = self.only in (0, self.opened)
        if not chosen:
            return self.inner.open_write(uri)
        writer = _PointWriter(self.inner.open_write(uri))
        reach("open")
        return writer

    def open_read(self, uri: str) -> BinaryIO:
        return self.inner.open_read(uri)

    def stat(self, uri: str) -> int | None:
        return self.inner.stat(uri)

    def delete(self, uri: str) -> None:
        with self.lock:
            self.deletes += 1
            chosen = self.only_delete in (0, self.deletes)
        if chosen:
            reach("delete")
        self.inner.delete(uri)
        if chosen:
            reach("deleted")

    def list(self, prefix: str) -> Iterator[str]:
        return self.inner.list(prefix)


# -- the parent's half ------------------------------------------------------------------


@dataclass(frozen=True)
class Kill:
    """What happened to one child."""

    point: str
    reached: bool  # it reported the point and was SIGKILLed there
    finished: bool  # it ran to its end (the point was never reached)


def kill_at(point: str, script: str, args: Sequence[str], env: dict[str, str], log: Path) -> Kill:
    """Run ``script`` with ``args`` until it reports ``point``, then SIGKILL it.

    ``env`` is the child's whole environment (``ENV`` and ``PYTHONPATH`` are added); its
    stderr goes to ``log``. Fails the test if the child neither reaches the point nor ends
    within :data:`HANG` seconds, or prints a traceback.
    """
    env = {**env, ENV: point, "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])}
    with open(log, "ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, stderr=err, env=env, cwd=ROOT
        )
    assert proc.stdout is not None
    try:
        line = _read_line(proc.stdout, HANG)
        reached = line == f"AT {point}"
        if reached:
            proc.send_signal(signal.SIGKILL)
        elif line != "DONE":
            raise AssertionError(
                f"the child neither reached {point!r} nor finished (it said {line!r}); stderr:\n"
                + log.read_text()[-3000:]
            )
        proc.wait(HANG)
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
        return Kill(point, reached, not reached)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def _read_line(stream: BinaryIO, timeout: float) -> str:
    ready, _, _ = select.select([stream], [], [], timeout)
    return stream.readline().decode().strip() if ready else ""
