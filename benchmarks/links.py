"""Simulated per-node network links (issue 36): a token-bucket TCP proxy per node.

On one machine every rank of a sharded save, and every save, reaches the S3 server over
loopback at memory speed, and shares the cores with the server: what a cluster's saves are
bound by, each node's own link to object storage, is not there. This module puts it back. A
:class:`LinkProxy` listens on one port per simulated *node*; each node forwards to the same
upstream (moto's server) through two token buckets, one per direction, shared by all of that
node's connections (as a node's NIC is shared by its parallel uploads). A rank's S3 endpoint
is its node's port::

    with LinkProcess("http://127.0.0.1:PORT", rate=10e6, nodes=4) as links:
        validate(links, 10e6, bucket="bench")  # refuses a link 10% off its rate
        env = {"AWS_ENDPOINT_URL": links.urls[rank]}
        ...
        links.stats()                         # bytes each way per node

Rates are bytes per second (MB = 10^6 bytes). :class:`LinkProxy` runs its asyncio loop in a
thread of the calling process; :class:`LinkProcess` runs one in a child process
(``python -m benchmarks.links``), so that a save in the measuring process does not share the
proxy's interpreter lock. Before a benchmark uses the links, :func:`validate` checks each one
against a raw upload through it (a PUT of a few seconds' worth of bytes, all links at once,
as the ranks use them): a link carrying more or less than its rate by more than the tolerance
(10%) refuses the run, saying which link, what it carried and what to do. A link cannot carry
its rate when this machine cannot (the proxy, the server and the senders share its cores).

A token bucket (:class:`TokenBucket`) lends: a chunk takes its bytes from the bucket at once
and waits until the bucket's level, refilled at ``rate``, is back above zero. Chunks queue in
the order they were read, whichever connection they belong to, so connections share the rate
fairly chunk by chunk; the proxy reads at most one chunk (64 KiB) per connection ahead of
what the bucket allowed, so the senders' kernel buffers hold what is not yet allowed, as a
slow link's would.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

# HANG_GUARD: the deadline of every internal wait (start, stop, an answer from the child).
from flyte_checkpoint.testing.loopthread import HANG_GUARD, LoopThread

ROOT = Path(__file__).resolve().parent
MB = 1_000_000
MiB = 1024 * 1024
#: Bytes read from a connection at a time (what one chunk takes from a bucket).
CHUNK = 64 * 1024
#: What a bucket holds when full, in seconds of its rate (at least :data:`CHUNK`): an idle link
#: sends this much at once (small requests pass unhindered; a transfer of megabytes runs at the
#: rate), and a proxy woken late (a busy machine) makes up that much of the delay.
BURST_SECONDS = 0.02
#: How far a link's measured rate may be from its set rate (either way) before a run is refused.
TOLERANCE = 0.10
T = TypeVar("T")


class TokenBucket:
    """A rate in bytes per second, shared by whoever takes from it (see the module docstring).

    :meth:`take` never refuses: it lowers the level by ``n`` (possibly below zero) and returns
    how long the taker must wait before sending, the time the refill needs to bring the level
    back to zero. Takers that come later wait behind the debt of those before them. The clock
    is a function, so tests can count without waiting.
    """

    def __init__(
        self, rate: float, burst: int | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0:
            raise ValueError(f"a link's rate must be positive bytes per second, not {rate!r}")
        self.rate = float(rate)
        self.burst = burst if burst is not None else max(CHUNK, int(rate * BURST_SECONDS))
        self.clock = clock
        self._level = float(self.burst)
        self._last = clock()
        #: Bytes taken in all, and by each taker (a connection's number).
        self.taken = 0
        self.by_taker: Counter[int] = Counter()

    def set_rate(self, rate: float) -> None:
        if rate <= 0:
            raise ValueError(f"a link's rate must be positive bytes per second, not {rate!r}")
        self._refill()
        self.rate = float(rate)
        self.burst = max(CHUNK, int(rate * BURST_SECONDS))

    def _refill(self) -> None:
        now = self.clock()
        self._level = min(float(self.burst), self._level + (now - self._last) * self.rate)
        self._last = now

    def take(self, n: int, taker: int = 0) -> float:
        """Take ``n`` bytes; the seconds the taker waits before sending them."""
        self._refill()
        self._level -= n
        self.taken += n
        self.by_taker[taker] += n
        return max(0.0, -self._level / self.rate)


@dataclass
class Node:
    """One simulated node: its link's two buckets, and what went through them."""

    index: int
    up: TokenBucket
    down: TokenBucket
    port: int = 0
    connections: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    server: asyncio.AbstractServer | None = None
    writers: set[asyncio.StreamWriter] = field(default_factory=set)
    #: The up window since :meth:`LinkProxy.mark`: when its first chunk was read, when its last
    #: was written upstream, the bytes in between (what :func:`validate` divides).
    window: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])

    def stats(self) -> dict[str, int]:
        return {"up": self.bytes_up, "down": self.bytes_down, "connections": self.connections}

    def carried(self) -> float:
        """Bytes per second up in the window since the last mark (0 when nothing went up)."""
        first, last, nbytes = self.window
        return nbytes / (last - first) if last > first else 0.0


