"""The final save on SIGTERM (flyte_checkpoint.lifecycle.preemption), in this process and in children.

In this process the signal is raised with ``signal.raise_signal``, which runs the Python
handlers before it returns, after a recording handler was installed as "the handler
before ours" (so the test process never ends). What ending the process means (``SIG_DFL``)
and the handler inside an asyncio loop are tested in child processes, which report each
point they reach on stdout; the test acts on those lines, never on time.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import ConfigurationError, NoTaskContextError
from flyte_checkpoint.lifecycle import preemption, saveorder
from tests.childlines import Child
from tests.reliability.gates import Gate
from tests.spystore import spying

ROOT = Path(__file__).resolve().parents[1]
HANG = float(os.environ.get("FCP_HANG", "120"))


@pytest.fixture
def previous_handler(monkeypatch):
    """A recording Python handler installed before ours; everything put back after the test."""
    monkeypatch.delenv(preemption.GRACE_ENV, raising=False)
    original = signal.getsignal(signal.SIGTERM)
    calls: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    try:
        yield calls
    finally:
        preemption.uninstall()
        signal.signal(signal.SIGTERM, original)


def test_sigterm_saves_what_was_registered_then_calls_the_previous_handler(previous_handler, tmp_path):
    dest = str(tmp_path / "ckpt")
    cp = fc.Checkpoint(dest)
    order: list[str] = []
    previous_handler_calls = previous_handler

    def state() -> bytes:
        order.append("save")
        return b"step 7"

    cp.on_terminate(state)
    assert signal.getsignal(signal.SIGTERM) is preemption._handle  # installed by the registration
    signal.raise_signal(signal.SIGTERM)
    assert order == ["save"] and previous_handler_calls == [signal.SIGTERM]
    assert Path(dest).read_bytes() == b"step 7"


def test_nothing_is_installed_before_a_registration():
    code = (
        "import signal, flyte_checkpoint as fc; h = signal.getsignal(signal.SIGTERM);"
        " fc.ctx(); print(h is signal.SIG_DFL and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=HANG)
    assert out.stdout.strip() == "True", out.stderr


def test_the_saves_run_once(previous_handler, tmp_path):
    cp = fc.Checkpoint(str(tmp_path / "ckpt"))
    saves: list[int] = []
    cp.on_terminate(lambda: saves.append(1) or b"x")
    for _ in range(3):
        signal.raise_signal(signal.SIGTERM)
    assert saves == [1]
    assert previous_handler == [signal.SIGTERM] * 3  # the chain still runs each time


def test_a_sigterm_during_the_final_save_is_ignored(previous_handler, tmp_path):
    cp = fc.Checkpoint(str(tmp_path / "ckpt"))
    seen: list[str] = []

    def state() -> bytes:
        seen.append("save")
        preemption._handle(signal.SIGTERM, None)  # a second SIGTERM, arriving while the saves run
        return b"x"

    cp.on_terminate(state)
    signal.raise_signal(signal.SIGTERM)
    # The second SIGTERM arrived while the saves ran: ignored; the first one chained once.
    assert seen == ["save"] and previous_handler == [signal.SIGTERM]
    assert (tmp_path / "ckpt").read_bytes() == b"x"


def test_preempt_by_hand_runs_the_saves_and_the_process_goes_on(previous_handler, tmp_path):
    cp = fc.Checkpoint(str(tmp_path / "ckpt"))
    step = [3]
    cp.on_terminate(lambda: str(step[0]).encode())
    [outcome] = fc.preempt()
    assert (outcome.status, outcome.error) == ("done", None)
    assert (tmp_path / "ckpt").read_bytes() == b"3" and previous_handler == []
    step[0] = 4
    assert [o.status for o in fc.preempt()] == ["done"]  # each call saves again
    assert (tmp_path / "ckpt").read_bytes() == b"4"
    step[0] = 5
    signal.raise_signal(signal.SIGTERM)  # SIGTERM after a notice still saves, once
    assert (tmp_path / "ckpt").read_bytes() == b"5" and previous_handler == [signal.SIGTERM]


def test_a_registration_returning_none_saves_nothing_and_others_still_run(previous_handler, tmp_path):
    first, second = fc.Checkpoint(str(tmp_path / "a")), fc.Checkpoint(str(tmp_path / "b"))
    first.on_terminate(lambda: None)
    first.on_terminate(lambda: 1 / 0)  # type: ignore[arg-type,return-value]
    second.on_terminate(lambda: b"b")
    outcomes = fc.preempt()
    assert [o.status for o in outcomes] == ["skipped", "failed", "done"]
    assert isinstance(outcomes[1].error, ZeroDivisionError)
    assert not (tmp_path / "a").exists() and (tmp_path / "b").read_bytes() == b"b"


def test_a_registration_lives_no_longer_than_its_checkpoint(previous_handler, tmp_path):
    fc.Checkpoint(str(tmp_path / "dropped")).on_terminate(lambda: b"x")
    import gc

    gc.collect()
    assert preemption.registered() == 0 and fc.preempt() == []


def test_a_removed_registration_does_not_run(previous_handler, tmp_path):
    cp = fc.Checkpoint(str(tmp_path / "ckpt"))
    registration = cp.on_terminate(lambda: b"x")
    assert registration.active and preemption.registered() == 1
    registration.remove()
    assert not registration.active and fc.preempt() == []
    with cp.on_terminate(lambda: b"y") as scoped:
        assert scoped.active
    assert preemption.registered() == 0


def test_registrations_end_with_the_attempt(previous_handler, tmp_path):
    seen = []

    @fc.task(retries=1, checkpoint_root=str(tmp_path))
    def train() -> None:
        fc.ctx().on_terminate(lambda: b"ctx")
        fc.ctx().checkpoint.on_terminate(lambda: b"cp")
        seen.append(preemption.registered())
        if len(seen) == 1:
            raise RuntimeError("next attempt")

    train()
    assert seen == [2, 2]  # the first attempt's two were gone when the second registered its own
    assert preemption.registered() == 0 and fc.preempt() == []


def test_outside_a_task_on_terminate_says_what_to_do():
    with pytest.raises(NoTaskContextError, match=r"decorate the function with @fc\.task"):
        fc.ctx().on_terminate(lambda: b"x")


@pytest.mark.parametrize("value", ["soon", "0", "-3", "nan", "inf"])
def test_an_invalid_grace_budget_names_the_variable(value, monkeypatch, previous_handler):
    monkeypatch.setenv(preemption.GRACE_ENV, value)
    with pytest.raises(ConfigurationError) as info:
        preemption.grace_seconds()
    message = str(info.value)
    assert f"FLYTE_CHECKPOINT_GRACE_SECONDS={value!r} is not valid" in message
    assert "number of seconds above 0" in message and "default 25" in message
    with pytest.raises(ConfigurationError, match="FLYTE_CHECKPOINT_GRACE_SECONDS"):
        fc.preempt()


def test_the_default_budget_is_under_kubernetes_grace_period(monkeypatch):
    monkeypatch.delenv(preemption.GRACE_ENV, raising=False)
    assert preemption.grace_seconds() == 25.0 < 30
    monkeypatch.setenv(preemption.GRACE_ENV, " 9.5 ")
    assert preemption.grace_seconds() == 9.5


def test_a_final_save_over_its_budget_is_aborted_and_the_previous_checkpoint_stays_whole(
    previous_handler, tmp_path, monkeypatch
):
    real = tmp_path / "ckpt"
    fc.Checkpoint(str(real)).save_sync(b"previous, whole")
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights").write_bytes(os.urandom(1 << 20))
    gate = Gate(writes=1)
    # The budget runs out while the save is held at its first write (whatever the machine's speed).
    monkeypatch.setattr(preemption, "_within", lambda done, budget: not gate.reached.wait(HANG))
    monkeypatch.setattr(preemption, "ABORT_WAIT", 0)  # the gate holds the save until released below
    with spying("file", gate.hook) as spy:
        cp = fc.Checkpoint(spy.uri_for(str(real)))
        cp.on_terminate(lambda: model)
        signal.raise_signal(signal.SIGTERM)  # returns once the budget is spent
        assert gate.reached.is_set() and previous_handler == [signal.SIGTERM]
        gate.release.set()
        join_final_save_threads()
    assert "commit" not in gate.endings and "abort" in gate.endings
    assert real.read_bytes() == b"previous, whole"
    assert saveorder.waiting(spy.uri_for(str(real))) == 0


def test_preempt_reports_an_aborted_save(previous_handler, tmp_path, monkeypatch):
    monkeypatch.setattr(preemption, "ABORT_WAIT", 0)
    gate = Gate(writes=1)
    model = tmp_path / "model"
    model.mkdir()
    (model / "w").write_bytes(b"w" * 1000)
    with spying("file", gate.hook) as spy:
        cp = fc.Checkpoint(spy.uri_for(str(tmp_path / "ckpt")))
        cp.on_terminate(lambda: model)
        try:
            [outcome] = fc.preempt(budget=0.1)
        finally:
            gate.release.set()
            join_final_save_threads()
    assert outcome.status == "aborted" and isinstance(outcome.error, TimeoutError)
    message = str(outcome.error)
    assert (
        "did not finish within the 0.1 s left of the grace budget (FLYTE_CHECKPOINT_GRACE_SECONDS)" in message
    )
    assert "nothing was committed" in message and spy.uri_for(str(tmp_path / "ckpt")) in message
    # Held at its first write or cancelled before it, by a real 0.1 s timer: never committed.
    assert "commit" not in gate.endings and not (tmp_path / "ckpt").exists()


def test_a_signal_taken_by_another_thread_runs_its_handler_while_a_save_waits_for_its_writer(
    tmp_path, monkeypatch
):
    """The kernel may hand SIGTERM to any thread; Python runs the handler in the main thread
    when it next runs Python code. A save whose main thread waits for its held writer thread
    (closing a folder's pipeline) must still let it run: it waits in steps."""
    model = tmp_path / "model"
    model.mkdir()
    for k in range(4):
        (model / f"layer{k}").write_bytes(os.urandom(192 * 1024))
    by_main: list[bool] = []  # for each write of a sizing save: made by the main thread?

    def record(op: str, uri: str) -> None:
        if op == "write":
            by_main.append(threading.current_thread() is threading.main_thread())

    with spying("file", record) as spy:
        fc.Checkpoint(spy.uri_for(str(tmp_path / "sizing"))).save_sync(model)
    last = max(i for i, main in enumerate(by_main, 1) if not main)
    # The writer thread's last write: the main thread has fed everything and waits for it
    # (writes the main thread makes itself, such as the index after the members, come later).
    gate = Gate(writes=last)
    handled, fallback = threading.Event(), threading.Event()

    def on_usr1(signum, frame):
        handled.set()
        gate.release.set()

    def send_from_another_thread() -> None:
        gate.wait_reached()
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)  # taken by this thread
        if not handled.wait(HANG):
            fallback.set()
            gate.release.set()  # the main thread never ran it: let the save end, and fail below

    original = signal.signal(signal.SIGUSR1, on_usr1)
    sender = threading.Thread(target=send_from_another_thread)
    try:
        with spying("file", gate.hook) as spy:
            sender.start()
            fc.Checkpoint(spy.uri_for(str(tmp_path / "ckpt"))).save_sync(model)
        sender.join(HANG)
    finally:
        signal.signal(signal.SIGUSR1, original)
    assert handled.is_set() and not fallback.is_set(), "the handler ran only once the writer was let go"


