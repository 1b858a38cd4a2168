"""A toy network store on the backend kit (for toyserver.py), correct, and broken on purpose.

:class:`ToyStore` is a backend as CONTRIBUTING.md describes one: ``toy://BUCKET/KEY`` parsed by
the kit, a writer on :class:`~flyte_checkpoint.storage.kit.PartWriter` (one PUT for a small
object; else an upload started, parts staged from the store's pool, committed at close, discarded
on failure), a reader on :class:`~flyte_checkpoint.storage.kit.RangedReader` (ranges pinned to
the ETag the first request saw), kept-alive connections per process
(:class:`~flyte_checkpoint.storage.kit.PerProcess`), and HTTP answers mapped by the kit's
``from_status`` and ``transport_failed``, a missing bucket to ``ContainerNotFoundError``.

The broken ones each carry one bug a real backend had, and the suites must fail each, naming
the promise it breaks (``test_suite_catches.py``):

- :class:`PartsInPlace`: parts land in the object as they are sent (not atomic);
- :class:`DeniedIsAbsent`: HTTP 403 mapped to not-found;
- :class:`ServerErrorsIgnored`: a write takes only a 4xx answer for an error (a 5xx to the
  commit passes);
- :class:`LastPartDropped`: the last part is left out of the commit when the object is an exact
  multiple of the part size;
- :class:`ShortReads`: ``read(n)`` stops at the end of a read range;
- :class:`MissingBucketIsAbsent`: ``stat`` catches ``NotFoundError``, so a missing bucket's
  ``ContainerNotFoundError`` (a NotFoundError) becomes "no object";
- :class:`PrefixAsFolder`: ``list(prefix)`` lists the folder the prefix is in;
- :class:`ViewKept`: the writer keeps a view of the caller's buffer, not a copy;
- :class:`StatErrorsAbsent`: ``stat`` takes any error for "no object" (a 503 too);
- :class:`UnquotedKeys`: keys go into the request's path unquoted (``?`` and ``#`` cut them);
- :class:`UnsortedList` / :class:`PrefixIgnored` (memory stores): ``list`` out of order, or
  every object whatever the prefix;
- :class:`FileInPlace` (a file store): the writer writes into the object's file itself.

Two broken servers (``toyserver.toy_server``) pair with the correct store: one that writes an
object in place as its bytes arrive, one whose replace deletes the old object first.
The ``build_*`` functions are what a :class:`~flyte_checkpoint.testing.StoreRecipe` names (a
crash test's child imports them).
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO
from urllib.parse import quote, urlsplit

from flyte_checkpoint.errors import CheckpointError, ContainerNotFoundError, NotFoundError
from flyte_checkpoint.storage.blobstore import BlobStore, BlobWriter
from flyte_checkpoint.storage.kit import (
    Location,
    PartWriter,
    PerProcess,
    RangedReader,
    StorePool,
    from_status,
    parse_location,
    transport_failed,
)
from flyte_checkpoint.storage.stores.local import LocalStore
from flyte_checkpoint.storage.stores.memory import MemoryStore
from flyte_checkpoint.uri import local_path, redact

SCHEMES = ("toy",)
HINT = "check the toy server's credentials"
PART = 256 * 1024
RANGE = 64 * 1024


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


class ToyStore(BlobStore):
    """``toy://BUCKET/KEY`` on a toy server (toyserver.py)."""

    supports_ranges = True
    reader_class = RangedReader

    def __init__(
        self, endpoint: str, part_size: int | None = PART, timeout: float = 30.0, read_range_size: int = RANGE
    ) -> None:
        parts = urlsplit(endpoint)
        assert parts.hostname and parts.port, endpoint
        self.host, self.port, self.endpoint = parts.hostname, parts.port, endpoint
        self.part_size = part_size
        self.read_range_size = read_range_size
        self.timeout = timeout
        self.pool = StorePool("toy", 4)
        self._idle: PerProcess[list[http.client.HTTPConnection]] = PerProcess(list)
        self._idle_lock = threading.Lock()

    # -- requests on kept-alive connections --------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        uri: str,
        action: str,
        body: bytes | bytearray | memoryview = b"",
        headers: dict[str, str] | None = None,
    ) -> Answer:
        """Send one request; a 4xx or 5xx answer raises the project's error (:meth:`error`)."""
        conn = self._connection()
        try:
            conn.request(method, path, body=bytes(body), headers=headers or {})
            response = conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise transport_failed(exc, uri=uri, action=action, endpoint=self.endpoint) from exc
        answer = Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, data)
        if response.will_close:
            conn.close()
        else:
            with self._idle_lock:
                self._idle.get().append(conn)
        if self.failed(answer.status, action):
            raise self.error(answer, uri, action)
        return answer

    def failed(self, status: int, action: str) -> bool:
        return status >= 400

    def _connection(self) -> http.client.HTTPConnection:
        with self._idle_lock:
            idle = self._idle.get()
            if idle:
                return idle.pop()
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def error(self, answer: Answer, uri: str, action: str) -> CheckpointError:
        code = answer.headers.get("x-error", "")
        if answer.status == 404 and code == "NoSuchBucket":
            bucket = parse_location(uri, schemes=SCHEMES, want_key=False, cloud="toy", form=FORM).bucket
            return ContainerNotFoundError(
                f"the bucket {bucket!r} of {redact(uri)} does not exist: create it, or fix the URI"
            )
        return from_status(answer.status, uri=uri, action=action, detail=code, permission_hint=HINT)

    # -- URIs ------------------------------------------------------------------------------

    @staticmethod
    def location(uri: str, *, want_key: bool = True) -> Location:
        return parse_location(uri, schemes=SCHEMES, want_key=want_key, cloud="toy", form=FORM)

    def object_path(self, uri: str, query: str = "") -> str:
        loc = self.location(uri)
        return f"/o/{quote(loc.bucket, safe='')}/{quote(loc.key, safe='')}" + (f"?{query}" if query else "")

    # -- the contract --------------------------------------------------------------------

    def open_read(self, uri: str) -> BinaryIO:
        head = self.request("HEAD", self.object_path(uri), uri, "read")
        etag = head.headers.get("etag", "")

        def fetch(offset: int, view: memoryview) -> int:
            return self.fetch(uri, offset, view, etag)

        return self.reader(uri, int(head.headers["x-size"]), fetch)  # type: ignore[return-value]

    def reader(self, uri: str, size: int, fetch: Any) -> RangedReader:
        return self.reader_class(
            uri,
            size=size,
            fetch=fetch,
            range_size=self.read_range_size,
            concurrency=2,
            pool=self.pool,
            on_error=lambda exc: transport_failed(exc, uri=uri, action="read", endpoint=self.endpoint),
        )

    def fetch(self, uri: str, offset: int, view: memoryview, etag: str | None = None) -> int:
        """Fill ``view`` with the object's bytes from ``offset`` (of version ``etag``)."""
        headers = {"Range": f"bytes={offset}-{offset + len(view) - 1}"}
        if etag:
            headers["If-Match"] = etag
        data = self.request("GET", self.object_path(uri), uri, "read", headers=headers).body
        n = min(len(data), len(view))
        view[:n] = data[:n]
        return n

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        if length <= 0:
            if self.stat(uri) is None:
                raise NotFoundError(f"no object at {redact(uri)}")
            return b""
        # one request: a size from a HEAD and bytes from a later GET may be of two versions
        # (an overwrite between them gave the old size's count of the new version's bytes)
        buf = bytearray(length)
        return bytes(buf[: self.fetch(uri, start, memoryview(buf))])

    def stat(self, uri: str) -> int | None:
        try:
            return int(self.request("HEAD", self.object_path(uri), uri, "stat").headers["x-size"])
        except ContainerNotFoundError:  # a NotFoundError too: caught first, it is no "absent"
            raise
        except NotFoundError:
            return None

    def delete(self, uri: str) -> None:
        self.request("DELETE", self.object_path(uri), uri, "delete")

    def list(self, prefix: str) -> Iterator[str]:
        loc = self.location(prefix, want_key=False)
        path = f"/list/{quote(loc.bucket, safe='')}?prefix={quote(loc.key, safe='')}"
        body = self.request("GET", path, prefix, "list").body
        yield from (loc.uri(key) for key in body.decode().split("\n") if key)

    def open_write(self, uri: str) -> BlobWriter:
        if not self.part_size:
            return _WholeWriter(self, uri)
        return ToyWriter(self, uri)

    def close(self) -> None:
        self.pool.close()
        with self._idle_lock:
            idle = self._idle.take() or []
        for conn in idle:
            conn.close()


