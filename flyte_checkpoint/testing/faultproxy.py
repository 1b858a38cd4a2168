"""A fault-injecting TCP proxy on 127.0.0.1, for tests of network backends.

It sits between a client and a server and, per connection, either passes bytes through or
injects one fault at a chosen byte offset in one direction:

- ``Fault.reset("up"|"down", after=N)``: forward N bytes that way, then reset the connection
  (RST to the client, the server's side aborted);
- ``Fault.stall("up"|"down", after=N)``: forward N bytes that way, then forward nothing more
  that way (later bytes are read and dropped; the connection stays open until the client
  gives up and closes it, or the proxy stops);
- ``Fault.truncate("up"|"down", after=N)``: forward N bytes that way, then close both sides
  cleanly (a FIN: the peer sees the stream end early);
- ``Fault.answer(status)``: never connect upstream; read the client's first request head and
  answer it with that HTTP status (an XML error body, ``Connection: close``), then read and
  drop whatever the client still sends until it closes: a 403, a 429 or a 503 from "the server";
- ``Fault.blackhole()``: accept, then never connect upstream, read or send anything;
- ``Fault.passthrough()``: forward everything.

Besides per-connection faults, :meth:`FaultProxy.fail_request` puts a fault *at one request*,
whichever connection carries it (a kept-alive one included): the ``nth`` request whose line
(``"POST /bucket/key?uploadId=X"``) a test's function matches is answered with an HTTP status,
or its connection reset, before the server sees any byte of it. The proxy finds where each
request starts in a connection's bytes by following the HTTP/1.x framing
(:mod:`.httpframes`: ``Content-Length`` and chunked bodies).

Besides per-connection faults, :meth:`FaultProxy.cut` resets (or stalls) every connection once
a number of bytes *in all* has gone one way: "the upload is cut after 3.5 parts, whichever
connections carry them", exact to the byte even when parts travel in parallel.

"up" is client to server, "down" server to client; offsets count the bytes of one connection
in that direction (over every request of a kept-alive connection). Which fault a connection
gets is programmable: a function of the connection's index, or :meth:`FaultProxy.fail` (the
fault applies to every connection until it has *fired* ``times`` times, then connections pass,
so "the first K transfers fail, later ones succeed" does not depend on how many small requests
came first). Every connection is recorded (:class:`ConnRecord`: when it opened, its fault,
whether the fault fired, bytes forwarded and dropped each way, the HTTP request lines it
carried to the server, whether it ended).

Tests synchronise on what the proxy reports, never on time: :meth:`FaultProxy.wait_for` blocks
until a condition on the records holds (each record change wakes it), with a deadline that is
only a hang guard. :meth:`FaultProxy.hold` makes requests whose bytes contain a pattern wait
at the proxy until the test releases them (e.g. two writers' commits, to order them).

The proxy runs an asyncio loop in a daemon thread; :meth:`FaultProxy.stop` (or leaving the
``with`` block) closes the listener and every connection, stalled ones included, and joins the
thread, so nothing outlives a test.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from .httpframes import Head, RequestFramer
from .loopthread import HANG_GUARD, LoopThread

Direction = Literal["up", "down"]
Action = Literal["pass", "reset", "stall", "truncate", "blackhole", "answer"]

_CHUNK = 64 * 1024
#: An HTTP/1.x request line in the client-to-server bytes (bodies here are random or small
#: JSON/XML, so a false match would need this exact text inside a body).
_REQUEST_LINE = re.compile(rb"(GET|HEAD|PUT|POST|DELETE|PATCH|OPTIONS) (/\S*) HTTP/1\.[01]\r\n")
#: Bytes of one direction kept to find a request line or a held pattern split across reads.
_CARRY = 8 * 1024
#: Error codes of the answers :meth:`Fault.answer` gives (the names S3 and Azure use; other
#: services read the status).
_ANSWER_CODES = {
    401: ("Unauthorized", "AuthenticationFailed"),
    403: ("Forbidden", "AccessDenied"),
    404: ("Not Found", "NoSuchKey"),
    429: ("Too Many Requests", "TooManyRequests"),
    500: ("Internal Server Error", "InternalError"),
    502: ("Bad Gateway", "BadGateway"),
    503: ("Service Unavailable", "ServiceUnavailable"),
    504: ("Gateway Timeout", "GatewayTimeout"),
}


@dataclass(frozen=True)
class Fault:
    """What to do to one connection: ``action`` once ``after`` bytes went ``direction``."""

    action: Action = "pass"
    direction: Direction = "down"
    after: int = 0
    status: int = 0  # for "answer"

    @classmethod
    def passthrough(cls) -> Fault:
        return cls("pass")

    @classmethod
    def reset(cls, direction: Direction, after: int = 0) -> Fault:
        return cls("reset", direction, after)

    @classmethod
    def stall(cls, direction: Direction, after: int = 0) -> Fault:
        return cls("stall", direction, after)

    @classmethod
    def truncate(cls, direction: Direction = "down", after: int = 0) -> Fault:
        return cls("truncate", direction, after)

    @classmethod
    def blackhole(cls) -> Fault:
        return cls("blackhole")

    @classmethod
    def answer(cls, status: int) -> Fault:
        """Answer the connection's first request with HTTP ``status`` (the server is not asked)."""
        assert 400 <= status <= 599, f"an error status, not {status}"
        return cls("answer", "up", 0, status)


