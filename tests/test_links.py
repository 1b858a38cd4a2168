"""The simulated links of the benchmarks (benchmarks/links.py, issue 36): the proxy passes
exactly the bytes, one node's connections share one bucket, a link off its rate refuses the
run, and the ``--links`` modes of the sharded and incremental benchmarks run at a tiny size.

Nothing here asserts a rate or a time: the buckets are checked by counting (bytes taken per
connection, and with a fake clock the waits they hand out), the validation with an injected
measurement, and the smoke runs accept any figure (``--tolerance inf``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from benchmarks.links import (
    LinkProxy,
    LinkRateError,
    TokenBucket,
    parse_rates,
    probe_bytes,
    validate,
)
from conftest import require

ROOT = Path(__file__).resolve().parent.parent
#: So high that the buckets never make a test wait noticeably (the tests count, never time).
FAST = 1e12


class Sink:
    """A TCP server on 127.0.0.1: each connection's bytes are read to their end, their SHA-256
    recorded, then ``reply`` is sent back and the connection closed."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.received: list[tuple[int, str]] = []  # (bytes, sha256) per connection, as they end
        self.done = threading.Condition()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            digest, n = hashlib.sha256(), 0
            while data := conn.recv(1 << 16):
                digest.update(data)
                n += len(data)
            conn.sendall(self.reply)
        with self.done:
            self.received.append((n, digest.hexdigest()))
            self.done.notify_all()

    def wait_for(self, count: int) -> None:
        """Until ``count`` connections have ended here (a hang guard, not a timing)."""
        with self.done:
            assert self.done.wait_for(lambda: len(self.received) >= count, timeout=120), self.received

    def close(self) -> None:
        self.sock.close()


def exchange(url: str, data: bytes) -> bytes:
    """Send ``data`` to ``url``, end the sending side, and return all that comes back."""
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(1 << 16):
            chunks.append(chunk)
    return b"".join(chunks)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_proxy_passes_exactly_the_bytes_both_ways():
    reply = os.urandom(3 * 2**20 + 17)
    sink = Sink(reply)
    try:
        with LinkProxy(sink.url, FAST, nodes=1) as proxy:
            sent = os.urandom(5 * 2**20 + 3)
            got = exchange(proxy.urls[0], sent)
            sink.wait_for(1)
            assert sha(got) == sha(reply) and len(got) == len(reply)
            assert sink.received == [(len(sent), sha(sent))]
            assert proxy.stats() == [{"up": len(sent), "down": len(reply), "connections": 1}]
    finally:
        sink.close()


def test_one_bucket_per_direction_is_shared_by_all_of_a_nodes_connections():
    """Three connections at once through node 0, one through node 1: node 0's up bucket was
    taken from by the three (each exactly its bytes), node 1's by its one only."""
    sink = Sink(b"ok")
    try:
        with LinkProxy(sink.url, FAST, nodes=2) as proxy:
            sizes = [2**20 + 1, 3 * 2**20, 7]
            payloads = [os.urandom(n) for n in sizes]
            threads = [threading.Thread(target=exchange, args=(proxy.urls[0], p)) for p in payloads]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            exchange(proxy.urls[1], os.urandom(12345))
            sink.wait_for(4)
            node0, node1 = proxy.nodes
            buckets = proxy._call(
                lambda: (dict(node0.up.by_taker), node0.up.taken, dict(node1.up.by_taker), node0.down.taken)
            )
            by_conn0, taken0, by_conn1, down0 = buckets  # type: ignore[misc]
            assert sorted(by_conn0.values()) == sorted(sizes) and taken0 == sum(sizes)
            assert list(by_conn1.values()) == [12345]
            assert down0 == 3 * len(b"ok")  # the replies took from node 0's down bucket
            assert [n["connections"] for n in proxy.stats()] == [3, 1]
            assert sorted(n for n, _ in sink.received) == sorted([*sizes, 12345])
            assert {sha(p) for p in payloads} <= {h for _, h in sink.received}
    finally:
        sink.close()


def test_the_bucket_queues_takers_behind_each_others_bytes():
    """With a fake clock: whoever takes waits for the bytes taken before, whatever connection took
    them; an idle bucket refills to its burst and no further; a new rate applies from then on."""
    now = [0.0]
    bucket = TokenBucket(rate=1000, burst=100, clock=lambda: now[0])
    assert bucket.take(100, taker=1) == 0  # the burst
    assert bucket.take(100, taker=2) == pytest.approx(0.1)  # behind taker 1's bytes
    assert bucket.take(50, taker=1) == pytest.approx(0.15)  # behind both
    now[0] = 0.1  # 100 of the 150 bytes owed refilled
    assert bucket.take(100, taker=3) == pytest.approx(0.15)
    assert bucket.taken == 350 and bucket.by_taker == {1: 150, 2: 100, 3: 100}
    now[0] = 100.0  # long idle: full, but only to the burst
    assert bucket.take(100) == 0
    assert bucket.take(1000) == pytest.approx(1.0)
    bucket.set_rate(4000)  # at 100.0 still: 1000 owed, at the new rate
    assert bucket.take(0) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="positive"):
        TokenBucket(rate=0)


def fake_measure(rates: dict[str, float]):
    """A measurement that says each url's link carried ``rates[url]`` bytes/s."""
    calls = []

    def measure(urls, bucket: str, nbytes: int) -> list[float]:
        calls.append((list(urls), bucket, nbytes))
        return [rates[url] for url in urls]

    return measure, calls