FORM = "toy://BUCKET/KEY"


class ToyWriter(PartWriter):
    """One PUT for an object of at most one part; else an upload: parts staged, then committed."""

    def __init__(self, store: ToyStore, uri: str) -> None:
        assert store.part_size
        super().__init__(
            uri,
            part_size=store.part_size,
            max_concurrency=2,
            pool=store.pool,
            double_every=10_000,
            max_parts=10_000,
            max_part_size=store.part_size,
        )
        self.store = store
        self.upload: str | None = None

    def _put_whole(self, data: bytes | bytearray) -> None:
        self.store.request("PUT", self.store.object_path(self.uri), self.uri, "write", data)

    def _start(self) -> None:
        answer = self.store.request("POST", self.store.object_path(self.uri, "uploads"), self.uri, "write")
        self.upload = answer.body.decode()

    def _send_part(self, number: int, data: bytes | bytearray) -> int:
        self.store.request("PUT", f"/u/{self.upload}/{number}", self.uri, "write", data)
        return number

    def _complete(self, results: list[Any], tail: memoryview | None) -> None:
        query = f"commit={self.upload}&parts={len(results)}"
        self.store.request("POST", self.store.object_path(self.uri, query), self.uri, "write")

    def _cancel(self) -> None:
        if self.upload is not None:
            self.store.request("DELETE", f"/u/{self.upload}", self.uri, "abort")


