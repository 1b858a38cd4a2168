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
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

#: The signal that wakes the main thread: ignored by default, so a no-op handler changes nothing else.
WAKE = signal.SIGURG
THREAD_NAME = "flyte-checkpoint-signal-relay"


class _Relay:
    pid = 0
    read_fd = -1
    write_fd = -1
    signals: frozenset[int] = frozenset()


_relay = _Relay()
_lock = threading.Lock()


def start(signum: int) -> bool:
    """Relay ``signum`` to the main thread from now on; whether the relay runs (main thread only).

    Idempotent; re-arms the wakeup fd if something reset it (an asyncio loop that closed).
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
        main = threading.main_thread().ident
        assert main is not None
        threading.Thread(target=_watch, args=(read_fd, main), name=THREAD_NAME, daemon=True).start()
        return True


def _wake(signum: int, frame: Any) -> None:
    """SIGURG's handler: nothing; its arrival has already ended the main thread's wait."""


def _watch(read_fd: int, main: int) -> None:
    while True:
        try:
            data = os.read(read_fd, 512)
        except OSError:
            return
        if not data:
            return
        if any(b in _relay.signals for b in data):
            try:
                signal.pthread_kill(main, WAKE)
            except OSError:
                return


__all__ = ["THREAD_NAME", "WAKE", "start"]
