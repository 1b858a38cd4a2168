"""Start and stop moto's S3 server (real HTTP on 127.0.0.1) for tests and benchmarks.

Usage::

    with moto_s3_server() as endpoint:        # "http://127.0.0.1:<free port>"
        ...

The server runs in its own process (so it does not share the client's GIL), logs to a
temporary file (a pipe nobody reads would stall it), and is terminated (then killed if
needed) and waited for on exit.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

#: Smallest part the server accepts (AWS S3's is 5 MiB); tests use small parts to get many cheaply.
TEST_MIN_PART_SIZE = 64 * 1024


class ServerStartError(RuntimeError):
    """The server did not answer in time or exited; the message carries its output."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def moto_available() -> bool:
    """True if moto's server can be imported by this Python."""
    try:
        import moto.server  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def moto_s3_server(
    *, min_part_size: int | None = TEST_MIN_PART_SIZE, start_timeout: float = 120.0, tries: int = 3
) -> Iterator[str]:
    """Run ``python -m moto.server`` on a free port of 127.0.0.1; yield its endpoint URL.

    ``min_part_size`` sets moto's ``S3_UPLOAD_PART_MIN_SIZE`` (``None``: AWS's 5 MiB). Each try
    waits until the server answers its health endpoint; ``start_timeout`` only guards against
    a hang, and a server that exits (a port taken meanwhile) is retried on a fresh port.

    Raises:
        ServerStartError: it did not answer within ``start_timeout`` seconds (after ``tries``
            attempts on fresh ports), with the server's output in the message.
    """
    env = dict(os.environ)
    if min_part_size is not None:
        env["S3_UPLOAD_PART_MIN_SIZE"] = str(min_part_size)
    last_error = ""
    for _ in range(tries):
        port = free_port()
        with tempfile.TemporaryFile() as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
            endpoint = f"http://127.0.0.1:{port}"
            try:
                if _wait_until_up(proc, endpoint, start_timeout):
                    yield endpoint
                    return
                last_error = _output(log)
            finally:
                _stop(proc)
    raise ServerStartError(f"moto's S3 server did not start after {tries} tries; its output:\n{last_error}")


def moto_auth(endpoint: str, count: str) -> None:
    """Switch the server's authentication on (``"0"``: every request from now on needs known
    credentials; ``"N"``: after N more requests) or off (``"inf"``)."""
    req = urllib.request.Request(
        f"{endpoint}/moto-api/reset-auth",
        data=count.encode(),
        method="POST",
        headers={"Content-Type": "text/plain"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        if resp.status != 200:
            raise ServerStartError(f"moto did not accept reset-auth={count!r}: HTTP {resp.status}")


def _wait_until_up(proc: subprocess.Popen[bytes], endpoint: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(endpoint + "/moto-api/data.json", timeout=2) as resp:
                if resp.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    return False


def _output(log: object) -> str:
    log.seek(0)  # type: ignore[attr-defined]
    return log.read().decode("utf-8", "replace")[-4000:]  # type: ignore[attr-defined]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