class LinkProxy:
    """``nodes`` listening ports on 127.0.0.1, each a link of ``rate`` bytes/s each way to
    ``upstream`` (``http://host:port``); an asyncio loop in a daemon thread."""

    def __init__(self, upstream: str, rate: float, nodes: int = 1, burst: int | None = None) -> None:
        parts = urlsplit(upstream)
        if not parts.hostname or not parts.port:
            raise ValueError(f"the upstream must be http://HOST:PORT, not {upstream!r}")
        self.upstream_host, self.upstream_port = parts.hostname, parts.port
        self.nodes = [Node(i, TokenBucket(rate, burst), TokenBucket(rate, burst)) for i in range(nodes)]
        self._next_conn = 0
        self._runner = LoopThread("link-proxy", "the link proxy")
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{node.port}" for node in self.nodes]

    # -- what a benchmark asks ---------------------------------------------------------

    def _call(self, fn: Callable[[], T]) -> T:
        """``fn()`` run on the loop's thread (the buckets and counters are the loop's)."""
        if self._runner.loop is None:
            return fn()
        return self._runner.call(fn)

    def stats(self) -> list[dict[str, int]]:
        """Bytes forwarded each way, and connections accepted, per node, so far."""
        return self._call(lambda: [node.stats() for node in self.nodes])

    def set_rate(self, rate: float) -> None:
        """Every node's rate, both ways, from now on."""

        def apply() -> None:
            for node in self.nodes:
                node.up.set_rate(rate)
                node.down.set_rate(rate)

        self._call(apply)

    def mark(self) -> None:
        """Start a new up window on every node (see :meth:`carried`)."""

        def apply() -> None:
            for node in self.nodes:
                node.window = [0.0, 0.0, 0.0]

        self._call(apply)

    def carried(self) -> list[float]:
        """Per node, the rate its link carried up since :meth:`mark`: the bytes over the time
        from reading the first chunk to writing the last one upstream. The client's and the
        server's own time per request (signing, answering) is outside it; a proxy or a server
        too slow to keep up makes it longer."""
        return self._call(lambda: [node.carried() for node in self.nodes])

    # -- lifetime ----------------------------------------------------------------------

    def start(self) -> LinkProxy:
        self._runner.start(self._open)
        return self

    async def _open(self) -> None:
        for node in self.nodes:
            node.server = await asyncio.start_server(
                lambda r, w, node=node: self._handle(node, r, w), "127.0.0.1", 0, limit=CHUNK
            )
            node.port = node.server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        """Close the listeners and every connection; join the loop's thread (bounded)."""
        self._runner.stop(self._shutdown)

    async def _shutdown(self) -> None:
        for node in self.nodes:
            if node.server is not None:
                node.server.close()
            for w in list(node.writers):
                w.close()
        tasks = [t for t in self._tasks if not t.done()]
        if tasks:  # closed above, they end; any still waiting on its bucket is cancelled
            _done, late = await asyncio.wait(tasks, timeout=5)
            for t in late:
                t.cancel()
            if late:
                await asyncio.wait(late, timeout=5)

    def __enter__(self) -> LinkProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the forwarding ----------------------------------------------------------------

    async def _handle(self, node: Node, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = self._next_conn
        self._next_conn += 1
        node.connections += 1
        node.writers.add(cwriter)
        uwriter: asyncio.StreamWriter | None = None
        try:
            ureader, uwriter = await asyncio.open_connection(
                self.upstream_host, self.upstream_port, limit=CHUNK
            )
            node.writers.add(uwriter)
            await asyncio.gather(
                self._pump(creader, uwriter, node, "up", conn),
                self._pump(ureader, cwriter, node, "down", conn),
            )
        except (OSError, asyncio.CancelledError):
            pass  # a peer went away, or the proxy stops: the connection ends
        finally:
            for w in (cwriter, uwriter):
                if w is not None:
                    node.writers.discard(w)
                    w.close()
            self._tasks.discard(task)

    async def _pump(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, node: Node, direction: str, conn: int
    ) -> None:
        bucket = node.up if direction == "up" else node.down
        loop = asyncio.get_running_loop()
        try:
            while data := await src.read(CHUNK):
                if direction == "up" and not node.window[0]:
                    node.window[0] = loop.time()
                wait = bucket.take(len(data), conn)
                if wait > 0:
                    await asyncio.sleep(wait)
                dst.write(data)
                await dst.drain()
                if direction == "up":
                    node.bytes_up += len(data)
                    node.window[1] = loop.time()
                    node.window[2] += len(data)
                else:
                    node.bytes_down += len(data)
            if dst.can_write_eof():
                with contextlib.suppress(OSError):
                    dst.write_eof()
        except OSError:
            dst.close()  # the peer went away: the other direction ends too


class LinkProcess:
    """A :class:`LinkProxy` in a child process (``python -m benchmarks.links``), with the same
    ``urls``, :meth:`stats` and :meth:`set_rate`: a save measured in this process then does not
    share its interpreter lock with the proxy."""

    def __init__(self, upstream: str, rate: float, nodes: int = 1) -> None:
        self.upstream, self.rate, self.nodes = upstream, rate, nodes
        self.urls: list[str] = []
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def start(self) -> LinkProcess:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT.parent), env.get("PYTHONPATH")]))
        command = [sys.executable, "-m", "benchmarks.links", self.upstream]
        self._proc = subprocess.Popen(
            [*command, "--rate", str(self.rate), "--nodes", str(self.nodes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT.parent,
        )
        self.urls = self._answer()["urls"]
        return self

    def _answer(self) -> dict:
        assert self._proc is not None and self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the link proxy process ended (exit {self._proc.wait(HANG_GUARD)})")
        return dict(json.loads(line))

    def _ask(self, command: str) -> dict:
        with self._lock:
            assert self._proc is not None and self._proc.stdin is not None
            self._proc.stdin.write(command + "\n")
            self._proc.stdin.flush()
            return self._answer()

    def stats(self) -> list[dict[str, int]]:
        return list(self._ask("stats")["nodes"])

    def set_rate(self, rate: float) -> None:
        self._ask(f"rate {rate}")
        self.rate = rate

    def mark(self) -> None:
        self._ask("mark")

    def carried(self) -> list[float]:
        return list(self._ask("carried")["nodes"])

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        assert proc.stdin is not None
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(HANG_GUARD)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(HANG_GUARD)

    def __enter__(self) -> LinkProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- validation ---------------------------------------------------------------------------


class LinkRateError(RuntimeError):
    """A link carried more or less than its rate by more than the tolerance: the run is refused."""


def raw_upload(url: str, bucket: str, nbytes: int) -> None:
    """One PUT of ``nbytes`` random bytes to ``url``'s ``bucket`` (boto3, signed with moto's
    test credentials, a client of its own); the object is then deleted."""
    import boto3

    client = boto3.session.Session().client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    key = f"fcp-link-probe-{uuid.uuid4().hex}"
    try:
        client.put_object(Bucket=bucket, Key=key, Body=os.urandom(nbytes))
        client.delete_object(Bucket=bucket, Key=key)
    finally:
        client.close()


def uploads_through(links: LinkProxy | LinkProcess) -> Callable[[Sequence[str], str, int], list[float]]:
    """The measurement :func:`validate` makes by default: a :func:`raw_upload` through every
    link at once (threads), and the rate each link carried, as the proxy saw it
    (:meth:`LinkProxy.carried`)."""

    def measure(urls: Sequence[str], bucket: str, nbytes: int) -> list[float]:
        links.mark()
        errors: list[BaseException] = []

        def one(url: str) -> None:
            try:
                raw_upload(url, bucket, nbytes)
            except BaseException as exc:  # re-raised below, in the caller's thread
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(url,)) for url in urls]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        carried = links.carried()
        return [carried[links.urls.index(url)] for url in urls]

    return measure