class _WholeWriter(BlobWriter):
    """The whole object in one PUT at the commit (a store with no part size)."""

    def __init__(self, store: ToyStore, uri: str) -> None:
        super().__init__(uri)
        self.store = store
        self.buf = bytearray()

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        self.buf += data

    def _commit(self) -> None:
        self.store.request("PUT", self.store.object_path(self.uri), self.uri, "write", self.buf)

    def _abort(self) -> None:
        self.buf = bytearray()


# -- broken stores -------------------------------------------------------------------------


class _InPlaceWriter(ToyWriter):
    """Broken: each part goes straight into the object at its offset."""

    def _start(self) -> None:
        pass

    def _send_part(self, number: int, data: bytes | bytearray) -> int:
        offset = f"offset={(number - 1) * self.part_size}"
        self.store.request("PUT", self.store.object_path(self.uri, offset), self.uri, "write", data)
        return number

    def _complete(self, results: list[Any], tail: memoryview | None) -> None:
        pass

    def _cancel(self) -> None:
        pass


class PartsInPlace(ToyStore):
    """Non-atomic writer: parts land in the object as they are sent."""

    def open_write(self, uri: str) -> BlobWriter:
        return _InPlaceWriter(self, uri)


class DeniedIsAbsent(ToyStore):
    """403 mapped to not-found: a refused stat says "no object", a refused read NotFoundError."""

    def error(self, answer: Answer, uri: str, action: str) -> CheckpointError:
        if answer.status == 403:
            return NotFoundError(f"no object at {uri}")
        return super().error(answer, uri, action)


class ServerErrorsIgnored(ToyStore):
    """A write takes only a 4xx answer for an error: a 5xx to the start, a part or the commit
    passes as success (reads are checked right)."""

    def failed(self, status: int, action: str) -> bool:
        return status >= 400 and (action != "write" or status < 500)


class _LastPartDroppedWriter(ToyWriter):
    def _complete(self, results: list[Any], tail: memoryview | None) -> None:
        if self.bytes_written % self.part_size == 0:
            results = results[:-1]  # the "remainder" part of an exact multiple is taken for empty
        super()._complete(results, tail)


class LastPartDropped(ToyStore):
    """The commit leaves out the last part when the object is an exact multiple of the part size."""

    def open_write(self, uri: str) -> BlobWriter:
        return _LastPartDroppedWriter(self, uri)


class _ShortReader(RangedReader):
    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            return super().read(size)
        return bytes(self.read1(size))  # what is left of the current range, at most


class ShortReads(ToyStore):
    """``read(n)`` returns what is left of the current read range when that is less than n."""

    reader_class = _ShortReader


class MissingBucketIsAbsent(ToyStore):
    """``stat`` takes any NotFoundError for an absent object, a missing bucket's too."""

    def stat(self, uri: str) -> int | None:
        try:
            return int(self.request("HEAD", self.object_path(uri), uri, "stat").headers["x-size"])
        except NotFoundError:
            return None


class PrefixAsFolder(ToyStore):
    """``list(prefix)`` lists the folder the prefix is in (``.../ckpt-1`` lists ``.../ckpt-2``)."""

    def list(self, prefix: str) -> Iterator[str]:
        return super().list(prefix[: prefix.rfind("/") + 1] if "/" in prefix[6:] else prefix)


class _ViewKeepingWriter(_WholeWriter):
    def __init__(self, store: ToyStore, uri: str) -> None:
        super().__init__(store, uri)
        self.views: list[memoryview] = []

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        self.views.append(memoryview(data))  # the caller's buffer, which it refills

    def _commit(self) -> None:
        self.buf = bytearray(b"".join(self.views))
        super()._commit()


class ViewKept(ToyStore):
    """The writer keeps the caller's buffers (views) until the commit instead of copying them."""

    def open_write(self, uri: str) -> BlobWriter:
        return _ViewKeepingWriter(self, uri)


class StatErrorsAbsent(ToyStore):
    """``stat`` answers "no object" for any failure, a 503 or a reset connection too."""

    def stat(self, uri: str) -> int | None:
        try:
            return super().stat(uri)
        except CheckpointError:
            return None


class UnquotedKeys(ToyStore):
    """Keys go into the request path as they are: ``?`` starts a query, ``#`` a fragment."""

    def object_path(self, uri: str, query: str = "") -> str:
        loc = self.location(uri)
        return f"/o/{loc.bucket}/{quote(loc.key, safe='?#=&')}" + (f"?{query}" if query else "")


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


#: The toy stores' socket timeout: short, so that a stalled download ends in seconds, but not
#: so short that a request answered late on a loaded machine looks stalled (1 s did: on 2 cores
#: at load 8-15, saves through the proxy timed out with no fault in place).
TIMEOUT = 5.0


def build_toy(endpoint: str, part_size: int | None = PART) -> ToyStore:
    return ToyStore(endpoint, part_size, timeout=TIMEOUT)


def build_broken(kind: str, endpoint: str) -> ToyStore:
    """The broken store named ``kind`` (a class of this module) on ``endpoint``."""
    store = globals()[kind](endpoint, PART, timeout=TIMEOUT)
    assert isinstance(store, ToyStore)
    return store


def build_file_in_place(endpoint: None) -> LocalStore:
    return FileInPlace()
