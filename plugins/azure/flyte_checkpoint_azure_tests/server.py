"""Start and stop Azurite's blob service on 127.0.0.1, for tests.

Reusable outside this package's fixtures::

    from flyte_checkpoint_azure_tests.server import azurite

    with azurite() as server:
        print(server.connection_string)

The executable is ``plugins/azure/node_modules/.bin/azurite-blob`` (installed by
``npm ci --prefix plugins/azure``), else ``azurite-blob`` on ``PATH``.
"""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

#: Azurite's well-known development account and its published key (not a secret).
ACCOUNT_NAME = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

PLUGIN_DIR = Path(__file__).resolve().parents[1]
LOCAL_EXECUTABLE = PLUGIN_DIR / "node_modules" / ".bin" / "azurite-blob"
INSTALL_HINT = "run `npm ci --prefix plugins/azure` (needs Node.js and npm)"


class AzuriteUnavailable(RuntimeError):
    """Azurite is not installed, or it did not start."""


@dataclass(frozen=True)
class AzuriteServer:
    """A running Azurite blob service."""

    host: str
    port: int
    account_name: str = ACCOUNT_NAME
    account_key: str = ACCOUNT_KEY

    @property
    def blob_endpoint(self) -> str:
        """The account's path-style blob endpoint, e.g. ``http://127.0.0.1:PORT/devstoreaccount1``."""
        return f"http://{self.host}:{self.port}/{self.account_name}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={self.account_name};"
            f"AccountKey={self.account_key};BlobEndpoint={self.blob_endpoint};"
        )

    def __repr__(self) -> str:  # the key is public, but keep habits safe
        return f"AzuriteServer({self.blob_endpoint!r})"


def find_executable() -> str | None:
    """The path of ``azurite-blob``: this plugin's node_modules first, then ``PATH``."""
    if LOCAL_EXECUTABLE.exists():
        return str(LOCAL_EXECUTABLE)
    return shutil.which("azurite-blob")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _answers(host: str, port: int) -> bool:
    conn = http.client.HTTPConnection(host, port, timeout=2)
    try:
        conn.request("GET", f"/{ACCOUNT_NAME}?comp=list")
        conn.getresponse().read()
        return True
    except OSError:
        return False
    finally:
        conn.close()


@contextmanager
def azurite(
    *, host: str = "127.0.0.1", start_timeout: float = 180.0, extra_args: Sequence[str] = ()
) -> Iterator[AzuriteServer]:
    """Run Azurite's blob service, in memory, on a free port of ``host``; stop it on exit.

    Waits until the service answers a request; ``start_timeout`` only guards against a hang.

    Raises:
        AzuriteUnavailable: no executable was found, or the server did not answer
            within ``start_timeout`` seconds (the message holds its output).
    """
    exe = find_executable()
    if exe is None:
        raise AzuriteUnavailable(f"azurite-blob is not installed: {INSTALL_HINT}")
    with tempfile.TemporaryDirectory(prefix="azurite-") as workdir:
        port = free_port(host)
        log_path = Path(workdir) / "azurite.log"
        cmd = [
            exe,
            "--blobHost", host,
            "--blobPort", str(port),
            "--inMemoryPersistence",
            "--skipApiVersionCheck",
            "--disableTelemetry",
            "--silent",
            *extra_args,
        ]  # fmt: skip
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                cmd, cwd=workdir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            deadline = time.monotonic() + start_timeout
            while not _answers(host, port):
                if proc.poll() is not None or time.monotonic() > deadline:
                    output = log_path.read_text(errors="replace")[-4000:]
                    state = f"exited with {proc.returncode}" if proc.poll() is not None else "did not answer"
                    raise AzuriteUnavailable(
                        f"Azurite ({exe}) {state} on {host}:{port} within {start_timeout:.0f}s."
                        f" Its output:\n{output}"
                    )
                time.sleep(0.1)
            yield AzuriteServer(host, port)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


if __name__ == "__main__":  # manual use: python -m flyte_checkpoint_azure_tests.server
    with azurite() as srv:
        print(srv.connection_string, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    os._exit(0)
