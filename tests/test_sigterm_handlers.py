"""A SIGTERM handler set after ours (flyte_checkpoint.lifecycle.preemption, .handlerchain).

Frameworks and users set SIGTERM handlers of their own after ours was installed (Flyte's
tracked local runs, an asyncio loop's ``add_signal_handler``, PyTorch Lightning's composed
handler, a plain ``signal.signal``). One that does not call ours silently disabled every final
save, while the registrations still said ``active``. Now ours is installed again in front of it
where the main thread can, and a WARNING says so; where it cannot (a registration from
another thread), a WARNING says the final saves will not run, and ``active`` is ``False``.

In this process the signal is raised with ``signal.raise_signal`` (as in test_preemption),
with a recording handler as "the handler found first", so the test process never ends.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import flyte_checkpoint as fc
from conftest import require
from flyte_checkpoint.lifecycle import preemption
from tests.childlines import HANG, Child
from tests.test_preemption import previous_handler  # noqa: F401 - a fixture

ROOT = Path(__file__).resolve().parents[1]


class Records(logging.Handler):
    """The project's log lines at INFO and above while in a ``with`` block (the logger's level
    lowered to INFO meanwhile); ``seen`` is set by a line containing ``wait_for``."""

    def __init__(self, wait_for: str = "\0") -> None:
        super().__init__(logging.INFO)
        self.lines: list[tuple[int, str]] = []
        self.wait_for = wait_for
        self.seen = threading.Event()
        self._log = logging.getLogger("flyte_checkpoint")
        self._level = self._log.level

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        self.lines.append((record.levelno, message))
        if self.wait_for in message:
            self.seen.set()

    def warnings(self, part: str) -> list[str]:
        return [m for level, m in self.lines if level == logging.WARNING and part in m]

    def __enter__(self) -> Records:
        self._level = self._log.level
        self._log.addHandler(self)
        self._log.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc: object) -> None:
        self._log.removeHandler(self)
        self._log.setLevel(self._level)


@pytest.fixture
def records():
    with Records("SIGTERM came") as handler:
        yield handler


def later_handler(calls: list[str], name: str = "later") -> Any:
    """A handler set after ours that does not call the one it found."""

    def set_later(signum: int, frame: Any) -> None:
        calls.append(name)

    return set_later


def test_a_handler_set_after_ours_is_noticed_at_the_next_registration_and_ours_goes_in_front(
    previous_handler,  # noqa: F811
    records,
    tmp_path,
):
    """Proves (issue 32, item 13): a handler set after ours, not calling it, no longer disables
    the final saves: the next registration (main thread) installs ours in front of it, with a
    WARNING naming it; on SIGTERM both saves run, then that handler, as it would have alone."""
    cp = fc.Checkpoint(str(tmp_path / "ckpt"))
    calls: list[str] = []
    first = cp.on_terminate(lambda: calls.append("first save") or b"1")
    signal.signal(signal.SIGTERM, later_handler(calls))
    second = cp.on_terminate(lambda: calls.append("second save") or b"2")
    assert signal.getsignal(signal.SIGTERM) is preemption._handle
    assert first.active and second.active
    [warning] = records.warnings("SIGTERM's handler was replaced")
    assert (
        "by tests.test_sigterm_handlers.later_handler.<locals>.set_later, which does not call it" in warning
    )
    assert "Ours is installed again in front of it: on SIGTERM the final saves run, then" in warning
    signal.raise_signal(signal.SIGTERM)
    assert calls == ["first save", "second save", "later"]
    assert previous_handler == []  # the later handler did not call the one it found: nor do we
    assert (tmp_path / "ckpt").read_bytes() == b"2"


def test_a_save_of_the_main_thread_puts_ours_in_front_again(previous_handler, records, tmp_path):  # noqa: F811
    """Proves: a handler set after the last registration is noticed when the main thread
    saves (or loads), the regular saves of a training loop; the WARNING comes once, and a
    second replacement is said at INFO."""
    cp = fc.Checkpoint(str(tmp_path / "ckpt"))
    calls: list[str] = []
    cp.on_terminate(lambda: calls.append("save") or b"final")
    for n in range(2):
        signal.signal(signal.SIGTERM, later_handler(calls, f"later {n}"))
        cp.save_sync(b"regular")
        assert signal.getsignal(signal.SIGTERM) is preemption._handle, n
    assert len(records.warnings("SIGTERM's handler was replaced")) == 1
    assert sum("SIGTERM's handler was replaced" in m for _, m in records.lines) == 2
    signal.raise_signal(signal.SIGTERM)
    # The newest handler, which replaced the older one and calls none: as without ours.
    assert calls == ["save", "later 1"] and previous_handler == []


def _calls_in_the_main_thread(cp: fc.Checkpoint, tmp_path: Path) -> dict[str, Any]:
    """Each save or load of the API other than save_sync, load_sync and save_background, as the
    main thread makes it: the async ones through an event loop in this thread."""
    return {
        "await save": lambda: asyncio.run(cp.save(b"regular")),
        "await load": lambda: asyncio.run(cp.load()),
        "await load(members)": lambda: asyncio.run(cp.load(members=["a.bin"])),
        "await load_file": lambda: asyncio.run(cp.load_file("a.bin", tmp_path / "out1.bin")),
        "load_file_sync": lambda: cp.load_file_sync("a.bin", tmp_path / "out2.bin"),
        "await save_background_async": lambda: asyncio.run(cp.save_background_async(b"regular")).result(),
    }


@pytest.mark.parametrize(
    "call",
    [
        "await save",
        "await load",
        "await load(members)",
        "await load_file",
        "load_file_sync",
        "await save_background_async",
    ],
)
def test_every_save_or_load_of_the_main_thread_puts_ours_in_front_again(
    call,
    previous_handler,  # noqa: F811
    records,
    tmp_path,
):
    """Proves: a handler set after ours (an asyncio loop's, in async code) was noticed by
    ``save_sync``, ``load_sync`` and ``save_background`` only: a program that saved and loaded
    with ``await cp.save()``/``await cp.load()`` (or ``load_file``) kept the later handler,
    and SIGTERM silently ran no final save. Every save and load made by the main thread now
    puts ours in front (the async ones when they are called, before their worker runs)."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.bin").write_bytes(b"a" * 1000)
    fc.Checkpoint(str(tmp_path / "prev")).save_sync(str(tmp_path / "src"))
    cp = fc.Checkpoint(str(tmp_path / "ckpt"), str(tmp_path / "prev"))
    calls: list[str] = []
    cp.on_terminate(lambda: calls.append("save") or b"final")
    signal.signal(signal.SIGTERM, later_handler(calls))
    _calls_in_the_main_thread(cp, tmp_path)[call]()
    assert signal.getsignal(signal.SIGTERM) is preemption._handle
    assert len(records.warnings("SIGTERM's handler was replaced")) == 1
    cp.wait()
    signal.raise_signal(signal.SIGTERM)
    assert calls == ["save", "later"] and previous_handler == []
    assert (tmp_path / "ckpt").read_bytes() == b"final"