def probe_bytes(rate: float, seconds: float = 2.0) -> int:
    """The size of the probe upload: ``seconds`` at ``rate``, whole MiB, at least 4 MiB."""
    return max(4, round(rate * seconds / MiB)) * MiB


def validate(
    links: LinkProxy | LinkProcess | None,
    rate: float,
    *,
    bucket: str,
    nbytes: int | None = None,
    tolerance: float = TOLERANCE,
    measure: Callable[[Sequence[str], str, int], list[float]] | None = None,
    urls: Sequence[str] | None = None,
) -> list[float]:
    """Upload ``nbytes`` through every link at once; the rate each carried (bytes/s).

    ``measure(urls, bucket, nbytes)`` returns the rate of each url's link (by default
    :func:`uploads_through` the ``links``; tests give a function that returns what they
    choose, with ``urls``, so nothing here depends on time).

    Raises:
        LinkRateError: a link's rate was more than ``tolerance`` away from ``rate`` (above or
            below); the message names each such link, what it carried, and what to do.
    """
    if urls is None:
        assert links is not None
        urls = links.urls
    if measure is None:
        assert links is not None
        measure = uploads_through(links)
    if nbytes is None:
        nbytes = probe_bytes(rate)
    rates = measure(urls, bucket, nbytes)
    off = [(i, r) for i, r in enumerate(rates) if not (rate * (1 - tolerance) <= r <= rate * (1 + tolerance))]
    if off:
        load = os.getloadavg()[0]
        which = "; ".join(
            f"link {i} ({urls[i]}) carried {r / MB:.2f} MB/s, {abs(r / rate - 1):.0%}"
            f" {'over' if r > rate else 'under'} its {rate / MB:g} MB/s"
            for i, r in off
        )
        raise LinkRateError(
            f"{which} (a {nbytes / MiB:.0f} MiB upload through each of {len(urls)} links at once;"
            f" more than {tolerance:.0%} off, load average {load:.1f} on {os.cpu_count()} cores):"
            " this machine cannot simulate these links now. Run at a lower rate (--links) or"
            " fewer ranks, or when the machine is quieter."
        )
    return rates


