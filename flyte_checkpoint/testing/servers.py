"""Run a test server (a local emulator of a cloud's storage) as a child process, for tests.

The three cloud plugins' test packages start their servers through :func:`server_process`,
so that a server that does not start fails the same way in all three (a
:class:`ServerStartError` carrying the server's output), and a backend author's tests can
start theirs the same way::

    with server_process(
        lambda port: ["my-server", "--port", str(port)],
        name="my server",
        answers=lambda port: probe(port),   # True once the server answers a request
    ) as port:
        ...

Each try runs the command on a free port of 127.0.0.1, logs to a temporary file (a pipe
nobody reads would stall it), and waits until ``answers(port)``; a server that exits (a port
taken meanwhile) is tried again on a fresh port. On exit the process is terminated (then
killed if needed) and waited for.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

__all__ = ["ServerStartError", "free_port", "server_process"]


class ServerStartError(RuntimeError):
    """A test server is installed but did not start: it exited, or did not answer within the
    start timeout (on every try); the message carries its output."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def server_process(
    command: Callable[[int], Sequence[str]],
    *,
    name: str,
    answers: Callable[[int], bool],
    start_timeout: float = 180.0,
    tries: int = 3,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> Iterator[int]:
    """Run ``command(port)`` on a free port until ``answers(port)`` is true; yield the port.

    ``start_timeout`` only guards against a hang (far above a loaded machine's start-up time).

    Raises:
        ServerStartError: no try answered; the message names ``name``, how the last try ended
            (its exit code, or that it did not answer) and its output.
    """
    last = ""
    for _ in range(tries):
        port = free_port()
        with tempfile.TemporaryFile() as log:
            proc = subprocess.Popen(
                list(command(port)),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env) if env is not None else None,
                cwd=cwd,
            )
            try:
                if _wait_until_up(proc, port, answers, start_timeout):
                    yield port
                    return
                how = f"exited with {proc.returncode}" if proc.poll() is not None else "did not answer"
                log.seek(0)
                output = log.read().decode("utf-8", "replace")[-4000:]
                last = f"the last try {how} on port {port} within {start_timeout:.0f}s; its output:\n{output}"
            finally:
                _stop(proc)
    raise ServerStartError(f"{name} did not start after {tries} tries: {last}")


def _wait_until_up(
    proc: subprocess.Popen[bytes], port: int, answers: Callable[[int], bool], timeout: float
) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if answers(port):
            return True
        time.sleep(0.1)
    return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