def test_waiting_for_the_background_saves_then_a_final_save(previous_handler, tmp_path):
    gate = Gate(writes=1)
    model = tmp_path / "model"
    model.mkdir()
    (model / "w").write_bytes(os.urandom(64 * 1024))

    def release_when_held() -> None:
        gate.wait_reached()
        gate.release.set()

    helper = threading.Thread(target=release_when_held)
    with spying("file", gate.hook) as spy:
        dest = spy.uri_for(str(tmp_path / "ckpt"))
        cp = fc.Checkpoint(dest)
        registration = cp.on_terminate(lambda: b"final", wait_background=True)
        handle = cp.save_background(model)  # held at its first write until the helper sees it
        helper.start()
        outcomes = fc.preempt(budget=HANG)
        helper.join(HANG)
        assert [(o.what.split(" ")[0], o.status) for o in outcomes] == [("wait", "done"), ("save", "done")]
        assert handle.done() and handle.result() is None
        assert gate.endings == ["commit", "write_bytes"]  # the background save, then ours
        assert (tmp_path / "ckpt").read_bytes() == b"final"
        registration.remove()
        assert preemption.registered() == 0
        cp.close()


def test_background_saves_that_do_not_end_within_the_budget_are_reported_aborted(previous_handler, tmp_path):
    gate = Gate(writes=1)
    with spying("file", gate.hook) as spy:
        cp = fc.Checkpoint(spy.uri_for(str(tmp_path / "ckpt")))
        ctx_registration = cp.on_terminate(wait_background=True)
        cp.save_background(b"x" * 10)  # bytes: one write_bytes, not held by the gate
        cp.wait()
        (tmp_path / "model").mkdir()
        (tmp_path / "model" / "w").write_bytes(b"w" * 1000)
        cp.save_background(tmp_path / "model")
        try:
            gate.wait_reached()
            [outcome] = fc.preempt(budget=0.1)  # the upload is held: it cannot end in time
        finally:
            gate.release.set()
        assert outcome.status == "aborted"
        assert (
            "did not end within the 0.1 s left of the grace budget (FLYTE_CHECKPOINT_GRACE_SECONDS)"
            in str(outcome.error)
        )
        cp.wait()
        ctx_registration.remove()
        cp.close()


