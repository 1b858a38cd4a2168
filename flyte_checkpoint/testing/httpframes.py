"""Where each HTTP/1.x request starts and ends in one connection's client-to-server bytes.

The fault proxy (:mod:`.faultproxy`) reads a kept-alive connection as a stream of bytes; to act
*at one request* (answer it with a status, or reset the connection before the server sees it)
it must know where each request's head begins and where its body ends. :class:`RequestFramer`
follows the stream as it is fed, request after request: a head ends at its blank line, a body
is ``Content-Length`` bytes or ``Transfer-Encoding: chunked`` chunks. Bytes it cannot frame (a
stream that is not HTTP, a body whose end only the connection's close marks) turn it *raw*: from
then on it finds nothing and passes everything.

With ``hold=True`` a head's bytes are kept until the head is whole, so that the caller can decide
before the server sees any of it; otherwise every byte is passed on as it comes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: A request line: method, target, version.
REQUEST_LINE = re.compile(rb"([A-Z]+) (\S+) HTTP/1\.[01]\r\n")
#: A head longer than this is not one (the stream is taken as raw bytes).
HEAD_LIMIT = 64 * 1024
#: A chunk-size or trailer line longer than this breaks the framing.
LINE_LIMIT = 8 * 1024


@dataclass(frozen=True)
class Head:
    """A whole request head: its method, its target (path and query) and its bytes.

    ``held`` is True when none of its bytes has been passed on yet (the caller may still keep it
    from the server); False when some went before the head was whole (it can only be passed).
    """

    method: str
    target: str
    raw: bytes
    held: bool

    @property
    def line(self) -> str:
        """``"METHOD /path?query"``, as the proxy records it."""
        return f"{self.method} {self.target}"


class RequestFramer:
    """Follows one connection's client-to-server bytes, request by request.

    :meth:`feed` returns, in stream order, the pieces to pass on (``bytes``) and each request
    head once it is whole (a :class:`Head`, whose bytes the caller passes on or keeps back).
    """

    def __init__(self) -> None:
        self.raw = False
        self._state = "head"  # "head", "body", "size", "data", "trailer"
        self._head = bytearray()
        self._sent = 0  # bytes of the head being read that were passed on already
        self._left = 0  # bytes left of the body, or of the chunk and its CRLF
        self._line = bytearray()

    def feed(self, data: bytes, *, hold: bool) -> list[bytes | Head]:
        """The pieces of ``data``: bytes to pass on, and a :class:`Head` for each request head
        completed in it. With ``hold``, a head's bytes are not passed on before it is whole."""
        out: list[bytes | Head] = []
        view = memoryview(data)
        while view:
            if self.raw:
                out.append(bytes(view))
                break
            if self._state == "head":
                view = self._feed_head(view, hold, out)
            elif self._state in ("body", "data"):  # a body, or a chunk: _left bytes then
                n = min(self._left, len(view))
                out.append(bytes(view[:n]))
                view = view[n:]
                self._left -= n
                if not self._left:  # the next head, or the next chunk's size line
                    self._state = "head" if self._state == "body" else "size"
            else:  # a chunk-size line or a trailer line
                view = self._feed_line(view, out)
        return [piece for piece in out if not isinstance(piece, bytes) or piece]

    def _feed_head(self, view: memoryview, hold: bool, out: list[bytes | Head]) -> memoryview:
        searched = max(0, len(self._head) - 3)
        self._head += view
        end = self._head.find(b"\r\n\r\n", searched)
        if end < 0:
            if not self._looks_like_a_head():
                self._go_raw(out)
                return memoryview(b"")
            if not hold:
                out.append(bytes(self._head[self._sent :]))
                self._sent = len(self._head)
            return memoryview(b"")
        whole = bytes(self._head[: end + 4])
        rest = bytes(self._head[end + 4 :])
        held = self._sent == 0
        m = REQUEST_LINE.match(whole)
        if m is None:
            self._go_raw(out)
            return memoryview(b"")
        unsent = whole[self._sent :]
        self._head, self._sent = bytearray(), 0
        if held:
            out.append(Head(m.group(1).decode(), m.group(2).decode(errors="replace"), whole, True))
        else:
            out.append(unsent)
            out.append(Head(m.group(1).decode(), m.group(2).decode(errors="replace"), whole, False))
        self._frame_body(whole)
        return memoryview(rest)

    def _looks_like_a_head(self) -> bool:
        if len(self._head) > HEAD_LIMIT:
            return False
        first = self._head.find(b"\r\n")
        if first < 0:
            return len(self._head) <= LINE_LIMIT
        return REQUEST_LINE.match(self._head[: first + 2]) is not None

    def _go_raw(self, out: list[bytes | Head]) -> None:
        self.raw = True
        out.append(bytes(self._head[self._sent :]))
        self._head, self._sent = bytearray(), 0

    def _frame_body(self, head: bytes) -> None:
        """Set the state for the body ``head`` announces."""
        fields: dict[str, str] = {}
        for line in head.split(b"\r\n")[1:]:
            name, sep, value = line.partition(b":")
            if sep:
                fields[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
        coding = fields.get("transfer-encoding", "").lower()
        if coding:
            if coding.replace(" ", "").split(",")[-1] != "chunked":
                self.raw = True  # only the connection's close ends such a body
            else:
                self._state = "size"
            return
        length = fields.get("content-length", "0")
        if not length.isdigit():
            self.raw = True
            return
        self._left = int(length)
        self._state = "body" if self._left else "head"

    def _feed_line(self, view: memoryview, out: list[bytes | Head]) -> memoryview:
        """A chunk-size line (then the chunk) or a trailer line (an empty one ends the body)."""
        cut = bytes(view).find(b"\n")
        take = len(view) if cut < 0 else cut + 1
        self._line += view[:take]
        out.append(bytes(view[:take]))
        if cut < 0:
            if len(self._line) > LINE_LIMIT:
                self.raw = True
            return memoryview(b"")
        line, self._line = bytes(self._line).strip(), bytearray()
        if self._state == "trailer":
            if not line:
                self._state = "head"
            return view[take:]
        try:
            size = int(line.split(b";")[0], 16)
        except ValueError:
            self.raw = True
            return view[take:]
        if size:
            self._state, self._left = "data", size + 2  # the chunk and its CRLF
        else:
            self._state = "trailer"
        return view[take:]


__all__ = ["HEAD_LIMIT", "REQUEST_LINE", "Head", "RequestFramer"]
