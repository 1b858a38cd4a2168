"""Start and stop moto's S3 server (real HTTP on 127.0.0.1) for tests and benchmarks.

The same shape in the three plugins' test packages (``server_installed()``,
``run_server()`` yielding a server with ``endpoint`` and ``create_bucket``,
``ServerStartError``)::

    with run_server() as server:        # server.endpoint: "http://127.0.0.1:<free port>"
        server.create_bucket("b")
        store = S3Store(endpoint_url=server.endpoint, ...)

The server runs in its own process (so it does not share the client's GIL); see
:func:`flyte_checkpoint.testing.servers.server_process` for how it is started and stopped.
"""

from __future__ import annotations

import contextlib
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

from flyte_checkpoint.testing.servers import ServerStartError, server_process

__all__ = ["INSTALL_HINT", "S3Server", "ServerStartError", "moto_auth", "run_server", "server_installed"]

#: What to install when :func:`server_installed` is false.
INSTALL_HINT = "pip install 'moto[server]'"
#: Smallest part the server accepts (AWS S3's is 5 MiB); tests use small parts to get many cheaply.
TEST_MIN_PART_SIZE = 64 * 1024


@dataclass(frozen=True)
class S3Server:
    """A running moto S3 server."""

    #: Its URL, ``http://127.0.0.1:PORT`` (a store's ``endpoint_url``).
    endpoint: str

    def create_bucket(self, name: str) -> None:
        """Create the bucket ``name`` (no error if it exists already)."""
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        try:
            client.create_bucket(Bucket=name)
        finally:
            client.close()


def server_installed() -> bool:
    """True if moto's server can be imported by this Python."""
    try:
        import moto.server  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def run_server(
    *, min_part_size: int | None = TEST_MIN_PART_SIZE, start_timeout: float = 120.0
) -> Iterator[S3Server]:
    """Run ``python -m moto.server`` on a free port of 127.0.0.1; yield it.

    ``min_part_size`` sets moto's ``S3_UPLOAD_PART_MIN_SIZE`` (``None``: AWS's 5 MiB).

    Raises:
        ServerStartError: it did not answer (after three tries on fresh ports), with its output.
    """
    env = dict(os.environ)
    if min_part_size is not None:
        env["S3_UPLOAD_PART_MIN_SIZE"] = str(min_part_size)
    with server_process(
        lambda port: [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        name="moto's S3 server",
        answers=_answers,
        start_timeout=start_timeout,
        env=env,
    ) as port:
        yield S3Server(f"http://127.0.0.1:{port}")


def moto_auth(endpoint: str, count: str) -> None:
    """Switch the server's authentication on (``"0"``: every request from now on needs known
    credentials; ``"N"``: after N more requests) or off (``"inf"``). S3 only: moto's switch."""
    req = urllib.request.Request(
        f"{endpoint}/moto-api/reset-auth",
        data=count.encode(),
        method="POST",
        headers={"Content-Type": "text/plain"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        if resp.status != 200:
            raise ServerStartError(f"moto did not accept reset-auth={count!r}: HTTP {resp.status}")


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/data.json", timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False
