"""Logged-in FTP control connections, kept alive between requests, per process."""

from __future__ import annotations

import ftplib
from collections.abc import Iterator
from contextlib import contextmanager

from flyte_checkpoint.errors import CheckpointError
from flyte_checkpoint.storage.kit import PerProcess
from flyte_checkpoint.storage.kit import per_process_lock as lock

from .config import FtpConfig
from .errors import map_error

#: Idle connections kept per process; more are closed when given back.
KEEP = 8


class Connections:
    """``with pool.connection(uri, action) as ftp``: a logged-in ``ftplib.FTP`` (binary mode).

    A connection that raised is closed instead of kept (its state is unknown); errors leave
    mapped to the project's (``map_error``). A forked child builds its own idle list.
    """

    def __init__(self, config: FtpConfig) -> None:
        self.config = config
        host, _, port = config.endpoint.rpartition(":")
        self.host, self.port = host or config.endpoint, int(port or 21)
        self.shown = config.endpoint  # the server, as messages name it
        self._idle: PerProcess[list[ftplib.FTP]] = PerProcess(list)
        self._lock = lock()

    def open(self) -> ftplib.FTP:
        """A new logged-in connection (ftplib's exceptions, unmapped)."""
        ftp = ftplib.FTP(timeout=self.config.timeout, encoding="utf-8")
        try:
            ftp.connect(self.host, self.port)
            ftp.login(self.config.user, self.config.password)
            ftp.voidcmd("TYPE I")
        except BaseException:
            ftp.close()
            raise
        return ftp

    def open_mapped(self, uri: str, action: str) -> ftplib.FTP:
        """A new connection of the caller's own (not kept); errors mapped."""
        try:
            return self.open()
        except ftplib.all_errors as exc:
            raise map_error(exc, uri, action, self.shown) from exc

    @contextmanager
    def connection(self, uri: str, action: str) -> Iterator[ftplib.FTP]:
        with self._lock.get():
            idle = self._idle.get()
            ftp = idle.pop() if idle else None
        try:
            if ftp is None:
                ftp = self.open()
            yield ftp
        except BaseException as exc:
            if ftp is not None:
                ftp.close()
            if isinstance(exc, ftplib.all_errors) and not isinstance(exc, CheckpointError):
                raise map_error(exc, uri, action, self.shown) from exc
            raise
        self.give_back(ftp)

    def give_back(self, ftp: ftplib.FTP) -> None:
        with self._lock.get():
            idle = self._idle.get()
            if len(idle) < KEEP:
                idle.append(ftp)
                return
        ftp.close()

    def close(self) -> None:
        idle = self._idle.take() or []
        for ftp in idle:
            ftp.close()
