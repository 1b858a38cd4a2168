"""The crash suite: a process SIGKILLed mid-save leaves the previous object whole.

Mix :class:`CrashSuite` into a test class that provides ``store_recipe`` (a picklable
:class:`~flyte_checkpoint.testing.recipe.StoreRecipe`) and ``store_root``. A child process
builds the store from the recipe and saves an object of several parts over an existing one;
it is killed in the middle of the save, at a point decided by the save's own progress:

- a store with a server (``upstream`` set): the child talks to the server through a
  :class:`~flyte_checkpoint.testing.faultproxy.FaultProxy` that stops forwarding the upload
  once all but one part of it has reached the server, and reports that it did; the child,
  stuck mid-upload (in a part or in the commit's upload of a store that sends the whole
  object then), is killed on that report. A server that writes an object in place as its
  bytes arrive is caught here;
- a store with no server (a file system): the child reports having written all but one part
  to its writer and waits; it is killed on that report.

Then the object must be the previous one, byte for byte, with no other object under the
prefix. Nothing waits on time: the deadlines are hang guards.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from ..uri import join
from .faultproxy import HANG_GUARD, FaultProxy
from .recipe import StoreRecipe, part_of
from .suite import _data, check_empty_root

#: The child: ``python -c CHILD <spec file>``.
CHILD = "import sys; from flyte_checkpoint.testing.crash import child_main; child_main(sys.argv[1])"
#: What a child without a server prints once all but one part is written (then it waits).
REPORT = "WROTE"
WRITE_CHUNK = 64 * 1024


def child_main(spec_path: str) -> None:
    """The child's side: build the store, save the object, report, (and with no proxy) wait."""
    with open(spec_path, "rb") as f:
        recipe, endpoint, uri, size, report_at = pickle.load(f)
    store = recipe.build(endpoint)
    data = _data(size, seed=3)
    with store.open_write(uri) as w:
        for i in range(0, size, WRITE_CHUNK):
            w.write(data[i : i + WRITE_CHUNK])
            if report_at is not None and i + WRITE_CHUNK >= report_at:
                print(REPORT, flush=True)
                threading.Event().wait()  # until SIGKILL
    print("DONE", flush=True)


class CrashSuite:
    """A save killed midway (SIGKILL: no abort runs) leaves the previous object whole.

    ``crash_parts``: the object's size in parts (``store.part_size``, or 256 KiB).
    """

    crash_parts: int = 4

    def test_killed_save_leaves_the_previous_object_whole(
        self, store_recipe: StoreRecipe, store_root: str, tmp_path: Path
    ) -> None:
        """A child saving over an object is SIGKILLed with all but one part sent (or, for a
        store with no server, written); the object is still the previous one, whole, and no
        other object appears under the prefix."""
        direct = store_recipe.direct()
        try:
            if direct.supports_list:
                check_empty_root(direct, store_root)
            uri = join(store_root, "killed")
            previous = _data(100_000, seed=1)
            direct.write_bytes(uri, previous)
            part = part_of(direct)
            size = self.crash_parts * part + part // 2
            _kill_mid_save(store_recipe, uri, size, size - part, tmp_path)
            held = direct.stat(uri)
            assert held == len(previous) and direct.read_bytes(uri) == previous, (
                f"promise broken: a save killed midway leaves the previous object whole; {uri} holds"
                f" {held} bytes, not the previous {len(previous)} (the object is written in place,"
                " on the server or by the writer: it must appear only, whole, at the commit)"
            )
            if direct.supports_list:
                listed = list(direct.list(store_root))
                assert listed == [uri], (
                    f"promise broken: a killed save leaves no partial object; listed {listed}"
                )
        finally:
            direct.close()


def _kill_mid_save(recipe: StoreRecipe, uri: str, size: int, cut: int, tmp_path: Path) -> None:
    spec = tmp_path / "crash-child.pickle"
    log = tmp_path / "crash-child.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    recipe = dataclasses.replace(recipe, injector=None)  # the child injects no fault (and it may not pickle)
    if recipe.upstream is None:
        spec.write_bytes(pickle.dumps((recipe, None, uri, size, cut)))
        with open(log, "wb") as err:
            child = subprocess.Popen(
                [sys.executable, "-c", CHILD, str(spec)], stdout=subprocess.PIPE, stderr=err, env=env
            )
        try:
            assert child.stdout is not None, "setup: the child has no stdout pipe"
            said = _line(child.stdout)
            assert said == REPORT, (
                f"setup: the child never reported its progress (it said {said!r}): {_tail(log)}"
            )
        finally:
            _kill(child)
        return
    with FaultProxy(recipe.upstream) as proxy:
        proxy.cut("up", cut, action="stall")
        spec.write_bytes(pickle.dumps((recipe, proxy.url, uri, size, None)))
        with open(log, "wb") as err:
            child = subprocess.Popen(
                [sys.executable, "-c", CHILD, str(spec)], stdout=subprocess.PIPE, stderr=err, env=env
            )
        try:
            proxy.wait_for(
                lambda: proxy.fired > 0 or child.poll() is not None,
                what=f"the upload stalled after {cut} bytes",
            )
            assert proxy.fired, f"setup: the child ended before its upload reached {cut} bytes: {_tail(log)}"
        finally:
            _kill(child)
        proxy.wait_for(
            lambda: all(r.closed for r in proxy.records), what="the killed child's connections closed"
        )


def _kill(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGKILL)
    child.wait(HANG_GUARD)
    if child.stdout is not None:
        child.stdout.close()


def _line(stream: IO[bytes]) -> str:
    ready, _, _ = select.select([stream], [], [], HANG_GUARD)
    return stream.readline().decode().strip() if ready else ""


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]