PASS = Fault()


@dataclass
class ConnRecord:
    """One accepted connection: its index, when it opened (monotonic), its fault and traffic.

    ``up``/``down`` count bytes forwarded each way; ``dropped`` bytes read and thrown away
    after a stall fired; ``requests`` the HTTP request lines (``"PUT /path?query"``) forwarded
    to the server; ``server_ended`` turns true when the server has ended its side and the
    proxy keeps the connection open; ``closed`` when the proxy has finished with it.
    """

    index: int
    opened: float
    fault: Fault
    fired: bool = False
    fired_at: float | None = None
    up: int = 0
    down: int = 0
    dropped: int = 0
    requests: list[str] = field(default_factory=list)
    server_ended: bool = False
    closed: bool = False


@dataclass(frozen=True)
class _Cut:
    direction: Direction
    at: int  # the proxy's total that way at which every connection gets ``action``
    action: Literal["reset", "stall"]


@dataclass
class _Budget:
    fault: Fault
    times: int | None  # None: forever
    fired: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def choose(self, _index: int) -> Fault:
        with self.lock:
            if self.times is not None and self.fired >= self.times:
                return PASS
            return self.fault

    def may_fire(self) -> bool:
        """Claim one firing; False once the budget is spent (the connection then passes)."""
        with self.lock:
            if self.times is not None and self.fired >= self.times:
                return False
            self.fired += 1
            return True


@dataclass
class RequestRule:
    """A fault at one request (made by :meth:`FaultProxy.fail_request`): the ``nth`` to the
    ``nth + times - 1``-th requests whose line ``match`` accepts get ``fault`` (``answer`` or
    ``reset``) before any byte of them reaches the server; ``seen`` counts the matching requests,
    ``fired`` the faults given, ``lines`` their request lines."""

    match: Callable[[str], bool]
    fault: Fault
    nth: int = 1
    times: int = 1
    seen: int = 0
    fired: int = 0
    lines: list[str] = field(default_factory=list)

    def count(self, line: str, *, may_fire: bool) -> bool:
        """Count a matching request; True if it is one to fault (called under the proxy's lock)."""
        self.seen += 1
        if may_fire and self.nth <= self.seen < self.nth + self.times:
            self.fired += 1
            self.lines.append(line)
            return True
        return False


