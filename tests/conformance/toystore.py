"""A small network store (``toy://bucket/key``) on toyserver.py, correct and deliberately broken.

:class:`ToyStore` keeps every promise: parts are staged and the object appears whole at the
commit; HTTP answers map through the kit (403 is a permission error, 429/5xx transient);
a broken connection is transient. The broken variants each break one promise:

- :class:`PartsInPlace` (non-atomic writer): each part is written into the object itself;
- :class:`DeniedIsAbsent` (403 mapped to not-found): a refused request means "no object";
- :class:`UnsortedList` / :class:`PrefixIgnored` (memory stores): ``list`` out of order, or
  every object whatever the prefix;
- :class:`FileInPlace` (a file store): the writer writes into the object's file itself.

The fifth, a server that writes in place, is the correct store on ``toy_server(in_place=True)``.
The ``build_*`` functions are what a :class:`~flyte_checkpoint.testing.StoreRecipe` names (a
crash test's child imports them).
"""

from __future__ import annotations

import http.client
import io
import uuid
from collections.abc import Iterator
from typing import BinaryIO
from urllib.parse import quote, urlsplit

from flyte_checkpoint.errors import CheckpointError, NotFoundError
from flyte_checkpoint.storage.blobstore import BlobStore, BlobWriter
from flyte_checkpoint.storage.kit import from_status, transport_failed
from flyte_checkpoint.storage.stores.local import LocalStore
from flyte_checkpoint.storage.stores.memory import MemoryStore
from flyte_checkpoint.uri import local_path

SCHEME = "toy"
HINT = "check the toy server's credentials"


class ToyStore(BlobStore):
    supports_ranges = True

    def __init__(self, endpoint: str, part_size: int | None = 256 * 1024, timeout: float = 30.0) -> None:
        parts = urlsplit(endpoint)
        assert parts.hostname and parts.port
        self.host, self.port, self.endpoint = parts.hostname, parts.port, endpoint
        self.part_size = part_size
        self.timeout = timeout

    # -- one request per connection ----------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        uri: str,
        action: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request(method, path, body=body, headers={"Connection": "close", **(headers or {})})
            response = conn.getresponse()
            data = response.read()
            status = response.status
            size = response.getheader("X-Size")
        except (OSError, http.client.HTTPException) as exc:
            raise transport_failed(exc, uri=uri, action=action, endpoint=self.endpoint) from exc
        finally:
            conn.close()
        if status >= 400:
            raise self.error(status, uri, action)
        return status, (size.encode() if size is not None else data)

    def error(self, status: int, uri: str, action: str) -> CheckpointError:
        return from_status(status, uri=uri, action=action, permission_hint=HINT)

    @staticmethod
    def key(uri: str) -> str:
        assert uri.startswith(f"{SCHEME}://"), uri
        return uri[len(SCHEME) + 3 :]

    def object_path(self, uri: str, query: str = "") -> str:
        return "/o/" + quote(self.key(uri), safe="") + (f"?{query}" if query else "")

    # -- the contract --------------------------------------------------------------------

    def open_read(self, uri: str) -> BinaryIO:
        return io.BytesIO(self.request("GET", self.object_path(uri), uri, "read")[1])

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        size = self.stat(uri)
        if size is None:
            raise NotFoundError(f"no object at {uri}")
        if start >= size or length <= 0:
            return b""
        last = min(size, start + length) - 1
        return self.request(
            "GET", self.object_path(uri), uri, "read", headers={"Range": f"bytes={start}-{last}"}
        )[1]

    def stat(self, uri: str) -> int | None:
        try:
            return int(self.request("HEAD", self.object_path(uri), uri, "stat")[1])
        except NotFoundError:
            return None

    def delete(self, uri: str) -> None:
        self.request("DELETE", self.object_path(uri), uri, "delete")

    def list(self, prefix: str) -> Iterator[str]:
        body = self.request("GET", "/list?prefix=" + quote(self.key(prefix), safe=""), prefix, "list")[1]
        yield from (f"{SCHEME}://{k}" for k in body.decode().split("\n") if k)

    def open_write(self, uri: str) -> BlobWriter:
        return _StagedWriter(self, uri)


