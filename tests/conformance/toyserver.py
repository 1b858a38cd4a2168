"""A small HTTP object server on 127.0.0.1 for the toy network store (toystore.py).

Objects are files in a directory, named by their key percent-encoded. Requests:

- ``HEAD /o/<key>``: the size (404 when absent); ``GET /o/<key>``: the object, or the
  ``Range: bytes=a-b`` of it (206);
- ``PUT /o/<key>``: the whole object, stored when its last byte has arrived (a request cut
  short stores nothing) or, with ``in_place=True`` (a broken server), written into the object
  as the bytes arrive;
- ``PUT /o/<key>?offset=N``: bytes written into the object at ``N`` (a broken writer's parts
  in place);
- ``PUT /u/<upload>/<n>``: a staged part; ``POST /o/<key>?commit=<upload>&parts=K``: the
  object made of the staged parts, replacing the old one whole; ``DELETE /u/<upload>``;
- ``DELETE /o/<key>``; ``GET /list?prefix=P``: the keys that start with P, sorted, one a line.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

CHUNK = 64 * 1024


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path, in_place: bool) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root, self.in_place = root, in_place
        self.objects = root / "objects"
        self.uploads = root / "uploads"
        self.objects.mkdir(parents=True, exist_ok=True)
        self.uploads.mkdir(parents=True, exist_ok=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    # -- helpers ---------------------------------------------------------------------

    def _route(self) -> tuple[str, str, dict[str, list[str]]]:
        parts = urlsplit(self.path)
        kind, _, rest = parts.path.lstrip("/").partition("/")
        return kind, unquote(rest), parse_qs(parts.query)

    def _file(self, key: str) -> Path:
        return self.server.objects / quote(key, safe="")

    def _answer(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _body(self) -> Iterator[bytes]:
        """The request body in chunks; stops early (the caller sees fewer bytes) when the client leaves."""
        left = int(self.headers.get("Content-Length") or 0)
        while left > 0:
            chunk = self.rfile.read(min(CHUNK, left))
            if not chunk:
                self.close_connection = True
                return
            left -= len(chunk)
            yield chunk

    def _receive(self, target: Path) -> bool:
        """The body into ``target``, appearing there only when whole; False if it was cut short."""
        want = int(self.headers.get("Content-Length") or 0)
        fd, tmp = tempfile.mkstemp(dir=self.server.uploads)
        got = 0
        with os.fdopen(fd, "wb") as f:
            for chunk in self._body():
                f.write(chunk)
                got += len(chunk)
        if got != want:
            os.unlink(tmp)
            return False
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, target)
        return True

    # -- verbs -----------------------------------------------------------------------

    def do_HEAD(self) -> None:
        kind, key, _ = self._route()
        path = self._file(key)
        if kind != "o" or not path.is_file():
            self._answer(404)
        else:
            self._answer(200, headers={"X-Size": str(path.stat().st_size)})

    def do_GET(self) -> None:
        kind, key, query = self._route()
        if kind == "list":
            prefix = query.get("prefix", [""])[0]
            keys = sorted(
                k for k in (unquote(p.name) for p in self.server.objects.iterdir()) if k.startswith(prefix)
            )
            self._answer(200, "\n".join(keys).encode())
            return
        path = self._file(key)
        if kind != "o" or not path.is_file():
            self._answer(404, b"NoSuchKey")
            return
        data = path.read_bytes()
        wanted = self.headers.get("Range")
        if wanted:
            first, _, last = wanted.removeprefix("bytes=").partition("-")
            start, end = int(first), min(int(last), len(data) - 1)
            self._answer(206, data[start : end + 1])
        else:
            self._answer(200, data)

    def do_PUT(self) -> None:
        kind, key, query = self._route()
        if kind == "u":
            upload, _, number = key.partition("/")
            ok = self._receive(self.server.uploads / upload / number)
        elif "offset" in query:
            path = self._file(key)
            offset = int(query["offset"][0])
            with open(path, "r+b" if offset and path.exists() else "wb") as f:
                f.seek(offset)
                for chunk in self._body():
                    f.write(chunk)
            ok = True
        elif self.server.in_place:
            with open(self._file(key), "wb") as f:
                for chunk in self._body():
                    f.write(chunk)
                    f.flush()
            ok = True
        else:
            ok = self._receive(self._file(key))
        if ok:
            self._answer(200)

    def do_POST(self) -> None:
        _, key, query = self._route()
        upload, parts = query["commit"][0], int(query["parts"][0])
        staged = self.server.uploads / upload
        fd, tmp = tempfile.mkstemp(dir=self.server.uploads)
        with os.fdopen(fd, "wb") as out:
            for n in range(parts):
                with open(staged / str(n), "rb") as part:
                    shutil.copyfileobj(part, out)
        os.replace(tmp, self._file(key))
        shutil.rmtree(staged, ignore_errors=True)
        self._answer(200)

    def do_DELETE(self) -> None:
        kind, key, _ = self._route()
        if kind == "u":
            shutil.rmtree(self.server.uploads / key, ignore_errors=True)
        else:
            self._file(key).unlink(missing_ok=True)
        self._answer(204)


@contextmanager
def toy_server(root: Path, *, in_place: bool = False) -> Iterator[str]:
    """Serve ``root`` on 127.0.0.1; yields the endpoint ``http://127.0.0.1:PORT``."""
    server = _Server(root, in_place)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(30)
