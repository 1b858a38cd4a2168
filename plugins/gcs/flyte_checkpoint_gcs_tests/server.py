"""Start and stop a GCS emulator (``gcp-storage-emulator`` from PyPI) on 127.0.0.1.

Reusable by any test suite::

    with GcsEmulator() as emu:
        emu.create_bucket("b")
        store = GCSStore(endpoint_url=emu.endpoint, anonymous=True)
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType


class EmulatorError(RuntimeError):
    """The emulator could not be started (the message carries its stderr)."""


def emulator_installed() -> bool:
    """Whether the ``gcp_storage_emulator`` package can be imported."""
    return importlib.util.find_spec("gcp_storage_emulator") is not None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GcsEmulator:
    """An in-memory ``gcp-storage-emulator`` process on a free port of 127.0.0.1."""

    def __init__(self, start_timeout: float = 180.0) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._start_timeout = start_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        fd, log = tempfile.mkstemp(prefix="gcs-emulator-", suffix=".log")
        os.close(fd)
        self._log = Path(log)

    def start(self) -> GcsEmulator:
        """Start the process and wait until it answers its health check.

        ``start_timeout`` only guards against a hang: it is far above the usual start-up
        time, even on a loaded machine, so a slow start is waited for, not failed.

        Raises:
            EmulatorError: it exited or did not answer in time (with its stderr).
        """
        cmd = [
            sys.executable,
            "-m",
            "gcp_storage_emulator",
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--in-memory",
            "--quiet",
        ]
        with self._log.open("wb") as log:
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self._start_timeout
        while True:
            if self._proc.poll() is not None:
                raise EmulatorError(f"the GCS emulator exited with {self._proc.returncode}: {self.output()}")
            if self._answers():
                return self
            if time.monotonic() > deadline:
                output = self.output()  # before stop(), which removes the log
                self.stop()
                raise EmulatorError(
                    f"the GCS emulator did not answer on {self.endpoint} within "
                    f"{self._start_timeout:.0f}s: {output}"
                )
            time.sleep(0.1)

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint + "/", timeout=1) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def output(self) -> str:
        """What the emulator printed so far (the last 4000 characters)."""
        try:
            return self._log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def create_bucket(self, name: str) -> None:
        """Create a bucket (no error if it already exists)."""
        body = json.dumps({"name": name}).encode()
        req = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b?project=test",
            data=body,
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            urllib.request.urlopen(req, timeout=10).close()
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise

    def stop(self) -> None:
        """Terminate the process and wait for it; remove its log."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self._log.unlink(missing_ok=True)

    def __enter__(self) -> GcsEmulator:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