def test_validation_passes_links_within_the_tolerance():
    measure, calls = fake_measure({"a": 9.5e6, "b": 10.4e6})
    got = validate(None, 10e6, urls=["a", "b"], bucket="bench", nbytes=2**20, measure=measure)
    assert got == pytest.approx([9.5e6, 10.4e6])
    assert calls == [(["a", "b"], "bench", 2**20)]


def test_validation_refuses_a_link_that_misses_its_rate_either_way():
    measure, _ = fake_measure({"a": 10e6, "b": 8.5e6, "c": 11.5e6})
    with pytest.raises(LinkRateError) as caught:
        validate(None, 10e6, urls=["a", "b", "c"], bucket="bench", nbytes=2**20, measure=measure)
    message = str(caught.value)
    assert "link 0" not in message
    assert "link 1 (b) carried 8.50 MB/s, 15% under its 10 MB/s" in message
    assert "link 2 (c) carried 11.50 MB/s, 15% over its 10 MB/s" in message
    assert "lower rate" in message and "more than 10% off" in message


def test_the_proxy_measures_what_each_link_carried_up_since_a_mark():
    """The window a validation divides: bytes up since the mark, per node (the rate itself is
    not asserted: a positive number where bytes went, zero where none did)."""
    sink = Sink(b"ok")
    try:
        with LinkProxy(sink.url, FAST, nodes=2) as proxy:
            exchange(proxy.urls[0], b"before the mark")
            sink.wait_for(1)
            proxy.mark()
            exchange(proxy.urls[0], os.urandom(2**20))
            sink.wait_for(2)
            windows = proxy._call(lambda: [list(n.window) for n in proxy.nodes])
            assert windows[0][2] == 2**20 and windows[1] == [0.0, 0.0, 0.0]  # type: ignore[index]
            carried = proxy.carried()
            assert carried[0] > 0 and carried[1] == 0
    finally:
        sink.close()


def test_validation_reports_a_failed_upload():
    def measure(urls, bucket: str, nbytes: int) -> list[float]:
        raise RuntimeError(f"the probe upload to {urls[0]} was answered HTTP 404")

    with pytest.raises(RuntimeError, match="HTTP 404"):
        validate(None, 10e6, urls=["a"], bucket="bench", nbytes=1, measure=measure)


def test_rates_are_megabytes_per_second():
    assert parse_rates("5,10,25") == [5e6, 10e6, 25e6]
    assert parse_rates("2.5") == [2.5e6]
    for bad in ("", "fast", "5,-1", "0"):
        with pytest.raises(Exception, match="--links"):
            parse_rates(bad)
    assert probe_bytes(10e6) == 19 * 2**20 and probe_bytes(1e6) == 4 * 2**20


def run_benchmark(module: str, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return out.stdout


# Any measured rate is accepted (--tolerance inf): the smoke runs check that the modes run,
# validation included, not what this machine carries.
ANY_RATE = ("--tolerance", "inf", "--probe-mib", "1", "--runs", "1")


def test_the_sharded_benchmark_runs_on_links(tmp_path):
    require(importlib.util.find_spec("moto") is not None, "moto[server] is not installed")
    figures = tmp_path / "sharded.json"
    table = run_benchmark(
        "benchmarks.sharded",
        "--links",
        "40,80",
        "--mib",
        "1",
        "--ranks",
        "2",
        *ANY_RATE,
        "--json",
        str(figures),
    )
    for rate in ("40", "80"):
        assert re.search(
            rf"^\| {rate} \| [0-9.]+-[0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x \|", table, re.M
        ), table
    assert "load average" in table
    assert figures.read_text().count('"sharded_s"') == 2


def test_the_incremental_benchmark_runs_on_links(tmp_path):
    require(importlib.util.find_spec("moto") is not None, "moto[server] is not installed")
    table = run_benchmark(
        "benchmarks.incremental", "--links", "50", "--trees", "3x1,2x0.5", *ANY_RATE, "--work", str(tmp_path)
    )
    for tree in ("3 x 1 MiB", "2 x 0.5 MiB"):
        assert re.search(
            rf"^\| 50 \([0-9.]+\) \| {tree} \| [0-9.]+ \| [0-9.]+ \| [0-9.]+% \|", table, re.M
        ), table
    assert "load average" in table


def test_the_incremental_benchmark_runs_on_links_with_copies_answered_with_their_crc(tmp_path):
    """--copy-crc: moto answers UploadPartCopy with the CRC-32 S3 gives, so the incremental save
    reads back nothing it copied: what it reads is the index and the fill before the copy (5 MiB
    of the next file, here all of the 1 MiB files after the changed one)."""
    require(importlib.util.find_spec("moto") is not None, "moto[server] is not installed")
    table = run_benchmark(
        "benchmarks.incremental",
        "--links",
        "50",
        "--trees",
        "8x6",
        "--copy-crc",
        *ANY_RATE,
        "--work",
        str(tmp_path),
    )
    assert "answering copies with their CRC-32" in table
    row = re.search(r"^\| 50 \([0-9.]+\) \| 8 x 6 MiB \| .*$", table, re.M)
    assert row, table
    cells = [c.strip() for c in row.group(0).strip("|").split("|")]
    up, down = float(cells[6]), float(cells[8])  # incremental MiB up, incremental MiB down
    assert up < 6 * 6 and down < 6, table  # not everything sent, copies not read back (48 MiB copied)
