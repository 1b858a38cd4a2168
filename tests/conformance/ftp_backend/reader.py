"""Reads: one ``RETR`` stream pinned to the object's ``MLST`` facts.

FTP has no precondition (no ``If-Match``), so ranges fetched by separate requests could mix
two versions of an object replaced meanwhile. A whole read is therefore one ``RETR`` (the
server reads the file it opened, one version), checked against the facts (size, modify time,
unique id) seen before and after the server opened it; ``read_range`` is ``REST`` + ``RETR``,
one request.
"""

from __future__ import annotations

import ftplib
import io
import socket
from collections.abc import Callable
from typing import Any

from flyte_checkpoint.errors import TransientError
from flyte_checkpoint.uri import redact

from .errors import map_error


class FtpStream(io.RawIOBase):
    """The bytes of one ``RETR``: exactly ``size`` of them, or ``TransientError``."""

    def __init__(
        self,
        ftp: ftplib.FTP,
        sock: socket.socket,
        size: int,
        uri: str,
        give_back: Callable[[ftplib.FTP], None],
    ) -> None:
        self._ftp: ftplib.FTP | None = ftp
        self._sock = sock
        self._left = size
        self._uri = uri
        self._give_back = give_back

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self._left == 0 or self._ftp is None:
            return 0
        view = memoryview(b).cast("B")[: self._left]
        try:
            n = self._sock.recv_into(view)
        except OSError as exc:
            self.close()
            raise map_error(exc, self._uri, "read") from exc
        if n == 0:
            self.close()
            raise TransientError(f"the download of {redact(self._uri)} ended {self._left} bytes early; retry")
        self._left -= n
        if self._left == 0:
            self._finish()
        return n

    def _finish(self) -> None:
        """Read to the end of the data and the server's reply; the connection goes back."""
        ftp, self._ftp = self._ftp, None
        assert ftp is not None
        try:
            extra = self._sock.recv(1)
            self._sock.close()
            if extra:
                raise TransientError(f"{redact(self._uri)} grew while it was read (replaced); retry")
            ftp.voidresp()
        except BaseException as exc:
            ftp.close()
            if isinstance(exc, Exception):
                raise map_error(exc, self._uri, "read") from exc
            raise
        self._give_back(ftp)

    def close(self) -> None:
        ftp, self._ftp = self._ftp, None
        if ftp is not None:  # cut mid-transfer: the connection's state is unknown
            self._sock.close()
            ftp.close()
        super().close()
