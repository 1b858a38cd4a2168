"""A store for tests that passes every call on to another scheme's store, counting the calls
and running a hook before each one (in the calling thread).

``spy://rest`` is ``{target}://rest`` (``spy:///abs/path`` is the local file ``/abs/path``), so
a test can count the store calls a ``Checkpoint`` makes on any backend, or make a call wait
for an event::

    with spying("s3") as spy:
        fc.Checkpoint(spy.uri_for("s3://bucket/ckpt")).save_sync(b"x")
    assert spy.count("write_bytes") == 1
"""

from __future__ import annotations

import contextlib
import io
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, BinaryIO

from flyte_checkpoint.errors import CopyDamagedError
from flyte_checkpoint.storage.blobstore import (
    BlobStore,
    BlobWriter,
    CopyCheck,
    CopyLimits,
    CopySource,
    ObjectInfo,
    copy_damaged,
)
from flyte_checkpoint.storage.pinned import PinnedObject
from flyte_checkpoint.storage.registry import register_store, store_for, unregister_store
from flyte_checkpoint.uri import is_local, normalize, scheme_of

#: ``hook(operation, uri)``: runs before each call. Operations: the store's method names, and
#: ``write``/``commit``/``abort`` of its writers and ``read`` of its readers.
Hook = Callable[[str, str], None]


class SpyStore(BlobStore):
    """Passes each call to the store for ``target`` URIs; counts it in :attr:`calls` by
    ``(operation, uri)`` (the ``spy://`` URI), after running :attr:`hook` (if set)."""

    def __init__(self, scheme: str, target: str, hook: Hook | None = None) -> None:
        self.scheme = scheme
        self.target = target
        self.hook = hook
        self.calls: Counter[tuple[str, str]] = Counter()
        #: Bytes its writers were given to write, and to copy on the server (``copy``).
        self.bytes_written = 0
        self.bytes_copied = 0
        self.bytes_read = 0  # bytes returned by read_range, read_bytes and readers' reads
        self._lock = threading.Lock()
        # as the target's store (a test may turn it off, to see what a store without them gets)
        self.supports_ranges = store_for(f"{target}://spy/x" if target != "file" else "/x").supports_ranges  # type: ignore[misc]

    @property
    def copy_limits(self) -> CopyLimits | None:  # type: ignore[override]
        """The target store's: a copy is passed on to it."""
        return self._inner(f"{self.scheme}:///probe").copy_limits

    def copy_source(self, uri: str) -> CopySource | None:
        self._before("copy_source", uri)
        found = self._inner(uri).copy_source(self._real(uri))
        return None if found is None else replace(found, uri=uri)

    def _counted(self, written: int, copied: int) -> None:
        with self._lock:
            self.bytes_written += written
            self.bytes_copied += copied

    def uri_for(self, uri: str) -> str:
        """The ``spy://`` URI of a ``target`` URI (or, for the ``file`` target, a local path)."""
        uri = normalize(uri)
        assert scheme_of(uri) == self.target, f"{uri} is not a {self.target}:// URI"
        rest = uri if is_local(uri) else uri.split("://", 1)[1]
        return f"{self.scheme}://{rest}"

    def count(self, op: str, uri: str | None = None, *, history: bool = False) -> int:
        """How many ``op`` calls were made (on ``uri`` only, if given); calls on a checkpoint's
        history sidecar (``X.fcp-history/``: the manifest each save writes after its commit,
        docs/history.md) only with ``history``."""
        with self._lock:
            return sum(
                n
                for (o, u), n in self.calls.items()
                if o == op and uri in (None, u) and (history or ".fcp-history/" not in u)
            )

    def _before(self, op: str, uri: str) -> None:
        if self.hook is not None:
            self.hook(op, uri)
        with self._lock:
            self.calls[(op, uri)] += 1

    def _got(self, data: bytes) -> bytes:
        with self._lock:
            self.bytes_read += len(data)
        return data

    def _real(self, uri: str) -> str:
        rest = uri.split("://", 1)[1]
        return f"{self.target}://{rest}"

    def _inner(self, uri: str) -> BlobStore:
        return store_for(self._real(uri))

    # -- BlobStore ---------------------------------------------------------------------

    def open_read(self, uri: str) -> BinaryIO:
        self._before("open_read", uri)
        inner = self._inner(uri).open_read(self._real(uri))
        return _SpyReader(inner, lambda: self._before("read", uri), self._got)  # type: ignore[return-value]

    def open_write(self, uri: str) -> BlobWriter:
        self._before("open_write", uri)
        return _SpyWriter(uri, self._inner(uri).open_write(self._real(uri)), self)

    def stat(self, uri: str) -> int | None:
        self._before("stat", uri)
        return self._inner(uri).stat(self._real(uri))

    def delete(self, uri: str) -> None:
        self._before("delete", uri)
        self._inner(uri).delete(self._real(uri))

    def list(self, prefix: str) -> Iterator[str]:
        self._before("list", prefix)
        for uri in self._inner(prefix).list(self._real(prefix)):
            yield f"{self.scheme}://{uri.split('://', 1)[1] if '://' in uri else uri}"

    def list_details(self, prefix: str, *, recursive: bool = True) -> Iterator[ObjectInfo]:
        self._before("list_details", prefix)
        for info in self._inner(prefix).list_details(self._real(prefix), recursive=recursive):
            uri = info.uri
            yield replace(info, uri=f"{self.scheme}://{uri.split('://', 1)[1] if '://' in uri else uri}")

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        self._before("read_range", uri)
        return self._got(self._inner(uri).read_range(self._real(uri), start, length))

    def upload_file(self, path: Any, uri: str) -> None:
        self._before("upload_file", uri)
        self._inner(uri).upload_file(path, self._real(uri))

    def download_file(self, uri: str, path: Any) -> None:
        self._before("download_file", uri)
        self._inner(uri).download_file(self._real(uri), path)

    def read_bytes(self, uri: str) -> bytes:
        self._before("read_bytes", uri)
        return self._got(self._inner(uri).read_bytes(self._real(uri)))

    def write_bytes(self, uri: str, data: bytes) -> None:
        self._before("write_bytes", uri)
        self._inner(uri).write_bytes(self._real(uri), data)

    @property
    def supports_pinned_reads(self) -> bool:  # type: ignore[override]
        """The target store's: a pin is passed on to it."""
        return self._inner(f"{self.scheme}:///probe").supports_pinned_reads

    def pin(self, uri: str) -> PinnedObject | None:
        """The target store's pin, whose reads are counted and hooked as ``read_range``,
        ``open_read`` and ``read`` (and its check as ``changed``)."""
        self._before("pin", uri)
        inner = self._inner(uri).pin(self._real(uri))
        return None if inner is None else _SpyPinned(uri, inner, self)


