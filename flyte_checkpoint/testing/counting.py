"""A store that counts its requests and makes each one slow: coordination at scale, on one machine.

:class:`CountingLatencyStore` wraps a store (by default the ``memory`` store) and counts every
request a cloud store would send, per caller and per kind, sleeping ``latency`` seconds in each
(as a round trip to S3 takes some 20 ms). A listing costs a request per ``page`` keys
(S3 lists 1,000 keys a page), a :meth:`~CountingLatencyStore.delete_many` one per ``batch``
keys (S3's ``DeleteObjects`` takes 1,000). With ``multipart=True`` it also takes one object
from many writers the way S3 does (:meth:`~CountingLatencyStore.sharded_writes`: a request to
start, one per rank's part, one for the tail and one to complete), so that a sharded save's
segments cost what they would there; without it, a sharded save gathers the segments through
the store's own requests.

A caller is the name of the thread that sends the request, unless it said otherwise
(:meth:`~CountingLatencyStore.acting_as`): a sharded save's rank 0 sends requests from its
lease thread (``flyte-checkpoint-shard-lease``) and its report readers
(``flyte-checkpoint-shard-reports_N``) too.

:meth:`~CountingLatencyStore.hide` makes listings lag: the keys it matches are left out of the
next listings that would show them, as a store whose listings are eventually consistent may.

Used by the tests of the sharded saves' coordination and by ``python -m benchmarks.coordination``::

    store = CountingLatencyStore(latency=0.02)
    register_store("counted", "counted", lambda: store)
    ...  # save_sharded("counted://bucket/ckpt", ...) on 1,000 threads
    store.total("get"), store.by_caller()
"""

from __future__ import annotations

import contextlib
import io
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO

from ..storage.blobstore import BlobStore, BlobWriter, CopyCheck, CopySource, ObjectInfo
from ..storage.stores.memory import MemoryStore

#: The kinds of requests counted.
KINDS = (
    "get",
    "head",
    "put",
    "list",
    "delete",
    "delete_many",
    "start",
    "part",
    "complete",
    "abort",
    "uploads",
)