class _StagedWriter(BlobWriter):
    """Parts staged on the server, made the object at the commit; whole object at the commit
    when the store has no part size."""

    def __init__(self, store: ToyStore, uri: str) -> None:
        super().__init__(uri)
        self.store = store
        self.upload = uuid.uuid4().hex
        self.buf = bytearray()
        self.parts = 0

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        self.buf += data  # a copy: the caller may reuse its buffer
        part = self.store.part_size
        while part and len(self.buf) >= part:
            self._send(bytes(self.buf[:part]))
            del self.buf[:part]

    def _send(self, part: bytes) -> None:
        self.store.request("PUT", f"/u/{self.upload}/{self.parts}", self.uri, "write", part)
        self.parts += 1

    def _commit(self) -> None:
        if not self.store.part_size:
            self.store.request("PUT", self.store.object_path(self.uri), self.uri, "write", bytes(self.buf))
            return
        if self.buf or not self.parts:
            self._send(bytes(self.buf))
        query = f"commit={self.upload}&parts={self.parts}"
        self.store.request("POST", self.store.object_path(self.uri, query), self.uri, "write")

    def _abort(self) -> None:
        self.buf = bytearray()
        if self.store.part_size:
            self.store.request("DELETE", f"/u/{self.upload}", self.uri, "abort")


# -- broken stores -------------------------------------------------------------------------


class _InPlaceWriter(_StagedWriter):
    """Broken: each part goes straight into the object at its offset."""

    def _send(self, part: bytes) -> None:
        offset = f"offset={self.parts * (self.store.part_size or 0)}"
        self.store.request("PUT", self.store.object_path(self.uri, offset), self.uri, "write", part)
        self.parts += 1

    def _commit(self) -> None:
        if self.buf or not self.parts:
            self._send(bytes(self.buf))

    def _abort(self) -> None:
        self.buf = bytearray()


class PartsInPlace(ToyStore):
    """Non-atomic writer: parts land in the object as they are sent."""

    def open_write(self, uri: str) -> BlobWriter:
        return _InPlaceWriter(self, uri)


class DeniedIsAbsent(ToyStore):
    """403 mapped to not-found: a refused stat says "no object", a refused read NotFoundError."""

    def error(self, status: int, uri: str, action: str) -> CheckpointError:
        if status == 403:
            return NotFoundError(f"no object at {uri}")
        return super().error(status, uri, action)


class UnsortedList(MemoryStore):
    def list(self, prefix: str) -> Iterator[str]:
        yield from sorted(super().list(prefix), reverse=True)


class PrefixIgnored(MemoryStore):
    def list(self, prefix: str) -> Iterator[str]:
        return super().list("memory://")


class _InPlaceFileWriter(BlobWriter):
    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        path = local_path(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(path, "wb")  # noqa: SIM115 - closed by commit or abort

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        self.file.write(data)
        self.file.flush()

    def _commit(self) -> None:
        self.file.close()

    def _abort(self) -> None:
        self.file.close()


class FileInPlace(LocalStore):
    """A file store whose writer truncates and fills the object's own file."""

    def open_write(self, uri: str) -> BlobWriter:
        return _InPlaceFileWriter(uri)


# -- recipes' builders (module level: a crash test's child imports them) -------------------


def build_toy(endpoint: str, part_size: int | None = 256 * 1024) -> ToyStore:
    return ToyStore(endpoint, part_size, timeout=1.0)


def build_parts_in_place(endpoint: str) -> ToyStore:
    return PartsInPlace(endpoint, 256 * 1024, timeout=1.0)


def build_denied_is_absent(endpoint: str) -> ToyStore:
    return DeniedIsAbsent(endpoint, 256 * 1024, timeout=1.0)


def build_file_in_place(endpoint: None) -> LocalStore:
    return FileInPlace()