class _SpyPinned(PinnedObject):
    def __init__(self, uri: str, inner: PinnedObject, spy: SpyStore) -> None:
        self.uri, self.size, self.version, self.exact = uri, inner.size, inner.version, inner.exact
        self._inner = inner
        self._spy = spy

    def read_range(self, start: int, length: int) -> bytes:
        self._spy._before("read_range", self.uri)
        return self._spy._got(self._inner.read_range(start, length))

    def open_read(self) -> BinaryIO:
        self._spy._before("open_read", self.uri)
        return _SpyReader(
            self._inner.open_read(), lambda: self._spy._before("read", self.uri), self._spy._got
        )  # type: ignore[return-value]

    def changed(self) -> bool:
        self._spy._before("changed", self.uri)
        return self._inner.changed()

    def close(self) -> None:
        self._inner.close()


class _SpyWriter(BlobWriter):
    def __init__(self, uri: str, inner: BlobWriter, spy: SpyStore) -> None:
        super().__init__(uri)
        self._inner = inner
        self._spy = spy
        self._spy_before = spy._before

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        self._spy_before("write", self.uri)
        self._inner.write(data)
        self._spy._counted(len(data), 0)

    def _copy(self, source: CopySource, start: int, length: int, expect: CopyCheck | None) -> None:
        self._spy_before("copy", self.uri)
        self._inner.copy(replace(source, uri=self._spy._real(source.uri)), start, length, expect)
        self._spy._counted(0, length)

    def _commit(self) -> None:
        self._spy_before("commit", self.uri)
        try:
            self._inner.close()
        except CopyDamagedError as exc:  # the inner writer's sources, as the spy's URIs
            raise copy_damaged([(self._spy_source(s), a, n) for s, a, n in exc.damaged], self.uri) from None

    def _spy_source(self, source: CopySource) -> CopySource:
        return replace(source, uri=f"{self._spy.scheme}://{source.uri.split('://', 1)[1]}")

    def _abort(self) -> None:
        self._spy_before("abort", self.uri)
        self._inner.abort()


class _SpyReader(io.RawIOBase):
    def __init__(self, inner: BinaryIO, before: Callable[[], None], got: Callable[[bytes], bytes]) -> None:
        self._inner = inner
        self._spy_before = before
        self._spy_got = got

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        self._spy_before()
        return self._spy_got(self._inner.read(n))

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


@contextlib.contextmanager
def spying(target: str, hook: Hook | None = None, scheme: str = "spy") -> Iterator[SpyStore]:
    """Register a :class:`SpyStore` for ``scheme://`` URIs over ``target``'s store while the
    block runs."""
    spy = SpyStore(scheme, target, hook)
    name = f"{scheme}-store"
    register_store(name, (scheme,), lambda: spy, "counts and hooks store calls (tests)")
    try:
        yield spy
    finally:
        unregister_store(name)
