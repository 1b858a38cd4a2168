"""The fault-injecting proxy itself: each fault does exactly what it says, at the byte it says.

An upstream test server on 127.0.0.1 sends a fixed body on every connection and records what
it receives; a plain socket client talks to it through the proxy.
"""

from __future__ import annotations

import os
import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from .faultproxy import Fault, FaultProxy

BODY = os.urandom(200_000)
pytestmark = pytest.mark.timeout(60)


class _Upstream(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.received: list[bytes] = []
        self.accepted = 0
        self.lock = threading.Lock()


class _Handler(socketserver.BaseRequestHandler):
    """Sends BODY (from a thread) while reading until the client closes; records what it read."""

    def handle(self) -> None:
        server: _Upstream = self.server  # type: ignore[assignment]
        with server.lock:
            server.accepted += 1
        sock: socket.socket = self.request
        sock.settimeout(10)
        got = bytearray()

        def send() -> None:
            try:
                sock.sendall(BODY)
            except OSError:
                pass

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except OSError:
            pass
        sender.join(10)
        with server.lock:
            server.received.append(bytes(got))


@pytest.fixture
def upstream() -> Iterator[_Upstream]:
    server = _Upstream()
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield server
    server.shutdown()
    server.server_close()
    t.join(10)


@pytest.fixture
def proxy(upstream: _Upstream) -> Iterator[FaultProxy]:
    host, port = upstream.server_address[:2]
    with FaultProxy((str(host), int(port))) as p:
        yield p


def _connect(proxy: FaultProxy, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(proxy.address, timeout=timeout)


def _read_all(sock: socket.socket) -> tuple[bytes, str]:
    """Everything the socket delivers, and how it ended: "eof", "reset" or "timeout"."""
    got = bytearray()
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except ConnectionResetError:
        return bytes(got), "reset"
    except TimeoutError:
        return bytes(got), "timeout"
    return bytes(got), "eof"


def _fetch(proxy: FaultProxy) -> tuple[bytes, str]:
    """Connect, send nothing (half-close), and read until the connection ends."""
    with _connect(proxy) as s:
        s.shutdown(socket.SHUT_WR)
        return _read_all(s)


def _wait(cond, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def test_passthrough_forwards_every_byte_both_ways(proxy, upstream):
    """With no fault, the client gets the whole body and the server gets what the client sent."""
    with _connect(proxy) as s:
        s.sendall(b"hello" * 1000)
        s.shutdown(socket.SHUT_WR)
        data, end = _read_all(s)
    assert (data, end) == (BODY, "eof")
    assert _wait(lambda: upstream.received == [b"hello" * 1000])
    assert proxy.connections == 1 and proxy.fired == 0
    assert _wait(lambda: proxy.records[0].down == len(BODY) and proxy.records[0].up == 5000)


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
    """``stall("down", after=N)``: N bytes arrive, then nothing, and the connection stays open."""
    proxy.fail(Fault.stall("down", after=1000))
    with _connect(proxy, timeout=0.7) as s:
        data, end = _read_all(s)
    assert (data, end) == (BODY[:1000], "timeout")


def test_blackhole_accepts_but_never_connects_or_answers(proxy, upstream):
    """``blackhole()``: the TCP connect succeeds, no byte ever comes back, upstream sees nothing."""
    proxy.fail(Fault.blackhole())
    with _connect(proxy, timeout=0.7) as s:
        s.sendall(b"GET / HTTP/1.1\r\n\r\n")
        data, end = _read_all(s)
    assert (data, end) == (b"", "timeout")
    assert upstream.accepted == 0
    assert proxy.fired == 1


def test_reset_up_forwards_n_bytes_upstream_then_resets(proxy, upstream):
    """``reset("up", after=N)``: the server receives exactly N bytes; the client's side is reset."""
    proxy.fail(Fault.reset("up", after=1000))
    with _connect(proxy) as s:
        ended = "none"
        try:
            for _ in range(200):
                s.sendall(b"x" * 5000)
                time.sleep(0.001)
            _data, ended = _read_all(s)
        except (ConnectionResetError, BrokenPipeError):
            ended = "reset"
    assert ended == "reset"
    assert _wait(lambda: upstream.received == [b"x" * 1000])


def test_stall_up_forwards_n_bytes_then_holds(proxy, upstream):
    """``stall("up", after=N)``: the server receives N bytes and no more until the client leaves."""
    proxy.fail(Fault.stall("up", after=3000))
    with _connect(proxy) as s:
        s.sendall(b"y" * 10_000)
        time.sleep(0.3)
    _wait(lambda: upstream.received == [b"y" * 3000])
    assert [len(r) for r in upstream.received] == [3000], proxy.records


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
    """Stopping the proxy ends stalled connections (the client sees the end) and frees the port."""
    host, port = upstream.server_address[:2]
    p = FaultProxy((str(host), int(port))).start()
    p.fail(Fault.stall("down", after=10))
    s = socket.create_connection(p.address, timeout=5)
    assert s.recv(100) == BODY[:10]
    threads_before = {t.name for t in threading.enumerate()}
    assert "fault-proxy" in threads_before
    started = time.monotonic()
    p.stop()
    assert time.monotonic() - started < 15
    _data, end = _read_all(s)
    s.close()
    assert end in ("eof", "reset")
    assert "fault-proxy" not in {t.name for t in threading.enumerate()}
    with pytest.raises(OSError):
        socket.create_connection(p.address, timeout=1).close()
