"""Wake the main thread when a signal it handles in Python lands on another thread.

CPython runs Python signal handlers only in the main thread, the next time it executes Python
code. The kernel may deliver a process-directed signal (``kill``) to any thread that does not
block it; when that is not the main thread and the main thread waits in a system call that
nothing else ends (an asyncio loop with nothing scheduled, ``select`` on idle sockets), the
handler does not run until something else wakes it: a SIGTERM final save would never start.

:func:`start` points the interpreter's wakeup fd (:func:`signal.set_wakeup_fd`) at a pipe read
by a daemon thread. Whenever a watched signal arrives, in whichever thread, that thread sends
:data:`WAKE` (SIGURG) to the main thread; SIGURG has a no-op Python handler from us, so it ends
the main thread's system call with EINTR, and CPython then runs every pending handler (the
watched signal's included) before it resumes the call. A wake the main thread did not need
costs one no-op call. Nothing is started when another wakeup fd is set (an asyncio loop with
``add_signal_handler`` wakes itself) or when SIGURG already has a handler of someone else.

**One wake can be lost**, so the relay wakes the main thread again until it sees it ran the
handlers. CPython checks for pending handlers, releases the GIL, and only then enters the
system call: a signal that reaches the main thread between those two points runs only its C
handler, and the main thread then sleeps in the call. Releasing the GIL is precisely what lets
the relay thread run, so on a busy machine its wake often lands in that gap (the relay thread
preempts the main thread right there, on the same core): an idle asyncio loop hit by SIGTERM
slept on in ``epoll_wait`` in about one run in three under load, its final save never
started. SIGURG's handler counts the passes in which the main thread ran the pending handlers
(CPython runs every pending handler in one pass, so a pass that runs SIGURG's has run the
watched signal's too); the relay repeats the wake, at growing intervals from
:data:`FIRST_REPEAT` to :data:`MAX_REPEAT` seconds, until a pass comes after the signal's byte
was read.
"""

from __future__ import annotations

import os
import select
import signal
import threading
from collections.abc import Callable
from typing import Any

#: The signal that wakes the main thread: ignored by default, so a no-op handler changes nothing else.
WAKE = signal.SIGURG
THREAD_NAME = "flyte-checkpoint-signal-relay"
#: Seconds before the first repeated wake, doubled after each up to :data:`MAX_REPEAT`.
FIRST_REPEAT = 0.002
MAX_REPEAT = 0.25


class _Relay:
    def __init__(self) -> None:
        #: Called in the relay's thread when a watched signal arrives (see :func:`start`).
        self.notices: dict[int, Callable[[], None]] = {}

    pid = 0
    read_fd = -1
    write_fd = -1
    signals: frozenset[int] = frozenset()
    #: Passes in which the main thread ran the pending handlers (SIGURG's counts them).
    passes = 0


_relay = _Relay()
_lock = threading.Lock()


def start(signum: int, *, notice: Callable[[], None] | None = None) -> bool:
    """Relay ``signum`` to the main thread from now on; whether the relay runs (main thread only).

    Idempotent; re-arms the wakeup fd if something reset it (an asyncio loop that closed).
    ``notice`` is called in the relay's thread each time ``signum`` arrives, after the first
    wake of the main thread, whatever Python handler ``signum`` has then (its errors are
    ignored; it must not wait for the main thread).
    """
    with _lock:
        if threading.current_thread() is not threading.main_thread():
            return False
        if signal.getsignal(WAKE) not in (signal.SIG_DFL, _wake):
            return False  # SIGURG is someone else's
        if _relay.pid == os.getpid():
            old = signal.set_wakeup_fd(_relay.write_fd, warn_on_full_buffer=False)
            if old not in (-1, _relay.write_fd):
                signal.set_wakeup_fd(old)  # another owner (an asyncio loop): it wakes the main thread
                return False
            _relay.signals |= {signum}
            _notice(signum, notice)
            return True
        inherited = (_relay.read_fd, _relay.write_fd) if _relay.pid else ()
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        old = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        if old not in (-1, *inherited):
            signal.set_wakeup_fd(old)
            os.close(read_fd)
            os.close(write_fd)
            return False
        for fd in inherited:  # a forked child's copies of its parent's pipe
            os.close(fd)
        signal.signal(WAKE, _wake)
        _relay.pid, _relay.read_fd, _relay.write_fd = os.getpid(), read_fd, write_fd
        _relay.signals = frozenset({signum})
        _notice(signum, notice)
        main = threading.main_thread().ident
        assert main is not None
        threading.Thread(target=_watch, args=(read_fd, main), name=THREAD_NAME, daemon=True).start()
        return True


def _notice(signum: int, notice: Callable[[], None] | None) -> None:
    if notice is None:
        _relay.notices.pop(signum, None)
    else:
        _relay.notices[signum] = notice


def _wake(signum: int, frame: Any) -> None:
    """SIGURG's handler: its arrival has already ended the main thread's wait; it counts the
    pass, in which every other pending handler runs too (see the module's doc)."""
    _relay.passes += 1  # only the main thread runs Python signal handlers: no race


def _watch(read_fd: int, main: int) -> None:
    """Wake the main thread after each watched signal, and again at growing intervals until
    it has run the pending handlers since the signal's byte was read."""
    poller = select.poll()  # not select.select: the pipe's descriptor may be above FD_SETSIZE
    poller.register(read_fd, select.POLLIN)
    since: int | None = None  # the pass count when the last watched byte was read
    delay = FIRST_REPEAT
    heard: set[int] = set()
    while True:
        if since is not None and _relay.passes > since:
            since = None  # the main thread has run its handlers since
        timeout: float | None = None
        if since is not None:
            try:
                signal.pthread_kill(main, WAKE)
            except OSError:
                return
            timeout, delay = delay * 1000, min(delay * 2, MAX_REPEAT)
        for signum in heard:  # after the wake: a notice may take a while
            notice = _relay.notices.get(signum)
            try:
                if notice is not None:
                    notice()
            except Exception:  # a notice must never stop the relay
                pass
        heard = set()
        if not poller.poll(timeout):
            continue
        try:
            data = os.read(read_fd, 512)
        except OSError:
            return
        if not data:
            return
        heard = {b for b in data if b in _relay.signals}
        if heard:
            since, delay = _relay.passes, FIRST_REPEAT


__all__ = ["THREAD_NAME", "WAKE", "start"]
