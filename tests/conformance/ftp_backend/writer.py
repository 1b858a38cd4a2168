"""Writes on the kit's PartWriter: one ``STOR`` stream to a hidden name beside the object, parts
sent in order on its data connection, then ``RNFR``/``RNTO`` over the object at the commit (a
rename: the object appears whole or not at all); an abort deletes the hidden file."""

from __future__ import annotations

import ftplib
import io
import socket
import uuid
from typing import TYPE_CHECKING, Any

from flyte_checkpoint.errors import StoreError
from flyte_checkpoint.storage.kit import PartWriter
from flyte_checkpoint.uri import redact

from .errors import map_error
from .uris import HIDDEN, path

if TYPE_CHECKING:
    from .store import FtpStore

#: A file takes any number of parts of one size.
UNBOUNDED = 2**62


class FtpWriter(PartWriter):
    """One object's write; parts go one at a time, in order, on one data connection."""

    def __init__(self, store: FtpStore, uri: str) -> None:
        config = store.config
        super().__init__(
            uri,
            part_size=config.part_size,
            max_concurrency=config.max_concurrency,
            pool=store.pool,
            double_every=UNBOUNDED,
            max_parts=UNBOUNDED,
            max_part_size=config.part_size,
            ordered=True,
        )
        self._store = store
        self._loc = store.locate(uri)
        self._target = path(self._loc)
        folder, _, name = self._target.rpartition("/")
        self._hidden = self._hidden_name(folder, name)
        self._ftp: ftplib.FTP | None = None
        self._sock: socket.socket | None = None
        self._sent = 0

    def _hidden_name(self, folder: str, name: str) -> str:
        """A name of this write's own beside the object (two writers never share one)."""
        return f"{folder}/{HIDDEN}{uuid.uuid4().hex}-{name}"

    def _fail(self, exc: BaseException) -> BaseException:
        return map_error(exc, self.uri, "write", self._store.connections.shown)

    # -- the kit's hooks ---------------------------------------------------------------

    def _put_whole(self, data: bytes | bytearray | memoryview) -> None:
        try:
            with self._store.connections.connection(self.uri, "write") as ftp:
                self._store.stor(
                    ftp,
                    self._loc,
                    self.uri,
                    self._hidden,
                    lambda: ftp.storbinary(f"STOR {self._hidden}", io.BytesIO(data)),
                )
                self._commit_hidden(ftp, len(data))
        except BaseException:
            self._delete_hidden()
            raise

    def _start(self) -> None:
        ftp = self._ftp = self._store.connections.open_mapped(self.uri, "write")
        self._sock = self._store.stor(
            ftp, self._loc, self.uri, self._hidden, lambda: ftp.transfercmd(f"STOR {self._hidden}")
        )

    def _send_part(self, number: int, data: Any) -> Any:
        assert self._sock is not None
        try:
            self._sock.sendall(data)
        except OSError as exc:
            raise self._fail(exc) from exc
        self._sent += len(data)
        return len(data)

    def _complete(self, results: list[Any], tail: memoryview | None) -> None:
        ftp, sock = self._ftp, self._sock
        assert ftp is not None and sock is not None
        try:
            if tail is not None and len(tail):
                sock.sendall(tail)
                self._sent += len(tail)
            sock.close()
            self._sock = None
            ftp.voidresp()  # 226: the server has the whole file
            self._commit_hidden(ftp, self._sent)
        except ftplib.all_errors as exc:
            raise self._fail(exc) from exc
        self._ftp = None
        self._store.connections.give_back(ftp)

    def _commit_hidden(self, ftp: ftplib.FTP, expected: int) -> None:
        """Check the hidden file holds every byte sent, then rename it over the object."""
        size = ftp.size(self._hidden)
        if size != expected:
            raise StoreError(
                f"the server stored {size} of the {expected} bytes sent to {redact(self.uri)}; nothing"
                " was committed: retry the save"
            )
        ftp.rename(self._hidden, self._target)

    def _cancel(self) -> None:  # safe to repeat, and harmless after a commit
        sock, self._sock = self._sock, None
        ftp, self._ftp = self._ftp, None
        if sock is not None:
            sock.close()
        if ftp is not None:
            ftp.close()
        self._delete_hidden()

    def _delete_hidden(self) -> None:
        """Best effort: a hidden file left behind is invisible to listings, and harmless."""
        try:
            with self._store.connections.connection(self.uri, "abort") as ftp:
                try:
                    ftp.delete(self._hidden)
                except ftplib.error_perm:
                    pass  # never created, or already gone
        except Exception:  # cleanup must not hide the error that caused it
            pass
