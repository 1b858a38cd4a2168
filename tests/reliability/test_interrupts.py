"""Interrupts: a ``KeyboardInterrupt`` landing anywhere in a save or a load leaves nothing behind.

A profile hook on the main thread (where Ctrl-C lands) counts the points of a save or a
load where an interrupt can land in this project's code (the core and the plugins; see
:class:`InterruptHook`) and raises ``KeyboardInterrupt`` at a chosen one. Points come from
a first, counting run: the first time each distinct site is reached (every site at least
once), and every one of the last :data:`TAIL` points (where ``close()``, the commit and the
cleanup run, loops included). The cloud backends take an even stride of those
(``FCP_INTERRUPT_POINTS`` per operation; ``0`` runs them all).

After each interrupted operation (and garbage collection, see ``assert_nothing_left``):
- every ``fcp-*`` thread (pipeline threads, plugins' per-transfer pools) ends;
- the save's turn for its destination is given back (``saveorder.waiting`` is 0);
- no upload is left open: S3 lists no multipart upload, the file store no temporary file;
- a loaded ``Checkpoint`` holds no staging folder, a later load with it works and its
  ``close()`` removes the workspace;
and once all runs are done the destination loads as one of the trees saved, whole.
Run with ``-s`` for one summary line per backend and operation.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import flyte_checkpoint as fc
from flyte_checkpoint.lifecycle import saveorder
from tests.reliability import backends
from tests.reliability.backends import Backend, s3_open_uploads
from tests.reliability.gates import HANG
from tests.reliability.trees import loaded, make_tree, snapshot

backend = backends.backend
backend_pool = backends.backend_pool

#: Points per operation on a cloud backend (0: every point, as on the file backend).
CLOUD_POINTS = int(os.environ.get("FCP_INTERRUPT_POINTS", "40"))
#: Every one of this many last points of an operation is one.
TAIL = 120
#: Where our code lives: the core and the plugins (not the tests, not the standard library).
_OURS = tuple(
    os.path.dirname(importlib.import_module(name).__file__ or "") + os.sep
    for name in ("flyte_checkpoint", "flyte_checkpoint_s3", "flyte_checkpoint_gcs", "flyte_checkpoint_azure")
)


class InterruptHook:
    """Counts the points where a Ctrl-C can land in our code; raises KeyboardInterrupt at one.

    A profile hook (``sys.setprofile``) on the main thread sees each call of a function of
    ours (``"call"``: where the interpreter checks for a pending signal as the function
    starts) and each return from a built-in called by our code (``"c_return"``: where it
    checks after every call, which is where a Ctrl-C that arrived during a blocking call,
    such as a lock or queue wait, a read or a write, is raised). An exception raised by the
    hook there goes through exactly the handlers a real interrupt would. (A line hook would
    raise at points a real interrupt never reaches, such as the NOP of a ``try:`` line, which
    CPython 3.11's exception tables leave uncovered.) Calls of ``__del__`` are no points:
    Python reports any exception there as "ignored", whatever the code does.

    ``at`` is ``("count", n)`` (the n-th point) or ``("site", key)`` (the first time a site
    is reached: a function of ours starting, or a built-in returning to a line of ours).
    """

    def __init__(self, at: tuple[str, Any] | None = None) -> None:
        self.at = at
        self.count = 0
        self.first: dict[tuple[str, int, str], int] = {}
        self.fired: str | None = None

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        code = frame.f_code
        if event not in ("call", "c_return") or code.co_name == "__del__":
            return
        if not code.co_filename.startswith(_OURS):
            return
        if event == "call":
            key = (code.co_filename, code.co_firstlineno, code.co_name)
        else:
            key = (code.co_filename, frame.f_lineno, getattr(arg, "__name__", "?"))
        self.count += 1
        new = key not in self.first
        if new:
            self.first[key] = self.count
        at = self.at
        if at is not None and (at == ("count", self.count) or (new and at == ("site", key))):
            self.fired = f"{Path(key[0]).name}:{key[1]} {event} {key[2]}"
            raise KeyboardInterrupt(f"interrupt at {self.fired}")  # profiling stops here

    def run(self, operation: Callable[[], object]) -> bool:
        """Run ``operation`` under the hook; True if the interrupt came out of it."""
        sys.setprofile(self._profile)
        try:
            operation()
        except KeyboardInterrupt:
            return True
        finally:
            sys.setprofile(None)
        return False


def points(calibration: InterruptHook, budget: int) -> list[tuple[str, Any]]:
    """Where to interrupt: each distinct site's first time, and each of the last TAIL points."""
    firsts = [("site", key) for key, _ in sorted(calibration.first.items(), key=lambda kv: kv[1])]
    tail = [("count", n) for n in range(max(1, calibration.count - TAIL + 1), calibration.count + 1)]
    if budget:
        firsts = firsts[:: max(1, len(firsts) // (budget * 2 // 3))]
        tail = tail[:: max(1, len(tail) // (budget // 3))]
    return firsts + tail


def in_thread(fn: Callable[[], Any], where: str) -> Any:
    """``fn()`` in another thread (so a stuck lock fails after HANG, with its stack)."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join(HANG)
    if thread.is_alive():
        stack = "".join(traceback.format_stack(sys._current_frames()[thread.ident]))  # type: ignore[index]
        raise AssertionError(f"{where}: {fn} did not return; it is at:\n{stack}")
    assert out, f"{where}: {fn} failed"
    return out[0]


def settle(done: Callable[[], bool]) -> bool:
    """Whether ``done()`` holds, running the garbage collector until it does (HANG: a guard).

    An interrupt as a ``close()`` or an ``__exit__`` starts (before its first step) leaves
    the pipeline or the writer to be stopped, or aborted, when collected. The save's frames
    and futures hold them in reference cycles, and a part still uploading holds its writer
    until it is sent, so the collector is run again (as a program's would be) until then.
    """
    for _ in range(int(HANG / 0.05)):
        if done():
            return True
        gc.collect()
        threading.Event().wait(0.05)
    return done()


def leftovers(backend: Backend, dest: str) -> list[object]:
    """What an unfinished save left: S3 multipart uploads, the file store's temporary files."""
    if backend.name == "s3":
        return list(s3_open_uploads(backend, dest))
    if backend.name == "file":
        return list(Path(dest).parent.glob(".fcp-tmp-*"))
    return []


def assert_nothing_left(what: str) -> None:
    """Every ``fcp-*`` thread ends."""
    for thread in [t for t in threading.enumerate() if t.name.startswith("fcp-")]:
        assert settle(lambda t=thread: not t.is_alive()), f"{what}: the thread {thread.name} did not end"


def test_an_interrupted_save_leaves_no_thread_no_upload_and_no_turn(backend: Backend, tmp_path: Path):
    """Proves (issue 14, item 12): a KeyboardInterrupt at any line a save runs in the main
    thread leaves no pipeline or plugin thread, no open multipart upload or temporary file,
    and no turn in the destination's line; the destination holds a whole tree."""
    dest = backend.fresh("interrupted")
    trees = {v: make_tree(tmp_path / f"v{v}", v) for v in (0, 1)}
    fc.Checkpoint(dest).save_sync(tmp_path / "v0")
    calibration = InterruptHook()
    assert not calibration.run(lambda: fc.Checkpoint(dest).save_sync(tmp_path / "v1"))
    chosen = points(calibration, 0 if backend.name == "file" else CLOUD_POINTS)
    delivered = 0
    for i, at in enumerate(chosen):
        hook = InterruptHook(at)
        if hook.run(lambda i=i: fc.Checkpoint(dest).save_sync(tmp_path / f"v{i % 2}")):
            delivered += 1
        where = f"save interrupted at {hook.fired}"
        assert_nothing_left(where)
        assert settle(lambda: saveorder.waiting(dest) == 0), f"{where}: its turn was never given back"
        assert settle(lambda: not leftovers(backend, dest)), f"{where}: {leftovers(backend, dest)} left"
    assert loaded(dest, tmp_path) in trees.values()
    print(
        f"\ninterrupts[{backend.name}] save: {len(chosen)} points ({calibration.count} in all,"
        f" {len(calibration.first)} distinct sites), {delivered} interrupts delivered; nothing left"
    )
    assert delivered >= 0.8 * len(chosen)


def test_an_interrupted_load_leaves_no_thread_and_no_staging_folder(backend: Backend, tmp_path: Path):
    """Proves (issue 14, item 12): a KeyboardInterrupt at any line a load runs in the main
    thread leaves no read-ahead or plugin thread and no staging folder; the same
    ``Checkpoint`` then loads the whole tree and its ``close()`` removes the workspace."""
    src = backend.fresh("source")
    want = make_tree(tmp_path / "tree", 1)
    fc.Checkpoint(src).save_sync(tmp_path / "tree")
    calibration = InterruptHook()
    with fc.Checkpoint(str(tmp_path / "unused"), src) as cp:
        assert not calibration.run(cp.load_sync)
    chosen = points(calibration, 0 if backend.name == "file" else CLOUD_POINTS)
    delivered = 0
    for at in chosen:
        cp = fc.Checkpoint(str(tmp_path / "unused"), src)
        hook = InterruptHook(at)
        delivered += hook.run(cp.load_sync)
        where = f"load interrupted at {hook.fired}"
        assert_nothing_left(where)
        root = cp.path.parent
        assert not list(root.glob(".restore-*")), f"{where}: a staging folder is left"
        path = in_thread(cp.load_sync, where)
        assert path is not None, f"{where}: the checkpoint could not load again"
        assert snapshot(path) == want, where
        cp.close()
        assert not root.exists(), f"{where}: close() left the workspace"
    print(
        f"\ninterrupts[{backend.name}] load: {len(chosen)} points ({calibration.count} in all,"
        f" {len(calibration.first)} distinct sites), {delivered} interrupts delivered; nothing left"
    )
    assert delivered >= 0.8 * len(chosen)
