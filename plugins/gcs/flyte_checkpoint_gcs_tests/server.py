"""Start and stop a GCS emulator (``gcp-storage-emulator`` from PyPI) on 127.0.0.1, for tests
and benchmarks.

The same shape in the three plugins' test packages (``server_installed()``,
``run_server()`` yielding a server with ``endpoint`` and ``create_bucket``,
``ServerStartError``)::

    with run_server() as server:        # server.endpoint: "http://127.0.0.1:<free port>"
        server.create_bucket("b")
        store = GCSStore(endpoint_url=server.endpoint, anonymous=True)

See :func:`flyte_checkpoint.testing.servers.server_process` for how it is started and stopped.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

from flyte_checkpoint.testing.servers import ServerStartError, server_process

__all__ = ["INSTALL_HINT", "GCSServer", "ServerStartError", "run_server", "server_installed"]

#: What to install when :func:`server_installed` is false.
INSTALL_HINT = "pip install gcp-storage-emulator"


@dataclass(frozen=True)
class GCSServer:
    """A running, in-memory ``gcp-storage-emulator``."""

    #: Its URL, ``http://127.0.0.1:PORT`` (a store's ``endpoint_url``, or ``STORAGE_EMULATOR_HOST``).
    endpoint: str

    def create_bucket(self, name: str) -> None:
        """Create the bucket ``name`` (no error if it exists already)."""
        req = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b?project=test",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            urllib.request.urlopen(req, timeout=10).close()
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise


def server_installed() -> bool:
    """True if the ``gcp_storage_emulator`` package can be imported by this Python."""
    return importlib.util.find_spec("gcp_storage_emulator") is not None


@contextlib.contextmanager
def run_server(*, start_timeout: float = 180.0) -> Iterator[GCSServer]:
    """Run ``python -m gcp_storage_emulator start`` in memory on a free port of 127.0.0.1; yield it.

    Raises:
        ServerStartError: it did not answer (after three tries on fresh ports), with its output.
    """
    with server_process(
        lambda port: [
            sys.executable,
            "-m",
            "gcp_storage_emulator",
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--in-memory",
            "--quiet",
        ],
        name="the GCS emulator",
        answers=_answers,
        start_timeout=start_timeout,
    ) as port:
        yield GCSServer(f"http://127.0.0.1:{port}")


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1) as r:
            return bool(r.status == 200)
    except (OSError, urllib.error.URLError):
        return False
