"""Start and stop Azurite's blob service on 127.0.0.1, for tests and benchmarks.

The same shape in the three plugins' test packages (``server_installed()``,
``run_server()`` yielding a server with ``endpoint`` and ``create_bucket``,
``ServerStartError``)::

    from flyte_checkpoint_azure_tests.server import run_server

    with run_server() as server:        # server.endpoint: "http://127.0.0.1:<port>/devstoreaccount1"
        server.create_bucket("b")       # Azure calls it a container
        print(server.connection_string)

The executable is ``plugins/azure/node_modules/.bin/azurite-blob`` (installed by
``npm ci --prefix plugins/azure``), else ``azurite-blob`` on ``PATH``. See
:func:`flyte_checkpoint.testing.servers.server_process` for how it is started and stopped.
"""

from __future__ import annotations

import http.client
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from flyte_checkpoint.testing.servers import ServerStartError, server_process

__all__ = [
    "ACCOUNT_KEY",
    "ACCOUNT_NAME",
    "INSTALL_HINT",
    "AzureServer",
    "ServerStartError",
    "run_server",
    "server_installed",
]

#: Azurite's well-known development account and its published key (not a secret).
ACCOUNT_NAME = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

PLUGIN_DIR = Path(__file__).resolve().parents[1]
LOCAL_EXECUTABLE = PLUGIN_DIR / "node_modules" / ".bin" / "azurite-blob"
#: What to install when :func:`server_installed` is false.
INSTALL_HINT = "npm ci --prefix plugins/azure (needs Node.js and npm)"


@dataclass(frozen=True)
class AzureServer:
    """A running Azurite blob service."""

    #: The account's path-style blob endpoint, ``http://127.0.0.1:PORT/devstoreaccount1`` (a
    #: store's ``endpoint_url``; Azure's endpoints name the account, the other clouds' do not).
    endpoint: str
    account_name: str = ACCOUNT_NAME
    account_key: str = ACCOUNT_KEY

    @property
    def connection_string(self) -> str:
        """The account's connection string, key included (Azure only: its SDK's usual form)."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={self.account_name};"
            f"AccountKey={self.account_key};BlobEndpoint={self.endpoint};"
        )

    def create_bucket(self, name: str) -> None:
        """Create the container ``name`` (no error if it exists already)."""
        from azure.core.exceptions import ResourceExistsError
        from azure.storage.blob import BlobServiceClient

        with BlobServiceClient.from_connection_string(self.connection_string) as svc:
            try:
                svc.create_container(name)
            except ResourceExistsError:
                pass

    def __repr__(self) -> str:  # the key is public, but keep habits safe
        return f"AzureServer({self.endpoint!r})"


def find_executable() -> str | None:
    """The path of ``azurite-blob``: this plugin's node_modules first, then ``PATH``."""
    if LOCAL_EXECUTABLE.exists():
        return str(LOCAL_EXECUTABLE)
    return shutil.which("azurite-blob")


def server_installed() -> bool:
    """True if ``azurite-blob`` is found (see :func:`find_executable`)."""
    return find_executable() is not None


def _answers(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", f"/{ACCOUNT_NAME}?comp=list")
        conn.getresponse().read()
        return True
    except OSError:
        return False
    finally:
        conn.close()


@contextmanager
def run_server(*, start_timeout: float = 180.0, extra_args: Sequence[str] = ()) -> Iterator[AzureServer]:
    """Run Azurite's blob service, in memory, on a free port of 127.0.0.1; yield it.

    Raises:
        ServerStartError: no executable was found, or it did not answer (after three tries on
            fresh ports), with its output.
    """
    exe = find_executable()
    if exe is None:
        raise ServerStartError(f"azurite-blob is not installed: {INSTALL_HINT}")
    with (
        tempfile.TemporaryDirectory(prefix="azurite-") as workdir,
        server_process(
            lambda port: [
                exe,
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(port),
                "--inMemoryPersistence",
                "--skipApiVersionCheck",
                "--disableTelemetry",
                "--silent",
                *extra_args,
            ],
            name=f"Azurite ({exe})",
            answers=_answers,
            start_timeout=start_timeout,
            cwd=workdir,
        ) as port,
    ):
        yield AzureServer(f"http://127.0.0.1:{port}/{ACCOUNT_NAME}")


if __name__ == "__main__":  # manual use: python -m flyte_checkpoint_azure_tests.server
    with run_server() as srv:
        print(srv.connection_string, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    os._exit(0)
