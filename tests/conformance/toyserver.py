"""A small HTTP object server on 127.0.0.1 for the toy network store (toystore.py).

Buckets are folders; objects are files in them, named by their key percent-encoded; every
connection is kept alive (HTTP/1.1). Requests (``<key>`` percent-encoded as one path segment;
a missing bucket is 404 with ``X-Error: NoSuchBucket``, a missing object ``NoSuchKey``):

- ``HEAD /o/<bucket>/<key>``: the size (``X-Size``) and ``ETag``;
- ``GET /o/<bucket>/<key>``: the object, or the ``Range: bytes=a-b`` of it (206); with
  ``If-Match: <ETag>`` a 412 when the object is another one now;
- ``PUT /o/<bucket>/<key>``: the whole object, stored when its last byte has arrived (a request
  cut short stores nothing) or, with ``in_place=True`` (a broken server), written into the
  object as the bytes arrive; ``PUT /o/<bucket>/<key>?offset=N``: bytes written into the object
  at ``N`` (a broken writer's parts in place);
- ``POST /o/<bucket>/<key>?uploads``: a new upload, its id the body; ``PUT /u/<upload>/<n>``: a
  staged part; ``POST /o/<bucket>/<key>?commit=<upload>&parts=K``: the object made of the
  staged parts, replacing the old one whole; ``DELETE /u/<upload>``: the upload discarded;
- ``DELETE /o/<bucket>/<key>``; ``GET /list/<bucket>?prefix=P``: the keys that start with P,
  sorted, one a line (UTF-8).

``replace="delete-first"`` (a broken server, as WebDAV's MOVE may be) makes a commit over an
existing object delete it, then wait until some request has found the object absent, then
rename the new one into place: a reader sees the object missing mid-overwrite, every time.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import BinaryIO
from urllib.parse import parse_qs, quote, unquote, urlsplit

from flyte_checkpoint.testing.faultproxy import HANG_GUARD

CHUNK = 64 * 1024


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path, buckets: tuple[str, ...], in_place: bool, replace: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root, self.in_place, self.replace = root, in_place, replace
        self.objects = root / "objects"
        self.uploads = root / "uploads"
        for bucket in buckets:
            (self.objects / bucket).mkdir(parents=True, exist_ok=True)
        self.uploads.mkdir(parents=True, exist_ok=True)
        #: Objects deleted by a delete-first replace, waiting for a request to find them absent.
        self.gaps: dict[Path, threading.Event] = {}
        self.gaps_lock = threading.Lock()

    def handle_error(self, request: object, client_address: object) -> None:
        """Quiet: the fault tests reset connections on purpose."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # a head and a body sent apart would wait for a delayed ACK
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def parse_request(self) -> bool:
        self.body_read = False  # one handler serves every request of a kept-alive connection
        return super().parse_request()

    # -- helpers ---------------------------------------------------------------------

    def _route(self) -> tuple[str, list[str], dict[str, list[str]]]:
        """The kind (``o``, ``u``, ``list``), the other path segments (decoded), the query."""
        parts = urlsplit(self.path)
        kind, *rest = parts.path.lstrip("/").split("/")
        return kind, [unquote(s) for s in rest], parse_qs(parts.query, keep_blank_values=True)

    def _object(self, segments: list[str]) -> Path | None:
        """The file of ``/o/<bucket>/<key>``; None (after answering 404) if the bucket is missing."""
        bucket, key = segments[0], "/".join(segments[1:])
        folder = self.server.objects / bucket
        if not folder.is_dir():
            self._answer(404, b"NoSuchBucket", {"X-Error": "NoSuchBucket"})
            return None
        return folder / quote(key, safe="")

    def _object_of(self, kind: str, segments: list[str]) -> Path | None:
        """The file of an ``/o/`` request; None (after answering 404) for another kind or a
        missing bucket."""
        if kind != "o":
            self._answer(404)
            return None
        return self._object(segments)

    def _answer(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        if not self.body_read:  # an answer before the body was read (an error): drop the body,
            for _ in self._body():  # or the connection's next request would start inside it
                pass
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _absent(self, path: Path) -> None:
        """404 for a missing object; a delete-first replace waiting for this learns it was seen."""
        with self.server.gaps_lock:
            gap = self.server.gaps.get(path)
        if gap is not None:
            gap.set()
        self._answer(404, b"NoSuchKey", {"X-Error": "NoSuchKey"})

    def _body(self) -> Iterator[bytes]:
        """The request body in chunks; stops early (the caller sees fewer bytes) when the client leaves."""
        self.body_read = True
        left = int(self.headers.get("Content-Length") or 0)
        while left > 0:
            chunk = self.rfile.read(min(CHUNK, left))
            if not chunk:
                self.close_connection = True
                return
            left -= len(chunk)
            yield chunk

    def _receive(self) -> str | None:
        """The body into a temporary file; its path, or None if it was cut short."""
        want = int(self.headers.get("Content-Length") or 0)
        fd, tmp = tempfile.mkstemp(dir=self.server.uploads)
        got = 0
        with os.fdopen(fd, "wb") as f:
            for chunk in self._body():
                f.write(chunk)
                got += len(chunk)
        if got != want:
            os.unlink(tmp)
            return None
        return tmp

    def _replace(self, tmp: str, target: Path) -> None:
        if self.server.replace == "delete-first" and target.exists():
            gap = threading.Event()
            with self.server.gaps_lock:
                self.server.gaps[target] = gap
            target.unlink()
            gap.wait(HANG_GUARD)  # until a request found it absent
            with self.server.gaps_lock:
                self.server.gaps.pop(target, None)
        os.replace(tmp, target)

    # -- verbs -----------------------------------------------------------------------

    def do_HEAD(self) -> None:
        kind, segments, _ = self._route()
        path = self._object_of(kind, segments)
        if path is None:
            return
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
        except FileNotFoundError:
            self._absent(path)
            return
        self._answer(200, headers={"X-Size": str(st.st_size), "ETag": _etag(st)})

    def do_GET(self) -> None:
        kind, segments, query = self._route()
        if kind == "list":
            folder = self.server.objects / segments[0]
            if not folder.is_dir():
                self._answer(404, b"NoSuchBucket", {"X-Error": "NoSuchBucket"})
                return
            prefix = query.get("prefix", [""])[0]
            keys = sorted(k for k in (unquote(p.name) for p in folder.iterdir()) if k.startswith(prefix))
            self._answer(200, "\n".join(keys).encode())
            return
        path = self._object_of(kind, segments)
        if path is None:
            return
        try:
            f: BinaryIO = open(path, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            self._absent(path)
            return
        with f:
            st = os.fstat(f.fileno())
            etag = _etag(st)
            wanted = self.headers.get("If-Match")
            if wanted is not None and wanted != etag:
                self._answer(412, b"PreconditionFailed", {"X-Error": "PreconditionFailed"})
                return
            data = f.read()
        ranged = self.headers.get("Range")
        if ranged:
            first, _, last = ranged.removeprefix("bytes=").partition("-")
            start, end = int(first), min(int(last), len(data) - 1)
            self._answer(206, data[start : end + 1], {"ETag": etag})
        else:
            self._answer(200, data, {"ETag": etag})

    def do_PUT(self) -> None:
        kind, segments, query = self._route()
        if kind == "u":
            upload, number = segments
            folder = self.server.uploads / upload
            tmp = self._receive()
            if tmp is None:
                return
            if not folder.is_dir():
                os.unlink(tmp)
                self._answer(404, b"NoSuchUpload", {"X-Error": "NoSuchUpload"})
                return
            os.replace(tmp, folder / number)
            self._answer(200)
            return
        path = self._object(segments)
        if path is None:
            return
        if "offset" in query:
            offset = int(query["offset"][0])
            with open(path, "r+b" if offset and path.exists() else "wb") as f:
                f.seek(offset)
                for chunk in self._body():
                    f.write(chunk)
        elif self.server.in_place:
            with open(path, "wb") as f:
                for chunk in self._body():
                    f.write(chunk)
                    f.flush()
        else:
            tmp = self._receive()
            if tmp is None:
                return
            self._replace(tmp, path)
        self._answer(200)

    def do_POST(self) -> None:
        _, segments, query = self._route()
        path = self._object(segments)
        if path is None:
            return
        if "uploads" in query:
            upload = uuid.uuid4().hex
            (self.server.uploads / upload).mkdir()
            self._answer(200, upload.encode())
            return
        upload, parts = query["commit"][0], int(query["parts"][0])
        staged = self.server.uploads / upload
        if not staged.is_dir():
            self._answer(404, b"NoSuchUpload", {"X-Error": "NoSuchUpload"})
            return
        fd, tmp = tempfile.mkstemp(dir=self.server.uploads)
        with os.fdopen(fd, "wb") as out:
            for n in range(1, parts + 1):
                with open(staged / str(n), "rb") as part:
                    shutil.copyfileobj(part, out)
        self._replace(tmp, path)
        shutil.rmtree(staged, ignore_errors=True)
        self._answer(200)

    def do_DELETE(self) -> None:
        kind, segments, _ = self._route()
        if kind == "u":
            shutil.rmtree(self.server.uploads / segments[0], ignore_errors=True)
            self._answer(204)
            return
        path = self._object(segments)
        if path is not None:
            path.unlink(missing_ok=True)
            self._answer(204)


def _etag(st: os.stat_result) -> str:
    return f'"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"'


@contextmanager
def toy_server(
    root: Path, *, buckets: tuple[str, ...] = ("bucket",), in_place: bool = False, replace: str = "rename"
) -> Iterator[str]:
    """Serve ``root`` on 127.0.0.1 with ``buckets``; yields the endpoint ``http://127.0.0.1:PORT``."""
    server = _Server(root, buckets, in_place, replace)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(30)
