"""Debug lines for every store call, on the logger ``flyte_checkpoint.store``.

When the level of ``flyte_checkpoint.store``, or else of ``flyte_checkpoint``, is set to
``DEBUG`` (``logging.getLogger("flyte_checkpoint").setLevel(logging.DEBUG)``, or the
command line's ``--debug``), the registry hands out each store wrapped in a
:class:`LoggedStore`, which logs one line per call: the operation, the URI without
credentials, the outcome (a size, a byte count, or the error's type) and the time taken.
A ``DEBUG`` level inherited from the root logger alone does not turn this on, so turning
on debug logging for everything does not change which store objects code receives.
Otherwise the store is handed out as it is, at no cost. Error messages are not logged
(the caller sees them), only their type.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, TypeVar

from ..forksafe import lock
from ..uri import redact
from .blobstore import BlobStore, BlobWriter

__all__ = ["LoggedStore", "enabled", "log", "wrap"]

log = logging.getLogger("flyte_checkpoint.store")
T = TypeVar("T")


_wrapped: weakref.WeakKeyDictionary[BlobStore, LoggedStore] = weakref.WeakKeyDictionary()
_wrapped_lock = lock()  # a forked child finds it free, whoever held it


def enabled() -> bool:
    """Whether store calls are logged: the first of ``flyte_checkpoint.store`` and
    ``flyte_checkpoint`` with a level set has ``DEBUG`` (or lower)."""
    if not log.isEnabledFor(logging.DEBUG):
        return False
    for name in (log.name, "flyte_checkpoint"):
        level = logging.getLogger(name).level
        if level != logging.NOTSET:
            return level <= logging.DEBUG
    return False


def wrap(store: BlobStore) -> BlobStore:
    """``store`` in a :class:`LoggedStore` when :func:`enabled`, else ``store`` itself.

    One store always gets the same wrapper, so ``store_for(a) is store_for(b)`` still holds
    for two URIs of one backend.
    """
    if isinstance(store, LoggedStore) or not enabled():
        return store
    with _wrapped_lock.get():
        try:
            logged = _wrapped.get(store)
            if logged is None:
                logged = _wrapped[store] = LoggedStore(store)
        except TypeError:  # a store that cannot be weakly referenced or hashed: a fresh wrapper
            logged = LoggedStore(store)
        return logged


def _describe(value: Any) -> str:
    if value is None:
        return "done"
    if isinstance(value, int):
        return f"{value} bytes"
    if isinstance(value, (bytes, bytearray)):
        return f"{len(value)} bytes"
    return "opened"


class LoggedStore(BlobStore):
    """A store that logs each call of the store it wraps, then returns that store's answer.

    Everything else (attributes, fast paths) is the wrapped store's own; ``inner`` is it.
    """

    def __init__(self, inner: BlobStore) -> None:
        self.inner = inner
        self.supports_ranges = inner.supports_ranges  # type: ignore[misc]
        self._name = type(inner).__name__

    def _call(self, op: str, uri: str, fn: Callable[[], T], describe: Callable[[T], str] = _describe) -> T:
        started = time.monotonic()
        try:
            result = fn()
        except BaseException as exc:
            log.debug(
                "%s.%s(%s) raised %s after %.3fs",
                self._name,
                op,
                redact(uri),
                type(exc).__name__,
                time.monotonic() - started,
            )
            raise
        log.debug(
            "%s.%s(%s): %s in %.3fs",
            self._name,
            op,
            redact(uri),
            describe(result),
            time.monotonic() - started,
        )
        return result

    def open_read(self, uri: str) -> BinaryIO:
        return self._call("open_read", uri, lambda: self.inner.open_read(uri))

    def open_write(self, uri: str) -> BlobWriter:
        writer = self._call("open_write", uri, lambda: self.inner.open_write(uri))
        return _LoggedWriter(writer, self._name)

    def stat(self, uri: str) -> int | None:
        return self._call(
            "stat", uri, lambda: self.inner.stat(uri), lambda s: "absent" if s is None else f"{s} bytes"
        )

    def delete(self, uri: str) -> None:
        self._call("delete", uri, lambda: self.inner.delete(uri))

    def list(self, prefix: str) -> Iterator[str]:
        started = time.monotonic()
        count = 0
        try:
            for uri in self.inner.list(prefix):
                count += 1
                yield uri
        except BaseException as exc:
            log.debug(
                "%s.list(%s) raised %s after %d objects",
                self._name,
                redact(prefix),
                type(exc).__name__,
                count,
            )
            raise
        log.debug(
            "%s.list(%s): %d objects in %.3fs", self._name, redact(prefix), count, time.monotonic() - started
        )

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        return self._call(
            f"read_range[{start}:+{length}]", uri, lambda: self.inner.read_range(uri, start, length)
        )

    def upload_file(self, path: str | os.PathLike[str], uri: str) -> None:
        self._call("upload_file", uri, lambda: self.inner.upload_file(path, uri))

    def download_file(self, uri: str, path: str | os.PathLike[str]) -> None:
        self._call("download_file", uri, lambda: self.inner.download_file(uri, path))

    def read_bytes(self, uri: str) -> bytes:
        return self._call("read_bytes", uri, lambda: self.inner.read_bytes(uri))

    def write_bytes(self, uri: str, data: bytes) -> None:
        self._call(
            "write_bytes", uri, lambda: self.inner.write_bytes(uri, data), lambda _: f"{len(data)} bytes"
        )

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (during construction or unpickling)
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"<LoggedStore of {self.inner!r}>"


class _LoggedWriter(BlobWriter):
    """Passes writes to the wrapped writer; logs its commit or abort with the bytes written."""

    def __init__(self, inner: BlobWriter, store_name: str) -> None:
        super().__init__(inner.uri)
        self._inner = inner
        self._store_name = store_name
        self._opened = time.monotonic()

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        self._inner.write(data)

    def _commit(self) -> None:
        try:
            self._inner.close()
        except BaseException as exc:
            log.debug("%s commit of %s raised %s", self._store_name, redact(self.uri), type(exc).__name__)
            raise
        log.debug(
            "%s commit of %s: %d bytes, %.3fs after open",
            self._store_name,
            redact(self.uri),
            self.bytes_written,
            time.monotonic() - self._opened,
        )

    def _abort(self) -> None:
        self._inner.abort()
        log.debug("%s abort of %s after %d bytes", self._store_name, redact(self.uri), self.bytes_written)