def test_on_terminate_needs_something_to_do(tmp_path):
    with pytest.raises(TypeError, match="needs a function returning what to save, or wait_background=True"):
        fc.Checkpoint(str(tmp_path / "c")).on_terminate()


def join_final_save_threads() -> None:
    from flyte_checkpoint.lifecycle import saveorder

    for ended in list(saveorder.workers):
        assert ended.wait(HANG), "a final save's thread did not end"


# -- in child processes -------------------------------------------------------------------

CHILD = r"""
import asyncio, os, signal, sys
import flyte_checkpoint as fc

dest, mode = sys.argv[1], sys.argv[2]
if mode == "python-handler":
    signal.signal(signal.SIGTERM, lambda s, f: (print("PREVIOUS", flush=True), sys.exit(7)))
elif mode == "ignored":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
cp = fc.Checkpoint(dest)
step = [0]


def state():
    print("SAVING", flush=True)
    return str(step[0]).encode()


cp.on_terminate(state)


def sync_loop():
    for line in sys.stdin:                 # one step per line from the test
        step[0] += 1
        print("STEP", step[0], flush=True)


async def async_loop():
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        step[0] += 1
        await cp.save(b"regular")          # an async save in flight may precede the final one
        print("STEP", step[0], flush=True)


asyncio.run(async_loop()) if mode == "async" else sync_loop()
print("ENDED", step[0], flush=True)
"""


