"""The store: ``ftpstore://BUCKET/KEY`` is ``/BUCKET/KEY`` on the configured FTP server."""

from __future__ import annotations

import ftplib
import io
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, TypeVar

from flyte_checkpoint.errors import NotFoundError, StoreError, TransientError
from flyte_checkpoint.storage import BlobStore
from flyte_checkpoint.storage.kit import Location, StorePool
from flyte_checkpoint.uri import redact

from .config import FtpConfig
from .connections import Connections
from .errors import container_missing, is_absent, map_error, reply_code
from .reader import FtpStream
from .uris import HIDDEN, parse, path
from .writer import FtpWriter

T = TypeVar("T")
#: Tries to open a read whose object was replaced between its facts and its RETR.
OPEN_TRIES = 3
#: The MLST/MLSD facts the store reads (an MLSD with fewer would narrow later MLSTs too).
FACTS = ("type", "size", "modify", "unique")


def facts(
    ftp: ftplib.FTP, where: str, absent: Callable[[BaseException], bool] = is_absent
) -> dict[str, str] | None:
    """``MLST``'s facts of ``where`` (lower-case names), or None when it does not exist."""
    try:
        reply = ftp.sendcmd(f"MLST {where}")
    except ftplib.error_perm as exc:
        if absent(exc):
            return None
        raise
    line = next(line for line in reply.splitlines()[1:] if line.startswith(" "))
    found, _, _ = line.strip().partition(" ")
    return {k.lower(): v for k, _, v in (f.partition("=") for f in found.split(";") if f)}