_FOUND: list[Any] = []


def calls_what_it_found_through_a_global(signum: int, frame: Any) -> None:
    """A later handler keeping the one it found where :func:`reaches` does not look (a global)."""
    _FOUND[0](signum, frame)
    _FOUND.append("later")


def test_a_later_handler_that_calls_ours_again_goes_on_down_the_chain_once(previous_handler, tmp_path):  # noqa: F811
    """Proves: ours installed in front of a later handler that calls the one it found (ours) is
    called again from inside its own chain: the chain goes on below, every handler runs once,
    and the handler found first comes last (no loop, no second save)."""
    cp = fc.Checkpoint(str(tmp_path / "ckpt"))
    saves: list[int] = []
    cp.on_terminate(lambda: saves.append(1) or b"x")
    _FOUND[:] = [signal.signal(signal.SIGTERM, calls_what_it_found_through_a_global)]
    try:
        assert _FOUND[0] is preemption._handle
        cp.on_terminate(lambda: None)  # noticed: ours goes in front of it
        assert signal.getsignal(signal.SIGTERM) is preemption._handle
        signal.raise_signal(signal.SIGTERM)
        assert saves == [1] and _FOUND[1:] == ["later"] and previous_handler == [signal.SIGTERM]
        signal.raise_signal(signal.SIGTERM)  # a later SIGTERM only chains, the same way
        assert saves == [1] and _FOUND[1:] == ["later"] * 2 and previous_handler == [signal.SIGTERM] * 2
    finally:
        _FOUND.clear()


class Compose:
    """As PyTorch Lightning's ``_HandlersCompose``: the handlers it found, called in turn."""

    def __init__(self, handlers: list[Any]) -> None:
        self.signal_handlers = handlers

    def __call__(self, signum: int, frame: Any) -> None:
        for handler in self.signal_handlers:
            handler(signum, frame)


def lightnings_compose() -> type:
    require(importlib.util.find_spec("lightning") is not None, "pip install lightning==2.6.6")
    from lightning.pytorch.trainer.connectors.signal_connector import _HandlersCompose

    return _HandlersCompose