def start(dest: Path, mode: str) -> Child:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(preemption.GRACE_ENV, None)
    return Child([sys.executable, "-c", CHILD, str(dest), mode], env, ROOT)


def step(child: Child) -> str:
    child.say()
    return child.next()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_with_sig_dfl_before_it_the_process_ends_by_sigterm_after_the_save(mode, tmp_path):
    dest = tmp_path / "ckpt"
    child = start(dest, mode)
    assert [step(child) for _ in range(3)] == ["STEP 1", "STEP 2", "STEP 3"]
    child.proc.send_signal(signal.SIGTERM)
    assert child.next() == "SAVING"
    code, output = child.end()
    assert code == -signal.SIGTERM, output
    assert dest.read_bytes() == b"3"
    assert "SIGTERM: running 1 final save(s)" in output


def test_a_python_handler_before_ours_runs_after_the_save_and_decides(tmp_path):
    dest = tmp_path / "ckpt"
    child = start(dest, "python-handler")
    assert step(child) == "STEP 1"
    child.proc.send_signal(signal.SIGTERM)
    assert child.next() == "SAVING"
    assert child.next() == "PREVIOUS"
    assert child.end()[0] == 7  # the previous handler's sys.exit(7)
    assert dest.read_bytes() == b"1"


def test_with_sig_ign_before_it_the_process_goes_on_after_the_save(tmp_path):
    dest = tmp_path / "ckpt"
    child = start(dest, "ignored")
    assert step(child) == "STEP 1"
    child.proc.send_signal(signal.SIGTERM)
    assert child.next() == "SAVING"
    assert step(child) == "STEP 2"  # still training (the handler, save included, had returned)
    assert dest.read_bytes() == b"1"
    assert child.proc.stdin is not None
    child.proc.stdin.close()
    assert child.next() == "ENDED 2"
    assert child.end()[0] == 0


ELSEWHERE = r"""
import os, select, signal, sys, threading
import flyte_checkpoint as fc

cp = fc.Checkpoint(sys.argv[1])


def state():
    print("SAVING", flush=True)
    return b"saved"


cp.on_terminate(state)
if sys.argv[2:] == ["lose-a-wake"]:
    from flyte_checkpoint.lifecycle import signalrelay

    class Lossy:  # the relay's first wake of the main thread is lost, as one landing in the gap
        lost = False

        def __getattr__(self, name):
            return getattr(signal, name)

        def pthread_kill(self, thread, signum):
            if not Lossy.lost:
                Lossy.lost = True
                print("WAKE LOST", flush=True)
                return
            signal.pthread_kill(thread, signum)

    signalrelay.signal = Lossy()
never, _ = os.pipe()
threading.Thread(target=os.read, args=(never, 1), daemon=True).start()  # a thread that takes signals
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # so the kernel gives SIGTERM to another thread
print("READY", flush=True)
select.select([never], [], [])  # the main thread waits where nothing but a signal to it ends the wait
print("WOKEN", flush=True)
"""