class CountingLatencyStore(BlobStore):
    """``inner``'s objects, every request counted and delayed (see the module docstring)."""

    def __init__(
        self,
        inner: BlobStore | None = None,
        *,
        latency: float = 0.0,
        page: int = 1000,
        batch: int = 1000,
        multipart: bool = True,
    ) -> None:
        self.inner = inner if inner is not None else MemoryStore()
        self.latency = latency
        self.page = page
        self.batch = batch
        self.multipart = multipart
        self.counts: Counter[tuple[str, str]] = Counter()  # (caller, kind)
        self._lock = threading.Lock()
        self._local = threading.local()
        self._hidden: list[list[Any]] = []  # [match, listings left]
        self._parts: dict[str, bytes] = {}

    # -- counting --------------------------------------------------------------------------

    def caller(self) -> str:
        return getattr(self._local, "who", None) or threading.current_thread().name

    @contextlib.contextmanager
    def acting_as(self, who: str) -> Iterator[None]:
        """Count this thread's requests as ``who``'s while the block runs."""
        before = getattr(self._local, "who", None)
        self._local.who = who
        try:
            yield
        finally:
            self._local.who = before

    def request(self, kind: str, n: int = 1) -> None:
        """Count ``n`` requests of ``kind``, sent one after another (``n`` latencies)."""
        with self._lock:
            self.counts[(self.caller(), kind)] += n
        if self.latency and n:
            time.sleep(self.latency * n)

    def total(self, *kinds: str) -> int:
        """Requests of these kinds (every kind when none is named), of every caller."""
        with self._lock:
            return sum(n for (_, kind), n in self.counts.items() if not kinds or kind in kinds)

    def by_caller(self, *kinds: str) -> Counter[str]:
        """Requests of these kinds (every kind when none is named) per caller."""
        found: Counter[str] = Counter()
        with self._lock:
            for (who, kind), n in self.counts.items():
                if not kinds or kind in kinds:
                    found[who] += n
        return found

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()

    def hide(self, match: str | Callable[[str], bool], listings: int) -> None:
        """Leave the keys ``match`` matches (a URI prefix, or a predicate) out of the next
        ``listings`` listings that would show any of them."""
        test = (lambda uri: uri.startswith(match)) if isinstance(match, str) else match
        with self._lock:
            self._hidden.append([test, listings])

    def _visible(self, uris: list[str]) -> list[str]:
        with self._lock:
            for rule in self._hidden:
                test, left = rule
                if left > 0 and any(test(u) for u in uris):
                    uris = [u for u in uris if not test(u)]
                    rule[1] = left - 1
        return uris

    # -- the store ---------------------------------------------------------------------------

    def open_read(self, uri: str) -> BinaryIO:
        self.request("get")
        return self.inner.open_read(uri)

    def read_bytes(self, uri: str) -> bytes:
        self.request("get")
        return self.inner.read_bytes(uri)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        self.request("get")
        return self.inner.read_range(uri, start, length)

    def open_write(self, uri: str) -> BlobWriter:
        return _CountedWriter(self, uri)

    def write_bytes(self, uri: str, data: bytes) -> None:
        self.request("put")
        self.inner.write_bytes(uri, data)

    def stat(self, uri: str) -> int | None:
        self.request("head")
        return self.inner.stat(uri)

    def delete(self, uri: str) -> None:
        self.request("delete")
        self.inner.delete(uri)

    def delete_many(self, uris: Iterable[str]) -> None:
        todo = list(dict.fromkeys(uris))
        self.request("delete_many", -(-len(todo) // self.batch))
        for uri in todo:
            self.inner.delete(uri)

    def _listing(self, prefix: str) -> list[str]:
        uris = list(self.inner.list(prefix))
        self.request("list", max(1, -(-len(uris) // self.page)))
        return self._visible(uris)

    def list(self, prefix: str) -> Iterator[str]:
        yield from self._listing(prefix)

    def list_details(self, prefix: str, *, recursive: bool = True) -> Iterator[ObjectInfo]:
        shown = set(self._listing(prefix))
        return (
            i for i in self.inner.list_details(prefix, recursive=recursive) if i.is_folder or i.uri in shown
        )

    def close(self) -> None:
        self.inner.close()

    # -- one object from many writers, as S3's multipart upload --------------------------------

    @property
    def sharded_writes(self) -> Callable[[str], Any] | None:
        """With ``multipart``: one object from many ranks, a request per part (see the module docstring)."""
        return (lambda uri: _Multipart(self, uri)) if self.multipart else None

    def __repr__(self) -> str:
        return f"<CountingLatencyStore of {self.inner!r}, {self.latency * 1000:g} ms a request>"


class _CountedWriter(BlobWriter):
    """A write sent as one request at its commit."""

    def __init__(self, store: CountingLatencyStore, uri: str) -> None:
        super().__init__(uri)
        self._store = store
        self._inner = store.inner.open_write(uri)

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        self._inner.write(data)

    def _copy(self, source: CopySource, start: int, length: int, expect: CopyCheck | None) -> None:
        raise NotImplementedError("the counting store copies no ranges")

    def _commit(self) -> None:
        self._store.request("put")
        self._inner.close()

    def _abort(self) -> None:
        self._inner.abort()


class _Part:
    """One rank's segment: held in memory, sent as one part when it is finished."""

    def __init__(self, store: CountingLatencyStore, key: str) -> None:
        self._store = store
        self._key = key
        self._buf = io.BytesIO()

    def write(self, data: bytes | bytearray | memoryview) -> int:
        return self._buf.write(data)

    def padding_needed(self) -> int:
        return 0

    def finish(self) -> dict[str, Any]:
        self._store.request("part")
        with self._store._lock:
            self._store._parts[self._key] = self._buf.getvalue()
        return {"part": self._key}

    def abort(self) -> None:
        self._buf = io.BytesIO()


class _Multipart:
    """:class:`~flyte_checkpoint.sharded.writes.ShardedWrites` with S3's requests: start an
    upload, a part per rank, the tail as a part, the completion (the object appears then)."""

    def __init__(self, store: CountingLatencyStore, uri: str) -> None:
        self.store = store
        self.uri = uri

    def begin(self, token: str) -> dict[str, Any]:
        self.store.request("start")
        return {"upload": f"{self.uri}#{token}"}

    def segment(self, session: dict[str, Any], rank: int, world: int, joiner: str) -> _Part:
        return _Part(self.store, f"{session['upload']}.{rank}.{joiner}")

    def commit(self, session: dict[str, Any], pieces: list[dict[str, Any]], tail: bytes) -> None:
        self.store.request("part")  # the tail
        self.store.request("complete")
        with self.store._lock:
            body = b"".join(self.store._parts[piece["part"]] for piece in pieces)
        self.store.inner.write_bytes(self.uri, body + tail)
        self._drop(lambda key: key.startswith(session["upload"] + "."))

    def abort(self, session: dict[str, Any]) -> None:
        self.store.request("abort")
        self._drop(lambda key: key.startswith(session["upload"] + "."))

    def sweep(self, session: dict[str, Any]) -> None:
        self.store.request("uploads")
        mine = f"{self.uri}#"
        self._drop(lambda key: key.startswith(mine) and not key.startswith(session["upload"] + "."))

    def _drop(self, match: Callable[[str], bool]) -> None:
        with self.store._lock:
            for key in [k for k in self.store._parts if match(k)]:
                del self.store._parts[key]


__all__ = ["KINDS", "CountingLatencyStore"]
