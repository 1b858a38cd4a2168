"""The fault-injecting proxy itself: each fault does exactly what it says, at the byte it says.

An upstream test server on 127.0.0.1 sends a fixed body on every connection and records what
it receives; a plain socket client talks to it through the proxy. Every wait is on an event
that the proxy or the upstream reports (bytes forwarded or dropped, a fault fired, a connection
ended, bytes received); socket timeouts and deadlines are hang guards only, never the outcome.
"""

from __future__ import annotations

import os
import socket
import socketserver
import threading
from collections.abc import Callable, Iterator

import pytest

from flyte_checkpoint.testing.faultproxy import HANG_GUARD, Fault, FaultProxy

BODY = os.urandom(200_000)
pytestmark = pytest.mark.timeout(600)


class _Upstream(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.received: list[bytes] = []
        self.accepted = 0
        self.end_after_body = False  # end its side (FIN) once the body is sent
        self.changed = threading.Condition()

    def wait_for(self, condition: Callable[[], bool]) -> None:
        """Block until ``condition()`` holds; checked at each connection accepted or ended."""
        with self.changed:
            assert self.changed.wait_for(condition, HANG_GUARD), (self.accepted, self.received)


class _Handler(socketserver.BaseRequestHandler):
    """Sends BODY (from a thread) while reading until the client closes; records what it read."""

    def handle(self) -> None:
        server: _Upstream = self.server  # type: ignore[assignment]
        with server.changed:
            server.accepted += 1
            server.changed.notify_all()
        sock: socket.socket = self.request
        sock.settimeout(HANG_GUARD)
        got = bytearray()

        def send() -> None:
            try:
                sock.sendall(BODY)
                if server.end_after_body:
                    sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except OSError:
            pass
        sender.join(HANG_GUARD)
        with server.changed:
            server.received.append(bytes(got))
            server.changed.notify_all()


@pytest.fixture
def upstream() -> Iterator[_Upstream]:
    server = _Upstream()
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield server
    server.shutdown()
    server.server_close()
    t.join(HANG_GUARD)


@pytest.fixture
def proxy(upstream: _Upstream) -> Iterator[FaultProxy]:
    host, port = upstream.server_address[:2]
    with FaultProxy((str(host), int(port))) as p:
        yield p


def _connect(proxy: FaultProxy) -> socket.socket:
    """A client socket through the proxy; its timeout is only a hang guard."""
    return socket.create_connection(proxy.address, timeout=HANG_GUARD)


def _read_all(sock: socket.socket) -> tuple[bytes, str]:
    """Everything the socket delivers, and how it ended: "eof" or "reset"."""
    got = bytearray()
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except ConnectionResetError:
        return bytes(got), "reset"
    return bytes(got), "eof"


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        assert chunk, f"the connection ended after {len(got)} of {n} bytes"
        got += chunk
    return bytes(got)


def _nothing_pending(sock: socket.socket) -> bool:
    """True when the socket is open and has no byte to read (not ended, not reset)."""
    sock.setblocking(False)
    try:
        sock.recv(1)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.settimeout(HANG_GUARD)
    return False


def _up(proxy: FaultProxy, index: int) -> int:
    """Bytes forwarded to the server on connection ``index`` (-1 before it is accepted)."""
    records = proxy.records
    return records[index].up if len(records) > index else -1


def _fetch(proxy: FaultProxy) -> tuple[bytes, str]:
    """Connect, send nothing (half-close), and read until the connection ends."""
    with _connect(proxy) as s:
        s.shutdown(socket.SHUT_WR)
        return _read_all(s)


def test_passthrough_forwards_every_byte_both_ways(proxy, upstream):
    """With no fault, the client gets the whole body and the server gets what the client sent."""
    with _connect(proxy) as s:
        s.sendall(b"hello" * 1000)
        s.shutdown(socket.SHUT_WR)
        data, end = _read_all(s)
    assert (data, end) == (BODY, "eof")
    upstream.wait_for(lambda: len(upstream.received) == 1)
    assert upstream.received == [b"hello" * 1000]
    proxy.wait_for(lambda: proxy.records[0].closed, what="the connection's end")
    assert proxy.connections == 1 and proxy.fired == 0
    assert (proxy.records[0].down, proxy.records[0].up) == (len(BODY), 5000)


def test_reset_down_delivers_exactly_n_bytes_then_a_reset(proxy):
    """``reset("down", after=N)``: the client reads N bytes, then gets ECONNRESET (not a clean EOF)."""
    proxy.fail(Fault.reset("down", after=12_345))
    with _connect(proxy) as s:
        data, end = _read_all(s)
    assert (data, end) == (BODY[:12_345], "reset")
    assert proxy.fired == 1


def test_truncate_down_delivers_exactly_n_bytes_then_eof(proxy):
    """``truncate("down", after=N)``: the client reads N bytes, then a clean end of stream."""
    proxy.fail(Fault.truncate("down", after=70_000))
    with _connect(proxy) as s:
        data, end = _read_all(s)
    assert (data, end) == (BODY[:70_000], "eof")


def test_stall_down_delivers_n_bytes_then_nothing_while_open(proxy):
    """``stall("down", after=N)``: N bytes arrive, then nothing, and the connection stays open:
    once the proxy reports the rest of the body read and dropped, the client has no byte to
    read and no end of stream; it ends when the client leaves."""
    proxy.fail(Fault.stall("down", after=1000))
    with _connect(proxy) as s:
        assert _read_exactly(s, 1000) == BODY[:1000]
        rec = proxy.records[0]
        # (or the connection's end, which the assertions then report at once)
        proxy.wait_for(lambda: rec.closed or rec.dropped == len(BODY) - 1000, what="the body dropped")
        assert rec.fired and rec.down == 1000 and not rec.closed
        assert _nothing_pending(s)
    proxy.wait_for(lambda: rec.closed, what="the end of the stalled connection")


def test_stall_down_stays_open_when_the_server_ends_its_side(proxy, upstream):
    """A server that ends its side after its answer does not end a stall: once the proxy has
    seen the server's end, the client still has no byte and no end of stream (an early end
    would make a stall a truncation); the connection ends when the client leaves."""
    upstream.end_after_body = True
    proxy.fail(Fault.stall("down", after=1000))
    with _connect(proxy) as s:
        assert _read_exactly(s, 1000) == BODY[:1000]
        rec = proxy.records[0]
        proxy.wait_for(lambda: rec.closed or rec.server_ended, what="the server's end")
        assert rec.dropped == len(BODY) - 1000 and not rec.closed
        assert _nothing_pending(s)
    proxy.wait_for(lambda: rec.closed, what="the end of the stalled connection")


def test_blackhole_accepts_but_never_connects_or_answers(proxy, upstream):
    """``blackhole()``: the TCP connect succeeds, no byte comes back, upstream sees nothing;
    the connection stays open until the proxy stops, which ends it."""
    proxy.fail(Fault.blackhole())
    with _connect(proxy) as s:
        s.sendall(b"GET / HTTP/1.1\r\n\r\n")
        proxy.wait_for(lambda: proxy.fired == 1, what="the blackhole")
        assert _nothing_pending(s)
        rec = proxy.records[0]
        assert (rec.up, rec.down, rec.closed) == (0, 0, False)
        proxy.stop()
        assert _read_all(s)[0] == b""
    assert upstream.accepted == 0


def test_reset_up_forwards_n_bytes_upstream_then_resets(proxy, upstream):
    """``reset("up", after=N)``: the server receives exactly N bytes; the client's side is reset."""
    proxy.fail(Fault.reset("up", after=1000))
    with _connect(proxy) as s:
        s.sendall(b"x" * 5000)
        proxy.wait_for(lambda: proxy.fired == 1, what="the reset")
        assert _read_all(s)[1] == "reset"
    upstream.wait_for(lambda: len(upstream.received) == 1)
    assert upstream.received == [b"x" * 1000]


def test_stall_up_forwards_n_bytes_then_holds(proxy, upstream):
    """``stall("up", after=N)``: the server receives N bytes and no more until the client leaves."""
    proxy.fail(Fault.stall("up", after=3000))
    with _connect(proxy) as s:
        s.sendall(b"y" * 10_000)
        proxy.wait_for(lambda: proxy.fired == 1 and proxy.records[0].dropped == 7000, what="the rest dropped")
        rec = proxy.records[0]
        assert rec.up == 3000 and not rec.closed and upstream.received == []
    upstream.wait_for(lambda: len(upstream.received) == 1)
    assert upstream.received == [b"y" * 3000], proxy.records


def test_fail_times_fires_k_times_then_connections_pass(proxy):
    """``fail(fault, times=K)``: the first K connections that reach the offset fail, later ones pass."""
    proxy.fail(Fault.reset("down", after=5000), times=2)
    ends = [_fetch(proxy) for _ in range(4)]
    assert [e for _, e in ends] == ["reset", "reset", "eof", "eof"]
    assert ends[2][0] == ends[3][0] == BODY
    assert proxy.fired == 2 and proxy.connections == 4


def test_fault_budget_counts_firings_not_connections(proxy):
    """A connection that never reaches the offset does not use up the budget."""
    proxy.fail(Fault.reset("down", after=len(BODY) + 1), times=1)  # never reached
    assert _fetch(proxy) == (BODY, "eof")
    assert proxy.fired == 0
    proxy.fail(Fault.reset("down", after=10), times=1)
    assert _fetch(proxy)[1] == "reset"
    assert _fetch(proxy) == (BODY, "eof")


def test_plan_chooses_per_connection_index(proxy):
    """``plan(f)``: connection i gets ``f(i)``."""
    proxy.plan(lambda i: Fault.truncate("down", after=100 * (i + 1)) if i < 3 else Fault.passthrough())
    got = [len(_fetch(proxy)[0]) for _ in range(4)]
    assert got == [100, 200, 300, len(BODY)]


def test_stop_releases_stalled_connections_and_the_port(upstream):
    """Stopping the proxy ends stalled connections (the client sees the end), joins its thread
    and frees the port."""
    host, port = upstream.server_address[:2]
    p = FaultProxy((str(host), int(port))).start()
    p.fail(Fault.stall("down", after=10))
    s = socket.create_connection(p.address, timeout=HANG_GUARD)
    assert _read_exactly(s, 10) == BODY[:10]
    assert "fault-proxy" in {t.name for t in threading.enumerate()}
    p.stop()
    _data, end = _read_all(s)
    s.close()
    assert end in ("eof", "reset")
    assert "fault-proxy" not in {t.name for t in threading.enumerate()}
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(p.address, timeout=HANG_GUARD).close()


def test_request_lines_are_recorded_per_connection(proxy):
    """Each HTTP request line the client sends is recorded once, also when it is split across
    reads and when it follows a body with no line break."""
    first = b"PUT /b/k?partNumber=1 HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcdGE"
    with _connect(proxy) as s:
        s.sendall(first)
        proxy.wait_for(lambda: _up(proxy, 0) == len(first), what="the first bytes forwarded")
        s.sendall(b"T /b/k HTTP/1.1\r\n\r\nHEAD /b/k2 HTTP/1.0\r\n\r\n")
        s.shutdown(socket.SHUT_WR)
        _read_all(s)
    proxy.wait_for(lambda: proxy.records[0].closed, what="the connection's end")
    assert proxy.requests == ["PUT /b/k?partNumber=1", "GET /b/k", "HEAD /b/k2"]


def test_hold_keeps_matching_requests_until_released_in_order(proxy, upstream):
    """``hold(pattern, times=2)``: the first two requests holding the pattern wait at the proxy
    (the server sees none of their bytes) until released, one at a time, in arrival order; a
    third passes at once."""
    hold = proxy.hold(b"comp=blocklist", times=2)
    first, second, third = _connect(proxy), _connect(proxy), _connect(proxy)
    try:
        first.sendall(b"PUT /a?comp=blocklist HTTP/1.1\r\n\r\n")
        hold.wait_held(1)
        second.sendall(b"PUT /b?comp=blocklist HTTP/1.1\r\n\r\n")
        hold.wait_held(2)
        third.sendall(b"PUT /c?comp=blocklist HTTP/1.1\r\n\r\n")
        proxy.wait_for(lambda: _up(proxy, 2) == 34, what="the third request forwarded")
        assert [r.up for r in proxy.records] == [0, 0, 34]
        hold.release(1)
        proxy.wait_for(lambda: _up(proxy, 0) > 0, what="the first request released")
        assert proxy.records[1].up == 0
        hold.release(1)
        proxy.wait_for(lambda: _up(proxy, 1) > 0, what="the second request released")
        assert hold.held == 2
    finally:
        for s in (first, second, third):
            s.close()


def test_answer_replies_with_the_status_without_asking_the_server(proxy, upstream):
    """``answer(403)``: the first request's head gets an HTTP 403 with an XML error naming the
    code, the server is never connected, the request line is recorded, and once the budget is
    spent the next connection passes to the server."""
    proxy.fail(Fault.answer(403), times=1)
    with _connect(proxy) as s:
        s.sendall(b"PUT /bucket/key HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        s.shutdown(socket.SHUT_WR)
        data, end = _read_all(s)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 403 Forbidden\r\n") and b"Connection: close" in head, head
    assert b"<Code>AccessDenied</Code>" in body and end == "eof"
    assert upstream.accepted == 0
    assert proxy.requests == ["PUT /bucket/key"] and proxy.fired == 1
    assert _fetch(proxy) == (BODY, "eof")
    assert upstream.accepted == 1


def test_cut_resets_every_connection_once_the_total_is_reached(proxy, upstream):
    """``cut("up", N)``: N bytes in all reach the server, whichever connections carry them; the
    connection that reaches N is reset there, and so is any other one when it next sends."""
    first, second = _connect(proxy), _connect(proxy)
    with first, second:
        proxy.cut("up", 40_000)
        first.sendall(b"a" * 30_000)
        proxy.wait_for(lambda: proxy.total["up"] == 30_000, what="the first 30 000 bytes forwarded")
        second.sendall(b"b" * 30_000)
        assert _read_all(second)[1] == "reset"
        first.sendall(b"a")
        assert _read_all(first)[1] == "reset"
    upstream.wait_for(lambda: len(upstream.received) == 2)
    assert sorted(upstream.received) == [b"a" * 30_000, b"b" * 10_000]
    assert proxy.total["up"] == 40_000 and proxy.fired == 2


# -- faults at one request --------------------------------------------------------------------

PUT = b"PUT /b/k?partNumber=1&uploadId=u HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
COMMIT = b"POST /b/k?uploadId=u HTTP/1.1\r\nContent-Length: 4\r\n\r\ndone"
#: A chunked body whose data holds the text of a commit's request line: not a request.
CHUNKED = (
    b"PUT /b/k?partNumber=2&uploadId=u HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"21\r\nPOST /b/k?uploadId=u HTTP/1.1\r\n\r\n\r\n0\r\nx-trailer: 1\r\n\r\n"
)


def _is_commit(line: str) -> bool:
    return line.startswith("POST ") and "uploadId=" in line


def test_a_request_rule_answers_a_kept_alive_connections_later_request(proxy, upstream):
    """``fail_request(match, answer(503))``: the matching request, the second on a kept-alive
    connection, gets HTTP 503 with ``Connection: close``; the server got the first request
    whole and no byte of the second."""
    rule = proxy.fail_request(_is_commit, Fault.answer(503))
    with _connect(proxy) as s:
        s.sendall(PUT)
        assert _read_exactly(s, len(BODY)) == BODY  # the "server" answered the first request
        s.sendall(COMMIT)
        data, end = _read_all(s)
    assert data.startswith(b"HTTP/1.1 503 Service Unavailable\r\n") and b"Connection: close" in data, data
    assert b"<Code>ServiceUnavailable</Code>" in data and end == "eof"
    upstream.wait_for(lambda: len(upstream.received) == 1)
    assert upstream.received == [PUT]
    assert (rule.seen, rule.fired, rule.lines) == (1, 1, ["POST /b/k?uploadId=u"])
    assert proxy.log == ["PUT /b/k?partNumber=1&uploadId=u", "POST /b/k?uploadId=u"]


def test_a_request_rule_resets_at_the_nth_match_over_connections(proxy, upstream):
    """``nth=2``: the first matching request passes, the second (on another connection) resets
    its connection before any byte of it reaches the server; the text of a request line inside
    a chunked body is no request."""
    rule = proxy.fail_request(_is_commit, Fault.reset("up"), nth=2)
    with _connect(proxy) as s:
        s.sendall(CHUNKED + COMMIT)
        assert _read_exactly(s, len(BODY)) == BODY
        s.shutdown(socket.SHUT_WR)
        _read_all(s)
    with _connect(proxy) as s:
        s.sendall(PUT)
        assert _read_exactly(s, len(BODY)) == BODY
        s.sendall(COMMIT)
        assert _read_all(s)[1] == "reset"
    upstream.wait_for(lambda: len(upstream.received) == 2)
    assert sorted(upstream.received) == sorted([CHUNKED + COMMIT, PUT])
    assert (rule.seen, rule.fired) == (2, 1)
    assert proxy.fired == 1 and proxy.log.count("POST /b/k?uploadId=u") == 2


def test_the_framer_finds_each_head_whatever_the_reads(proxy):
    """Fed one byte at a time or all at once, with heads held or not, the framer passes every
    byte on exactly once, in order, and finds the same heads; a stream that is not HTTP is
    passed on raw."""
    from flyte_checkpoint.testing.httpframes import Head, RequestFramer

    stream = PUT + CHUNKED + COMMIT + b"GET /b/k HTTP/1.1\r\n\r\n"
    for hold in (False, True):
        for step in (1, 7, len(stream)):
            framer = RequestFramer()
            passed, heads = bytearray(), []
            for i in range(0, len(stream), step):
                for piece in framer.feed(stream[i : i + step], hold=hold):
                    if isinstance(piece, Head):
                        heads.append((piece.line, piece.held))
                        passed += piece.raw if piece.held else b""
                    else:
                        passed += piece
            assert bytes(passed) == stream, (hold, step)
            lines = [line for line, _ in heads]
            assert lines == [
                "PUT /b/k?partNumber=1&uploadId=u",
                "PUT /b/k?partNumber=2&uploadId=u",
                "POST /b/k?uploadId=u",
                "GET /b/k",
            ], (hold, step)
            assert all(held for _, held in heads) or not hold, heads
    raw = RequestFramer()
    assert raw.feed(BODY[:9000], hold=True) == [BODY[:9000]] and raw.raw