def blocked_in_a_system_call(pid: int) -> bool:
    """Whether the process's main thread sleeps in a system call (Linux's /proc)."""
    task = Path(f"/proc/{pid}/task/{pid}")
    state = (task / "stat").read_text().rsplit(") ", 1)[1].split()[0]
    return state == "S" and (task / "syscall").read_text().split()[0] != "running"


@pytest.mark.parametrize("wakes", ["every wake arrives", "lose-a-wake"])
def test_a_sigterm_delivered_to_another_thread_still_runs_the_final_save(wakes, tmp_path):
    """Proves: the kernel may give a SIGTERM to any thread; CPython runs the Python handler only
    in the main thread, and a main thread waiting in a system call (an idle asyncio loop) is not
    woken by a signal another thread took. The relay (flyte_checkpoint.lifecycle.signalrelay) wakes it, so
    the final save runs and the process then ends by SIGTERM. Here the main thread blocks SIGTERM,
    so the delivery to another thread is certain, and the test signals only once the main thread
    sleeps in its select (read from /proc).

    ``lose-a-wake``: the relay's first wake is lost, as one that reaches the main thread after it
    checked for handlers and before it entered the system call (the cause of the async SIGTERM
    test's rare hang): the relay wakes it again, until the main thread has run its handlers."""
    dest = tmp_path / "ckpt"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(preemption.GRACE_ENV, None)
    child = Child([sys.executable, "-c", ELSEWHERE, str(dest), wakes], env, ROOT)
    assert child.next() == "READY"
    guard = time.monotonic() + HANG  # a hang guard: the child sleeps in select at once
    while not blocked_in_a_system_call(child.proc.pid):
        assert time.monotonic() < guard, "the child's main thread never waited in select"
        os.sched_yield()  # let the child run on a busy machine
    child.proc.send_signal(signal.SIGTERM)
    if wakes == "lose-a-wake":
        assert child.next() == "WAKE LOST"
    assert child.next() == "SAVING"
    code, output = child.end()
    assert code == -signal.SIGTERM, output
    assert dest.read_bytes() == b"saved"


# -- the thread SIGTERM stops may hold any lock of its own save ---------------------------


def _registry_lock():
    from flyte_checkpoint.storage.registry import get_registry

    return get_registry()._lock.get()


def _line_lock(dest: str):
    saveorder.waiting(dest)  # builds this process's lines
    return saveorder._lines.get().lock


def _scope_lock(dest: str):
    """The lock of the save's own scope, as held inside ``Turn.wait`` (``on_cancel``/``forget``)."""
    from flyte_checkpoint.util.cancellation import Scope

    turn, scope = saveorder.take(dest), Scope("the interrupted save")
    turn._scope = scope
    _scope_lock.keep = turn  # alive until the final save drops it
    return scope._lock


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def info_handler():
    """A handler of the project's logger at INFO, as a task that logs its saves has."""
    log = logging.getLogger("flyte_checkpoint")
    handler, level = _Records(), log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


@pytest.mark.parametrize("held", ["registry", "line", "scope", "logging"])
def test_the_final_save_needs_no_lock_the_interrupted_thread_holds(
    held, previous_handler, info_handler, tmp_path, monkeypatch
):
    """SIGTERM stops the main thread wherever it is, maybe holding a lock of its own save (the
    registry's, the destination's line, its scope's). The final save must not wait for it: the
    main thread never goes on while the handler runs, so that wait would spend the whole budget
    (found by sending SIGTERM to the README's task at random steps)."""
    monkeypatch.setenv(preemption.GRACE_ENV, str(HANG))  # a deadlock fails the test, late
    dest = str(tmp_path / "ckpt")
    cp = fc.Checkpoint(dest)
    cp.save_sync(b"step 1")
    cp.on_terminate(lambda: b"step 2")
    lock = {
        "registry": _registry_lock,
        "line": lambda: _line_lock(dest),
        "scope": lambda: _scope_lock(dest),
        "logging": lambda: info_handler.lock,  # held while a record of the main thread is written
    }[held]()
    with lock:
        signal.raise_signal(signal.SIGTERM)
    join_final_save_threads()
    [outcome] = preemption._state.outcomes
    assert outcome.status == "done", outcome
    assert Path(dest).read_bytes() == b"step 2"
    assert saveorder.waiting(dest) == 0
    assert any(m.startswith(f"saved checkpoint {dest}: 6 bytes") for m in info_handler.messages)