def validate_tries(
    links: LinkProxy | LinkProcess, rate: float, *, tries: int, pause: float = 10.0, **options: Any
) -> list[float]:
    """:func:`validate`, tried up to ``tries`` times ``pause`` seconds apart while it refuses (a
    machine shared with other jobs is busy in bursts): the first passing try's rates; each
    refusal is printed to stderr, the last one raised."""
    for attempt in range(1, tries + 1):
        try:
            return validate(links, rate, **options)
        except LinkRateError as exc:
            print(f"{rate / MB:g} MB/s, try {attempt} of {tries}: {exc}", file=sys.stderr, flush=True)
            if attempt == tries:
                raise
            time.sleep(pause)
    raise AssertionError("unreachable")


def validated_rate(
    links: LinkProxy | LinkProcess, rate: float, args: argparse.Namespace, rows: list[dict]
) -> tuple[list[float], str] | None:
    """A benchmark's step to each rate: every link set to ``rate`` and validated (:func:`validate_tries`
    with ``args.probe_mib``, ``args.probe_tries`` and ``args.tolerance``, bucket ``bench``).
    Returns the rates the links carried and the load line from before, both printed to stderr;
    or None when the rate is refused: the refusal is printed and added to ``rows``."""
    links.set_rate(rate)
    before = load_line()
    nbytes = args.probe_mib * MiB if args.probe_mib else None
    try:
        carried = validate_tries(
            links, rate, tries=args.probe_tries, bucket="bench", nbytes=nbytes, tolerance=args.tolerance
        )
    except LinkRateError as exc:
        print(f"{rate / MB:g} MB/s refused: {exc}", file=sys.stderr, flush=True)
        rows.append({"rate_mb_s": rate / MB, "refused": str(exc), "load_before": before})
        return None
    shown = ", ".join(f"{r / MB:.2f}" for r in carried)
    which = "the link" if len(carried) == 1 else "the links"
    print(f"{rate / MB:g} MB/s: {which} carried {shown} MB/s ({before})", file=sys.stderr, flush=True)
    return carried, before


def parse_rates(text: str) -> list[float]:
    """``"5,10,25"`` (MB/s, MB = 10^6 bytes) as bytes per second."""
    try:
        rates = [float(part) * MB for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--links takes MB/s separated by commas (5,10,25), not {text!r}")
    if not rates or any(r <= 0 for r in rates):
        raise argparse.ArgumentTypeError(f"--links takes positive MB/s separated by commas, not {text!r}")
    return rates


def load_line() -> str:
    """The machine's load averages (1, 5, 15 minutes) and its cores, for a benchmark's output."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def main(argv: list[str] | None = None) -> None:
    """The child of :class:`LinkProcess`: prints ``{"urls": [...]}``, then answers ``stats``,
    ``rate R``, ``mark`` and ``carried`` on stdin with a JSON line each, until stdin closes."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.links", description=__doc__.splitlines()[0])
    p.add_argument("upstream", help="http://HOST:PORT to forward to")
    p.add_argument("--rate", type=float, required=True, help="bytes per second, each way, per node")
    p.add_argument("--nodes", type=int, default=1)
    args = p.parse_args(argv)
    with LinkProxy(args.upstream, args.rate, args.nodes) as proxy:
        print(json.dumps({"urls": proxy.urls}), flush=True)
        for line in sys.stdin:
            command, *rest = line.split()
            if command == "stats":
                print(json.dumps({"nodes": proxy.stats()}), flush=True)
            elif command == "rate":
                proxy.set_rate(float(rest[0]))
                print(json.dumps({"rate": float(rest[0])}), flush=True)
            elif command == "mark":
                proxy.mark()
                print(json.dumps({"marked": True}), flush=True)
            elif command == "carried":
                print(json.dumps({"nodes": proxy.carried()}), flush=True)
            else:
                print(json.dumps({"error": f"unknown command {command!r}"}), flush=True)


if __name__ == "__main__":
    main()