@pytest.mark.parametrize("kind", ["like Lightning's", "Lightning's"])
def test_a_later_handler_that_keeps_ours_is_left_in_place(kind, previous_handler, records, tmp_path):  # noqa: F811
    """Proves: a later handler that holds ours to call it (Lightning's composed handler, which
    ``Trainer.fit`` sets with the handler it found) still reaches the final saves: it stays in
    place, nothing is logged, and on SIGTERM it runs its own handlers and ours, which then
    calls the handler found first."""
    cp = fc.Checkpoint(str(tmp_path / "ckpt"))
    calls: list[str] = []
    first = cp.on_terminate(lambda: calls.append("save") or b"x")
    kind_of = Compose if kind == "like Lightning's" else lightnings_compose()
    compose = kind_of([lambda s, f: calls.append("framework"), signal.getsignal(signal.SIGTERM)])
    signal.signal(signal.SIGTERM, compose)
    second = cp.on_terminate(lambda: None)
    assert signal.getsignal(signal.SIGTERM) is compose
    assert first.active and second.active and records.lines == []
    signal.raise_signal(signal.SIGTERM)
    assert calls == ["framework", "save"] and previous_handler == [signal.SIGTERM]


def test_from_another_thread_a_replaced_handler_is_said_and_the_registration_is_inactive(
    previous_handler,  # noqa: F811
    records,
    tmp_path,
):
    """Proves: a registration made in a worker thread (Flyte's local mode runs sync tasks in
    one) cannot put ours back in front: a WARNING says the final saves will not run (once per
    handler), its registration reports ``active`` False, and a SIGTERM that comes then is
    reported by the signal relay, naming how many final saves do not run."""
    cp = fc.Checkpoint(str(tmp_path / "ckpt"))
    calls: list[str] = []
    cp.on_terminate(lambda: calls.append("save") or b"x")  # installs ours (main thread)
    signal.signal(signal.SIGTERM, later_handler(calls))
    made: list[preemption.Registration] = []

    def register() -> None:
        made.append(cp.on_terminate(lambda: b"y"))

    for _ in range(2):
        worker = threading.Thread(target=register)
        worker.start()
        worker.join(HANG)
    assert len(made) == 2 and not any(r.active for r in made)
    [warning] = records.warnings("will NOT run")
    assert (
        "by tests.test_sigterm_handlers.later_handler.<locals>.set_later, which does not call it" in warning
    )
    assert "call flyte_checkpoint.lifecycle.preemption.install() from the main thread" in warning
    signal.raise_signal(signal.SIGTERM)  # the later handler only; the relay reads the signal
    assert records.seen.wait(HANG), "the relay said nothing about the SIGTERM"
    [said] = records.warnings("SIGTERM came")
    assert "set_later, set after flyte-checkpoint's and not calling it: the 3 final save(s)" in said
    assert calls == ["later"] and not (tmp_path / "ckpt").exists()
    assert preemption.install()  # from the main thread: ours goes in front again
    assert all(r.active for r in made)


ASYNC_CHILD = r"""
import asyncio, signal, sys
import flyte_checkpoint as fc

cp = fc.Checkpoint(sys.argv[1])


def state():
    print("SAVING", flush=True)
    return b"final"


async def main():
    cp.on_terminate(state)                                  # ours, installed here
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)  # the loop's, after ours
    cp.on_terminate(lambda: None)                           # noticed: ours goes in front again
    print("READY", flush=True)
    await stop.wait()
    print("LOOP STOPPED", flush=True)


asyncio.run(main())
"""


def test_an_asyncio_loops_signal_handler_set_after_ours_still_gets_the_signal_after_the_saves(tmp_path):
    """Proves: ``loop.add_signal_handler(SIGTERM, ...)`` after our registration replaced our
    handler: the final save never ran and the loop just stopped. Now the next registration
    puts ours in front: SIGTERM runs the final save, and the loop's callback still runs (the
    loop is woken by its own wakeup fd), so the program ends as it meant to, with exit 0."""
    dest = tmp_path / "ckpt"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(preemption.GRACE_ENV, None)
    child = Child([sys.executable, "-c", ASYNC_CHILD, str(dest)], env, ROOT)
    assert child.next() == "READY"
    child.proc.send_signal(signal.SIGTERM)
    assert child.next() == "SAVING"
    assert child.next() == "LOOP STOPPED"
    code, output = child.end()
    assert code == 0, output
    assert dest.read_bytes() == b"final"
    assert "Ours is installed again in front of it" in output