def test_a_sigterm_during_a_save_of_the_main_thread_is_handled_when_that_save_ends(
    previous_handler, tmp_path
):
    """Inside a save of its own, the main thread may hold any lock a save takes (a thread
    pool's while it starts a worker: found by the README's task with a folder, SIGTERM at
    random steps). The handler then only notes the signal; the save goes on to its commit,
    and the final saves run when it returns, before the handler found first is called."""
    dest = str(tmp_path / "ckpt")
    order: list[str] = []

    def sigterm_at_first_write(op: str, *args: object) -> None:
        if not order and threading.current_thread() is threading.main_thread():
            order.append("SIGTERM")
            signal.raise_signal(signal.SIGTERM)
            order.append("the save goes on")

    with spying("file", sigterm_at_first_write) as spy:
        cp = fc.Checkpoint(spy.uri_for(dest))
        cp.on_terminate(lambda: (order.append("final save"), b"final")[1])
        cp.save_sync(b"regular")
        order.append(f"save_sync returned, previous handler called {len(previous_handler)} time(s)")
    assert order == [
        "SIGTERM",
        "the save goes on",
        "final save",
        "save_sync returned, previous handler called 1 time(s)",
    ]
    [outcome] = preemption._state.outcomes
    assert outcome.status == "done" and Path(dest).read_bytes() == b"final"


@pytest.mark.parametrize("call", ["load_sync", "load_file_sync"])
def test_a_sigterm_during_a_load_of_the_main_thread_is_handled_when_that_load_ends(
    call, previous_handler, tmp_path
):
    """The same for a load the main thread makes (it holds the source's store and its scope):
    the handler notes the signal, the load goes on to its end, and the final saves run when it
    returns. ``load_file_sync`` ran the final saves inside its read, while ``load_sync``
    deferred them."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "model.pt").write_bytes(b"weights" * 1000)
    prev = str(tmp_path / "prev")
    fc.Checkpoint(prev).save_sync(tree)
    order: list[str] = []

    def sigterm_at_first_read(op: str, *args: object) -> None:
        if (
            not order
            and op in ("read", "open_read", "read_range")
            and threading.current_thread() is threading.main_thread()
        ):
            order.append("SIGTERM")
            signal.raise_signal(signal.SIGTERM)
            order.append("the load goes on")

    with spying("file", sigterm_at_first_read) as spy:
        cp = fc.Checkpoint(str(tmp_path / "ckpt"), spy.uri_for(prev))
        cp.on_terminate(lambda: (order.append("final save"), b"final")[1])
        if call == "load_sync":
            cp.load_sync()
        else:
            cp.load_file_sync("model.pt", tmp_path / "out.pt")
        order.append(f"{call} returned, previous handler called {len(previous_handler)} time(s)")
    assert order == [
        "SIGTERM",
        "the load goes on",
        "final save",
        f"{call} returned, previous handler called 1 time(s)",
    ]
    assert (tmp_path / "ckpt").read_bytes() == b"final"


def test_an_interrupt_anywhere_in_the_deferral_leaves_no_save_counted(tmp_path):
    """A KeyboardInterrupt landing at any call or return of the deferral's own code (a profile
    hook raises it there, as tests/reliability/test_interrupts.py does) must not leave the main
    thread counted as inside a save: every later SIGTERM would then wait for a save that never
    ends, and the process would not end on it."""
    cp = fc.Checkpoint(str(tmp_path / "ckpt"))
    here = preemption.__file__
    total = [0]

    def count(frame, event, arg):
        if frame.f_code.co_filename == here:
            total[0] += 1

    sys.setprofile(count)
    try:
        cp.save_sync(b"x")
    finally:
        sys.setprofile(None)
    assert total[0] >= 4
    for point in range(1, total[0] + 1):
        seen = [0]

        def interrupt(frame, event, arg, point=point, seen=seen):
            if frame.f_code.co_filename == here:
                seen[0] += 1
                if seen[0] == point:
                    raise KeyboardInterrupt

        sys.setprofile(interrupt)
        try:
            cp.save_sync(b"y")
        except KeyboardInterrupt:
            pass
        finally:
            sys.setprofile(None)
        assert preemption._depth.value == 0, f"counted inside a save after an interrupt at point {point}"