class FtpStore(BlobStore):
    """``FtpStore(endpoint="HOST:PORT", user=..., password=...)`` or ``FtpStore(config)``.

    One instance serves every thread of a process through kept-alive control connections.
    """

    supports_ranges = True
    #: Whether an ftplib error says the path does not exist (a denial is not that).
    absent = staticmethod(is_absent)
    read_range_size = None  # one RETR reads the whole object (see reader.py: FTP cannot pin ranges)

    def __init__(self, config: FtpConfig | None = None, **settings: Any) -> None:
        self.config = config if config is not None else FtpConfig.resolve(**settings)
        self.part_size: int = self.config.part_size
        self.pool = StorePool("ftpstore", self.config.max_concurrency)
        self.connections = Connections(self.config)

    def locate(self, uri: str, *, want_key: bool = True) -> Location:
        return parse(uri, want_key=want_key)

    # -- helpers ---------------------------------------------------------------------------

    def _call(self, uri: str, action: str, fn: Callable[[ftplib.FTP], T]) -> T:
        with self.connections.connection(uri, action) as ftp:
            return fn(ftp)

    def _check_bucket(self, loc: Location, uri: str, ftp: ftplib.FTP, action: str) -> None:
        """ContainerNotFoundError (found while trying to ``action`` ``uri``) unless BUCKET is a
        folder on the server."""
        found = facts(ftp, f"/{loc.bucket}")
        if found is None or found.get("type") not in ("dir", "cdir", "pdir"):
            raise container_missing(uri, action, config=self.config)

    def _absent(self, loc: Location, uri: str, ftp: ftplib.FTP) -> NotFoundError:
        """The error for an absent object: ContainerNotFoundError when its bucket is what is absent."""
        self._check_bucket(loc, uri, ftp, "read")
        return NotFoundError(f"no object at {redact(uri)}")

    def stor(self, ftp: ftplib.FTP, loc: Location, uri: str, target: str, send: Callable[[], T]) -> T:
        """Run ``send`` (a STOR to ``target``); when its folder is missing, make it and send again."""
        try:
            try:
                return send()
            except ftplib.error_perm as exc:
                if not is_absent(exc):
                    raise
            self._check_bucket(loc, uri, ftp, "write")
            folder = f"/{loc.bucket}"
            for part in target.split("/")[2:-1]:
                folder = f"{folder}/{part}"
                try:
                    ftp.mkd(folder)
                except ftplib.error_perm as exc:
                    if "exists" not in str(exc).lower():
                        raise
            try:
                return send()
            except ftplib.error_perm as exc:
                if is_absent(exc):  # the folder is still missing: a part of the path is a file
                    raise StoreError(
                        f"cannot write {redact(uri)}: a part of its path is an object, and on FTP a"
                        " name is a file or a folder, not both; choose a key that is not under an"
                        " object's name"
                    ) from exc
                raise
        except ftplib.all_errors as exc:
            raise map_error(exc, uri, "write", self.connections.shown) from exc

    # -- BlobStore -------------------------------------------------------------------------

    def stat(self, uri: str) -> int | None:
        loc = self.locate(uri)

        def size(ftp: ftplib.FTP) -> int | None:
            found = facts(ftp, path(loc), self.absent)
            if found is None:
                self._check_bucket(loc, uri, ftp, "stat")
                return None
            return int(found["size"]) if found.get("type") == "file" else None  # a folder is no object

        return self._call(uri, "stat", size)

    def open_read(self, uri: str) -> BinaryIO:
        loc = self.locate(uri)
        where = path(loc)
        for _ in range(OPEN_TRIES):
            before = self._call(uri, "read", lambda ftp: facts(ftp, where))
            if before is None or before.get("type") != "file":
                raise self._call(uri, "read", lambda ftp: self._absent(loc, uri, ftp))
            ftp = self.connections.open_mapped(uri, "read")
            try:
                sock = ftp.transfercmd(f"RETR {where}")
            except ftplib.all_errors as exc:
                ftp.close()
                if isinstance(exc, ftplib.error_perm) and is_absent(exc):
                    continue  # deleted or replaced since MLST: look again
                raise map_error(exc, uri, "read", self.connections.shown) from exc
            try:
                after = self._call(uri, "read", lambda ftp: facts(ftp, where))
            except BaseException:
                sock.close()
                ftp.close()
                raise
            if after == before:  # the file the server opened is the one MLST described
                raw = FtpStream(ftp, sock, int(before["size"]), uri, self.connections.give_back)
                return io_buffered(raw)
            sock.close()
            ftp.close()
        raise TransientError(f"{redact(uri)} was replaced {OPEN_TRIES} times while it was opened; retry")

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        """One ``REST`` + ``RETR`` (one version: the file the server opened), read up to
        ``length`` bytes; a data connection that ends before the server's ``226`` raises."""
        loc = self.locate(uri)
        where = path(loc)
        if length <= 0 or start < 0:
            if self.stat(uri) is None:
                raise NotFoundError(f"no object at {redact(uri)}")
            return b""
        ftp = self.connections.open_mapped(uri, "read")
        try:
            try:
                sock = ftp.transfercmd(f"RETR {where}", rest=start)
            except ftplib.error_perm as exc:
                if reply_code(exc) == "554":  # REST past the end: nothing there
                    ftp.close()
                    if self.stat(uri) is None:
                        raise NotFoundError(f"no object at {redact(uri)}") from exc
                    return b""
                raise
            chunks = bytearray()
            with sock:
                while len(chunks) < length:
                    data = sock.recv(min(length - len(chunks), 1 << 20))
                    if not data:
                        break
                    chunks += data
            if len(chunks) < length:
                ftp.voidresp()  # the object ended (226), or the transfer was cut (an error)
            ftp.close()  # or stopped at the range's end, mid-transfer: its state is unknown
            return bytes(chunks)
        except ftplib.all_errors as exc:
            ftp.close()
            if isinstance(exc, ftplib.error_perm) and is_absent(exc):
                raise self._call(uri, "read", lambda ftp: self._absent(loc, uri, ftp)) from exc
            raise map_error(exc, uri, "read", self.connections.shown) from exc

    def open_write(self, uri: str) -> FtpWriter:
        return FtpWriter(self, uri)

    def delete(self, uri: str) -> None:
        loc = self.locate(uri)

        def delete(ftp: ftplib.FTP) -> None:
            try:
                ftp.delete(path(loc))
            except ftplib.error_perm as exc:
                if not is_absent(exc):
                    raise
                self._check_bucket(loc, uri, ftp, "delete")  # absent is fine, in a bucket that exists

        self._call(uri, "delete", delete)

    def list(self, prefix: str) -> Iterator[str]:
        loc = self.locate(prefix, want_key=False)
        folder, _, start = loc.key.rpartition("/")

        def walk(ftp: ftplib.FTP) -> list[str]:
            self._check_bucket(loc, prefix, ftp, "list")
            found: list[str] = []
            todo = [(folder, start)]
            while todo:
                rel, name_prefix = todo.pop()
                try:
                    entries = list(
                        ftp.mlsd(f"/{loc.bucket}/{rel}" if rel else f"/{loc.bucket}", facts=list(FACTS))
                    )
                except ftplib.error_perm as exc:
                    if is_absent(exc):
                        continue  # no such folder: nothing under it
                    raise
                for name, entry in entries:
                    if not name.startswith(name_prefix) or not self._listed(name):
                        continue
                    key = f"{rel}/{name}" if rel else name
                    kind = entry.get("type")
                    if kind == "file":
                        found.append(key)
                    elif kind == "dir":
                        todo.append((key, ""))
            return found

        keys = self._call(prefix, "list", walk)
        return iter(sorted(loc.uri(key) for key in keys))

    @staticmethod
    def _listed(name: str) -> bool:
        """Whether a file of this name is an object (a hidden one is a write in flight, or one
        a killed process left)."""
        return not name.startswith(HIDDEN)

    def close(self) -> None:
        self.connections.close()
        self.pool.close()


def io_buffered(raw: FtpStream) -> BinaryIO:
    """``read(n)`` returns ``n`` bytes until the end, however the server's packets fall."""
    return io.BufferedReader(raw, buffer_size=1 << 16)


def make_store(**settings: Any) -> FtpStore:
    """The registry's factory: ``settings`` are those given to ``configure_store`` for the URI."""
    return FtpStore(**settings)