class Hold:
    """Requests whose client-to-server bytes contain ``pattern`` wait at the proxy (their bytes
    from the matching read on are not forwarded) until :meth:`release`; only the first
    ``times`` matches are held, later ones pass. Made by :meth:`FaultProxy.hold`."""

    def __init__(self, proxy: FaultProxy, pattern: bytes, times: int) -> None:
        self.pattern = pattern
        self.times = times
        self.held = 0  # requests that arrived and were held
        self.released = 0
        self._proxy = proxy
        self._gates: list[asyncio.Event] = []

    def wait_held(self, n: int, timeout: float = HANG_GUARD) -> None:
        """Block until ``n`` requests are being held (AssertionError after ``timeout``: a hang guard)."""
        self._proxy.wait_for(lambda: self.held >= n, timeout, f"{n} held requests matching {self.pattern!r}")

    def release(self, n: int = 1) -> None:
        """Let the next ``n`` held requests (in arrival order) go on to the server."""

        def go() -> None:
            for gate in self._gates[self.released : self.released + n]:
                gate.set()
            self.released = min(len(self._gates), self.released + n)

        self._proxy._call(go)

    def release_all(self) -> None:
        """Release every request held now, and hold no more."""

        def go() -> None:
            self.times = 0
            for gate in self._gates:
                gate.set()
            self.released = len(self._gates)

        self._proxy._call(go)

    async def _pass(self, proxy: FaultProxy) -> None:
        """Called on the proxy's loop for a read that holds the pattern: wait for release."""
        if self.held >= self.times:
            return
        gate = asyncio.Event()
        self._gates.append(gate)
        proxy._changed(lambda: setattr(self, "held", self.held + 1))
        assert proxy._closing is not None
        closing = asyncio.ensure_future(proxy._closing.wait())
        released = asyncio.ensure_future(gate.wait())
        try:
            await asyncio.wait({closing, released}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closing.cancel()
            released.cancel()


class FaultProxy:
    """A TCP proxy from ``127.0.0.1:<free port>`` to ``upstream`` (``host:port`` or a URL).

    Usage::

        with FaultProxy("http://127.0.0.1:9000") as proxy:
            proxy.fail(Fault.reset("down", after=100_000), times=2)
            client(endpoint=proxy.url) ...
            assert proxy.fired == 2
    """

    def __init__(self, upstream: str | tuple[str, int]) -> None:
        if isinstance(upstream, tuple):
            self.upstream_host, self.upstream_port = upstream
            self._scheme = "http"
        else:
            parts = urlsplit(upstream if "://" in upstream else f"tcp://{upstream}")
            assert parts.hostname and parts.port, f"upstream needs a host and a port: {upstream!r}"
            self.upstream_host, self.upstream_port = parts.hostname, parts.port
            self._scheme = parts.scheme if parts.scheme != "tcp" else "http"
            self._path = parts.path.rstrip("/")
        self._path = getattr(self, "_path", "")
        self.port = 0
        self.records: list[ConnRecord] = []
        self._counter = itertools.count()
        self._budget = _Budget(PASS, None)
        self._chooser: Callable[[int], Fault] | None = None
        # Reentrant, so that wait_for's condition may use the counting properties.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._hold: Hold | None = None
        self._rules: list[RequestRule] = []
        #: Every request line forwarded to (or kept from) the server since the last
        #: :meth:`reset_records`, in the order the proxy saw them, over all connections.
        self.log: list[str] = []
        self._runner = LoopThread("fault-proxy", "the fault proxy")
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._closing: asyncio.Event | None = None
        #: Bytes forwarded each way over every connection since the proxy started.
        self.total: dict[Direction, int] = {"up": 0, "down": 0}
        self._cut: _Cut | None = None

    # -- programming ------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` plus the upstream URL's path, if it had one."""
        return f"{self._scheme}://127.0.0.1:{self.port}{self._path}"

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def fail(self, fault: Fault, times: int | None = None) -> None:
        """Give every new connection ``fault`` until it has fired ``times`` times (None: always)."""
        with self._lock:
            self._cut = None
            self._chooser = None
            self._budget = _Budget(fault, times)

    def plan(self, chooser: Callable[[int], Fault]) -> None:
        """Give each new connection ``chooser(index)`` (index counts from 0 from now on)."""
        with self._lock:
            base = next(self._counter)
            self._counter = itertools.count(base)
            self._chooser = lambda i: chooser(i - base)
            self._cut = None
            self._budget = _Budget(PASS, None)

    def cut(self, direction: Direction, after: int, action: Literal["reset", "stall"] = "reset") -> None:
        """Once ``after`` more bytes in all (over every connection, counted from now) have gone
        ``direction``, give every connection, open or new, ``action`` that way: the byte that
        would exceed the count is never forwarded. Each connection it reaches is marked fired;
        :meth:`heal` ends it."""
        with self._lock:
            self._cut = _Cut(direction, self.total[direction] + after, action)

    def _cut_left(self, direction: Direction) -> int | None:
        """Bytes that may still go ``direction`` before the cut (None: no cut that way)."""
        cut = self._cut
        if cut is None or cut.direction != direction:
            return None
        return max(0, cut.at - self.total[direction])

    def fail_request(
        self, match: Callable[[str], bool], fault: Fault, *, nth: int = 1, times: int = 1
    ) -> RequestRule:
        """Give the ``nth`` request whose line (``"PUT /bucket/key?partNumber=2&uploadId=X"``)
        ``match`` accepts, and the ``times - 1`` matching ones after it, ``fault``:
        ``Fault.answer(status)`` answers it with that status (``Connection: close``) and
        ``Fault.reset(...)`` resets its connection, either before any byte of it reaches the
        server. Requests are counted from now, over every connection, in the order their heads
        arrive. Rules add up (a request takes the first that claims it); :meth:`heal` drops them."""
        assert fault.action in ("answer", "reset"), f"a request gets an answer or a reset, not {fault.action}"
        assert nth >= 1 and times >= 1, (nth, times)
        rule = RequestRule(match, fault, nth, times)
        with self._lock:
            self._rules.append(rule)
        return rule

    def heal(self) -> None:
        """From now on, every new connection and every request passes."""
        self.fail(PASS)
        with self._lock:
            self._rules = []

    def reset_records(self) -> None:
        with self._lock:
            self.records = []
            self.log = []

    @property
    def fired(self) -> int:
        """How many connections have had their fault fire since the last reset of the records."""
        with self._lock:
            return sum(r.fired for r in self.records)

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self.records)

    @property
    def requests(self) -> list[str]:
        """Every HTTP request line forwarded to the server since the last reset, in order per
        connection (``"GET /bucket/key?x=1"``)."""
        with self._lock:
            return [line for r in self.records for line in r.requests]

    def wait_for(self, condition: Callable[[], bool], timeout: float = HANG_GUARD, what: str = "") -> None:
        """Block until ``condition()`` is true; it is checked again at every change of the
        records (a connection accepted, bytes forwarded or dropped, a fault fired, a request
        seen or held, a connection ended). ``timeout`` is a hang guard: AssertionError then."""
        with self._cond:
            if not self._cond.wait_for(condition, timeout):
                raise AssertionError(
                    f"the proxy never reported {what or 'the awaited condition'} within the"
                    f" {timeout:.0f} s hang guard; records: {self.records}"
                )

    def hold(self, pattern: bytes, times: int = 1) -> Hold:
        """Hold the first ``times`` requests whose bytes (client to server) contain ``pattern``
        until the returned :class:`Hold` releases them (:meth:`stop` releases them too)."""
        with self._lock:
            self._hold = Hold(self, pattern, times)
            return self._hold

    def _claim(self, head: Head) -> RequestRule | None:
        """The rule that faults this request, if any: every rule that matches counts it, the
        first whose turn it is takes it."""
        with self._lock:
            chosen = None
            for rule in self._rules:
                if rule.match(head.line) and rule.count(head.line, may_fire=chosen is None):
                    chosen = rule
            return chosen

    def _changed(self, update: Callable[[], object] | None = None) -> None:
        """Apply ``update`` to the records under the lock, and wake :meth:`wait_for`."""
        with self._cond:
            if update is not None:
                update()
            self._cond.notify_all()

    def _add(self, rec: ConnRecord, counter: str, n: int) -> None:
        """Add ``n`` to one of ``rec``'s byte counters, and wake :meth:`wait_for`."""
        with self._cond:
            setattr(rec, counter, getattr(rec, counter) + n)
            self._cond.notify_all()

    def _call(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the proxy's loop and wait for it (bounded by the hang guard)."""
        self._runner.call(fn)

    # -- lifetime ---------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._runner.start(self._open)
        return self

    async def _open(self) -> None:
        self._closing = asyncio.Event()
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, limit=_CHUNK)
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        """Close the listener and every connection; join the loop's thread (bounded)."""
        self._runner.stop(self._shutdown)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        assert self._closing is not None
        self._closing.set()  # wakes stalled and blackholed connections
        for w in list(self._writers):
            _abort(w)
        tasks = [t for t in self._tasks if not t.done()]
        if tasks:
            _done, late = await asyncio.wait(tasks, timeout=5)
            for t in late:
                t.cancel()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the proxying -----------------------------------------------------------------

    async def _wait_closing(self) -> None:
        """Wait until the proxy stops (a blackholed connection's fate)."""
        assert self._closing is not None
        await self._closing.wait()

    def _choose(self, index: int) -> tuple[Fault, _Budget | None]:
        with self._lock:
            if self._chooser is not None:
                return self._chooser(index), None
            return self._budget.choose(index), self._budget

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(cwriter)
        index = next(self._counter)
        fault, budget = self._choose(index)
        rec = ConnRecord(index, time.monotonic(), fault)
        self._changed(lambda: self.records.append(rec))
        uwriter: asyncio.StreamWriter | None = None
        try:
            if fault.action == "answer":
                if budget is None or budget.may_fire():
                    await self._answer(creader, cwriter, rec, fault.status)
                    return
                fault = PASS
                rec.fault = PASS
            if fault.action == "blackhole":
                if budget is None or budget.may_fire():
                    self._changed(lambda: _mark_fired(rec))
                    await self._wait_closing()
                    return
                fault = PASS
                rec.fault = PASS
            ureader, uwriter = await asyncio.open_connection(
                self.upstream_host, self.upstream_port, limit=_CHUNK
            )
            self._writers.add(uwriter)
            state = _State(self, rec, fault, budget, cwriter, uwriter)
            up = asyncio.ensure_future(self._pump(creader, uwriter, "up", state))
            down = asyncio.ensure_future(self._pump(ureader, cwriter, "down", state))
            pending: set[asyncio.Future[None]] = {up, down}
            try:
                while pending:
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    if state.broken or (state.stalled and up in done):
                        # a reset, a truncation, or a client that left a stalled connection.
                        # A server that ends its side does not end a stall: the client must
                        # see silence, not an early end of stream.
                        break
                    if down in done:  # the server ended its side; the connection goes on
                        self._changed(lambda: setattr(rec, "server_ended", True))
            finally:
                for p in pending:
                    p.cancel()
                if pending:
                    await asyncio.wait(pending, timeout=5)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.CancelledError):
            pass
        finally:
            for w in (cwriter, uwriter):
                if w is not None:
                    self._writers.discard(w)
                    _close(w)
            self._changed(lambda: setattr(rec, "closed", True))
            self._tasks.discard(task)

    async def _fire_cut(self, state: _State, src: asyncio.StreamReader, direction: Direction) -> None:
        cut = self._cut
        assert cut is not None
        await state.fire(direction, cut.action)
        if state.stalled:
            await self._discard(src, state.rec)

    async def _answer(
        self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter, rec: ConnRecord, status: int
    ) -> None:
        """Read one request head from the client, answer it with ``status``, then drop the rest."""
        head = await creader.readuntil(b"\r\n\r\n")
        self._add(rec, "dropped", len(head))
        m = _REQUEST_LINE.match(head)
        method = m.group(1).decode() if m else "?"
        if m:
            line = f"{method} {m.group(2).decode(errors='replace')}"
            self._changed(lambda: _record(rec, self.log, [line]))
        self._changed(lambda: _mark_fired(rec))  # before the client can see the answer
        cwriter.write(_answer_bytes(status, method))
        await cwriter.drain()
        await self._discard(creader, rec)

    async def _discard(self, src: asyncio.StreamReader, rec: ConnRecord) -> None:
        """Read and drop ``src`` until it ends or the proxy stops: nothing more is forwarded
        (``rec.dropped`` counts what was thrown away), but a peer that gives up and closes is
        noticed, so the connection then ends."""
        assert self._closing is not None
        closing = asyncio.ensure_future(self._closing.wait())
        try:
            while True:
                reading = asyncio.ensure_future(src.read(_CHUNK))
                await asyncio.wait({reading, closing}, return_when=asyncio.FIRST_COMPLETED)
                if not reading.done():
                    reading.cancel()
                    return
                data = reading.result()
                if not data:
                    return
                self._add(rec, "dropped", len(data))
        finally:
            closing.cancel()

    async def _pump(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, direction: Direction, state: _State
    ) -> None:
        rec, fault = state.rec, state.fault
        armed = fault.action in ("reset", "stall", "truncate") and fault.direction == direction
        try:
            while True:
                if armed and getattr(rec, direction) >= fault.after:
                    if state.budget is None or state.budget.may_fire():
                        await state.fire(direction)
                        if state.stalled:
                            await self._discard(src, rec)
                        return
                    armed = False
                if self._cut_left(direction) == 0:
                    await self._fire_cut(state, src, direction)
                    return
                want = _CHUNK
                if armed:
                    want = min(want, fault.after - getattr(rec, direction))
                data = await src.read(want)
                if not data:
                    if dst.can_write_eof():
                        with contextlib.suppress(OSError):
                            dst.write_eof()
                    return
                if direction == "up":
                    data, taken = await state.inspect_up(data)
                    if taken is not None:
                        await self._forward(dst, data, direction, rec)
                        await state.take(taken, src)
                        return
                await self._forward(dst, data, direction, rec)
        except (OSError, asyncio.IncompleteReadError):
            state.broken = True

    async def _forward(
        self, dst: asyncio.StreamWriter, data: bytes, direction: Direction, rec: ConnRecord
    ) -> None:
        """Forward ``data``, up to a cut that falls inside it."""
        left = self._cut_left(direction)
        if left is not None and len(data) > left:
            data = data[:left]
        self.total[direction] += len(data)  # no await since the check: exact over connections
        if data:
            dst.write(data)
            await dst.drain()
            self._add(rec, direction, len(data))


