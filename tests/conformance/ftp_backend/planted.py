"""Bugs a platform team could plant in the FTP store, one per variant (issue 33's last trial).

``build_planted(kind, endpoint)`` is the store with the bug ``kind`` (a name of :data:`PLANTED`);
``test_ftp_planted.py`` shows each one's harm through a plain ``Checkpoint`` or listing, and
``test_ftp_catches.py`` that the suites fail it, naming the promise.
"""

from __future__ import annotations

import ftplib
from typing import Any

from flyte_checkpoint.errors import CheckpointPermissionError
from flyte_checkpoint.storage.kit import Location

from . import reader, store, writer
from .connections import Connections
from .errors import reply_code
from .uris import HIDDEN, path


class TempErrorsIgnored(writer.FtpWriter):
    """A 4xx answer to the commit's rename taken for "busy, the server finishes it"."""

    def _commit_hidden(self, ftp: ftplib.FTP, expected: int) -> None:
        try:
            super()._commit_hidden(ftp, expected)
        except ftplib.error_temp:
            pass


class DeleteThenRename(writer.FtpWriter):
    """``DELE`` the object before ``RNTO`` (for servers that refuse to rename over a file)."""

    def _commit_hidden(self, ftp: ftplib.FTP, expected: int) -> None:
        try:
            ftp.delete(self._target)
        except ftplib.error_perm:
            pass  # not there yet
        super()._commit_hidden(ftp, expected)


class FixedTempName(writer.FtpWriter):
    """One hidden name per object (``.part-NAME``): two writers of one object share it."""

    def _hidden_name(self, folder: str, name: str) -> str:
        return f"{folder}/{HIDDEN}{name}"


class EarlyEndAccepted(reader.FtpStream):
    """A data connection that ends is taken for the end of the object."""

    def readinto(self, b: Any) -> int:
        if self._ftp is not None and self._left:
            n = self._sock.recv_into(memoryview(b).cast("B")[: self._left])
            self._left = self._left - n if n else 0
            if self._left == 0:
                self._sock.close()
                ftp, self._ftp = self._ftp, None
                ftp.voidresp()
                self._give_back(ftp)
            return n
        return 0


class PasswordShown(Connections):
    """A refused login's message shows the credentials tried, "to help debugging"."""

    def open(self) -> ftplib.FTP:
        try:
            return super().open()
        except ftplib.error_perm as exc:
            config = self.config
            raise CheckpointPermissionError(
                f"login to {config.endpoint} as {config.user}/{config.password} refused: {exc}"
            ) from exc


class Planted(store.FtpStore):
    """The FTP store with the bug ``kind``."""

    kind = ""

    def __init__(self, kind: str, **settings: Any) -> None:
        self.kind = kind
        super().__init__(**settings)
        if kind == "DeniedIsAbsent":
            self.absent = self._any_550  # type: ignore[method-assign]
        if kind == "PasswordShown":
            self.connections = PasswordShown(self.config)

    def open_write(self, uri: str) -> writer.FtpWriter:
        cls = {w.__name__: w for w in (TempErrorsIgnored, DeleteThenRename, FixedTempName)}
        return cls.get(self.kind, writer.FtpWriter)(self, uri)

    def open_read(self, uri: str) -> Any:
        stream = super().open_read(uri)
        if self.kind == "EarlyEndAccepted":
            stream.raw.__class__ = EarlyEndAccepted  # type: ignore[attr-defined]
        return stream

    def stat(self, uri: str) -> int | None:
        if self.kind != "MissingBucketIsAbsent":
            return super().stat(uri)
        # "MLST says no such file: no object" (the bucket is never asked about)
        found = self._call(uri, "stat", lambda ftp: store.facts(ftp, path(self.locate(uri))))
        return int(found["size"]) if found and found.get("type") == "file" else None

    def _check_bucket(self, loc: Location, uri: str, ftp: ftplib.FTP, action: str) -> None:
        if self.kind != "MkdirCreatesBucket":
            return super()._check_bucket(loc, uri, ftp, action)
        try:  # "make sure the bucket is there": MKD it (a mistyped one too)
            ftp.mkd(f"/{loc.bucket}")
        except ftplib.error_perm:
            pass

    @staticmethod
    def _any_550(exc: BaseException) -> bool:
        """ "550 Requested action not taken: file unavailable": taken for "no such file"."""
        return reply_code(exc) == "550"

    def list(self, prefix: str) -> Any:
        if self.kind == "PrefixAsFolder":  # "a prefix is a folder": list what is inside it
            return super().list(prefix if prefix.endswith("/") else f"{prefix}/")
        return super().list(prefix)

    def _listed(self, name: str) -> bool:  # type: ignore[override]
        return self.kind == "HiddenListed" or super()._listed(name)


class RangeEndInclusive(Planted):
    """A range's end taken as inclusive (``start + length - 1``), and the last byte read by
    ``recv`` left out: a range one byte short."""

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        return super().read_range(uri, start, length - 1)


#: Each planted bug: its kind -> what it does (the report's table).
PLANTED = {
    "TempErrorsIgnored": "a 4xx answer to the commit's RNTO ignored",
    "EarlyEndAccepted": "a download whose data connection ends early returned short",
    "PrefixAsFolder": "list(prefix) lists the folder prefix/",
    "HiddenListed": "list() shows the hidden names of saves in flight or killed",
    "MissingBucketIsAbsent": "stat in a missing bucket answers None",
    "MkdirCreatesBucket": "a write in a missing bucket makes the bucket",
    "DeleteThenRename": "the commit deletes the object, then renames over it",
    "FixedTempName": "every write of one object uses one hidden name",
    "RangeEndInclusive": "read_range one byte short when it reaches the object's end",
    "DeniedIsAbsent": "stat takes every 550 (Not enough privileges too) for no such file",
    "PasswordShown": "a refused login's message shows the password tried",
}


def build_planted(kind: str, endpoint: str, _upstream: object = None, **settings: Any) -> store.FtpStore:
    """The store of the server at ``endpoint`` with the bug ``kind`` (module level: it pickles)."""
    from .server import PASSWORD, USER

    cls = RangeEndInclusive if kind == "RangeEndInclusive" else Planted
    base = {"endpoint": endpoint, "user": USER, "password": PASSWORD, "part_size": 256 * 1024}
    return cls(kind, **{**base, "timeout": 20.0, **settings})
