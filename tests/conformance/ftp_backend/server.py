"""The test server: pyftpdlib on 127.0.0.1 in a process of its own, with one account.

``python -m tests.conformance.ftp_backend.server ROOT`` serves ROOT on a free port and prints
``ready PORT`` once it listens; ``ftp_server(root)`` runs it for a ``with`` block.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

USER = "ckpt"
PASSWORD = "s3cr3t-ftp-pw"  # a test secret: no message may show it


def serve(root: str) -> None:
    from pyftpdlib.authorizers import DummyAuthorizer
    from pyftpdlib.handlers import FTPHandler
    from pyftpdlib.servers import FTPServer

    authorizer = DummyAuthorizer()
    authorizer.add_user(USER, PASSWORD, root, perm="elradfmwMT")
    handler = type("Handler", (FTPHandler,), {"authorizer": authorizer, "banner": "ftp test server"})
    server = FTPServer(("127.0.0.1", 0), handler)
    print(f"ready {server.address[1]}", flush=True)
    server.serve_forever(handle_exit=True)


@contextmanager
def ftp_server(root: Path) -> Iterator[str]:
    """``HOST:PORT`` of a server of ``root`` (its BUCKET folders made by the caller)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.conformance.ftp_backend.server", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the server's own report that it listens
        if not line.startswith("ready "):
            raise RuntimeError(f"setup: the FTP test server did not start (exit code {proc.wait()})")
        yield f"127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    serve(sys.argv[1])