class _State:
    def __init__(
        self,
        proxy: FaultProxy,
        rec: ConnRecord,
        fault: Fault,
        budget: _Budget | None,
        cwriter: asyncio.StreamWriter,
        uwriter: asyncio.StreamWriter,
    ) -> None:
        self.proxy = proxy
        self.rec, self.fault, self.budget = rec, fault, budget
        self.cwriter, self.uwriter = cwriter, uwriter
        self.broken = False
        self.stalled = False
        self.carry = b""  # the last client-to-server bytes, for matches split across reads
        self.framer = RequestFramer()

    async def inspect_up(self, data: bytes) -> tuple[bytes, tuple[RequestRule, Head] | None]:
        """Record the request lines in ``data``, wait here if it holds a held pattern, and find
        the request a rule takes. Returns the bytes to forward now and, when a rule took a
        request, the rule and that request's head (the bytes from its head on are not forwarded)."""
        buf = self.carry + data
        seen = len(self.carry)
        lines: list[str] = []
        forward = bytearray()
        taken: tuple[RequestRule, Head] | None = None
        if self.framer.raw:  # not HTTP that can be framed: request lines found by pattern
            lines = [
                f"{m.group(1).decode()} {m.group(2).decode(errors='replace')}"
                for m in _REQUEST_LINE.finditer(buf)
                if m.end() > seen
            ]
            forward += data
        else:
            holding = bool(self.proxy._rules)
            for piece in self.framer.feed(data, hold=holding):
                if isinstance(piece, bytes):
                    forward += piece
                    continue
                lines.append(piece.line)
                rule = self.proxy._claim(piece) if piece.held and holding else None
                if rule is not None:
                    taken = (rule, piece)
                    break
                forward += piece.raw if piece.held else b""
        if lines:
            self.proxy._changed(lambda: _record(self.rec, self.proxy.log, lines))
        hold = self.proxy._hold
        if hold is not None and buf.find(hold.pattern, max(0, seen - len(hold.pattern) + 1)) >= 0:
            await hold._pass(self.proxy)
        self.carry = buf[-_CARRY:]
        return bytes(forward), taken

    async def take(self, taken: tuple[RequestRule, Head], src: asyncio.StreamReader) -> None:
        """Give the request a rule took its fault: an HTTP answer (then drop what the client
        still sends until it closes) or a reset; the server never sees the request."""
        rule, head = taken
        self.proxy._changed(lambda: _mark_fired(self.rec))  # before the client can see it
        if rule.fault.action == "reset":
            self.broken = True
            _reset(self.cwriter)
            _abort(self.uwriter)
            return
        self.cwriter.write(_answer_bytes(rule.fault.status, head.method))
        await self.cwriter.drain()
        _abort(self.uwriter)
        await self.proxy._discard(src, self.rec)
        self.broken = True

    async def fire(self, direction: Direction, action: Action | None = None) -> None:
        self.proxy._changed(lambda: _mark_fired(self.rec))
        action = action or self.fault.action
        if action == "reset":
            self.broken = True
            _reset(self.cwriter)
            _abort(self.uwriter)
        elif action == "truncate":
            self.broken = True
            for w in (self.cwriter, self.uwriter):
                _close(w)
        else:  # stall: the caller swallows this direction's bytes from now on
            self.stalled = True


def _answer_bytes(status: int, method: str) -> bytes:
    """An HTTP error answer with ``status``: an XML error body naming a code (none for a HEAD),
    ``Connection: close``."""
    reason, code = _ANSWER_CODES.get(status, ("Error", "Error"))
    body = (
        b""
        if method == "HEAD"
        else (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>HTTP {status} from the fault proxy</Message></Error>"
        ).encode()
    )
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
        f"Content-Length: {len(body)}\r\nx-ms-error-code: {code}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def _record(rec: ConnRecord, log: list[str], lines: list[str]) -> None:
    """Add request lines to a connection's record and to the proxy's log."""
    rec.requests.extend(lines)
    log.extend(lines)


def _mark_fired(rec: ConnRecord) -> None:
    rec.fired, rec.fired_at = True, time.monotonic()


def _reset(w: asyncio.StreamWriter) -> None:
    """Close with SO_LINGER 0, so the peer gets a RST rather than a FIN."""
    sock = w.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    _abort(w)


def _abort(w: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        w.transport.abort()


def _close(w: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        w.close()


__all__ = ["HANG_GUARD", "PASS", "ConnRecord", "Fault", "FaultProxy", "Hold", "RequestRule"]
