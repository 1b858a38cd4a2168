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

Logging never changes what a program does: the wrapper answers every capability
:class:`~flyte_checkpoint.storage.blobstore.BlobStore` declares (``copy_limits``,
``supports_ranges``...) with the wrapped store's value, read at each use, and passes every
method of the interface to the wrapped store's own (its fast paths, never the base class's
defaults) with the caller's arguments. Both lists are read from ``BlobStore`` itself
(:func:`capabilities`, :func:`operations`), so a capability or method added there later is
passed on too, with a line of its own. Anything else a store has (``sharded_writes``, a client)
is the wrapped store's attribute, reached through the wrapper. Its writers pass on writes,
server-side copies, commits and aborts (tests/test_logging.py fails for a hook of ``BlobWriter``
they leave to the base class).
"""

from __future__ import annotations

import abc
import functools
import inspect
import logging
import os
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, TypeVar

from ..uri import redact
from ..util.forksafe import lock
from .blobstore import BlobStore, BlobWriter, CopyCheck, CopySource, ObjectInfo

__all__ = ["LoggedStore", "capabilities", "enabled", "log", "operations", "unwrapped", "wrap"]

log = logging.getLogger("flyte_checkpoint.store")
T = TypeVar("T")


#: store -> its wrapper, both held weakly: a wrapper holds its store, so a wrapper held here
#: would keep its key alive, and a store the registry let go of (``configure_store``) with it.
_wrapped: weakref.WeakKeyDictionary[BlobStore, weakref.ref[LoggedStore]] = weakref.WeakKeyDictionary()
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

    One store gets the same wrapper while that wrapper is in use, so ``store_for(a) is
    store_for(b)`` still holds for two URIs of one backend. Nothing here keeps a store or its
    wrapper alive: once neither the registry nor a caller holds them, both are freed.
    """
    if isinstance(store, LoggedStore) or not enabled():
        return store
    with _wrapped_lock.get():
        try:
            ref = _wrapped.get(store)
            logged = None if ref is None else ref()
            if logged is None:
                logged = LoggedStore(store)
                _wrapped[store] = weakref.ref(logged)
        except TypeError:  # a store that cannot be weakly referenced or hashed: a fresh wrapper
            logged = LoggedStore(store)
        return logged


def unwrapped(store: BlobStore) -> BlobStore:
    """The store itself, whether or not it came wrapped in a :class:`LoggedStore` (to compare
    stores, or to name one in a message, the same way at every logging level)."""
    while isinstance(store, LoggedStore):
        store = store.inner
    return store


def _public(cls: type) -> dict[str, Any]:
    """The public names ``cls`` and its bases up to ``object`` define, with their values (the
    nearest definition wins), and those only annotated."""
    found: dict[str, Any] = {}
    for klass in reversed(cls.__mro__[:-1]):  # object last in the MRO: left out
        for name in getattr(klass, "__annotations__", {}):
            found.setdefault(name, None)
        found.update(vars(klass))
    return {name: value for name, value in found.items() if not name.startswith("_")}


def capabilities() -> tuple[str, ...]:
    """What :class:`BlobStore` declares a store has, as attributes (``part_size``,
    ``supports_ranges``, ``supports_list``, ``supports_list_details``, ``copy_limits``...):
    its public attributes that are not methods."""
    return tuple(sorted(name for name, value in _public(BlobStore).items() if not inspect.isfunction(value)))


def operations() -> tuple[str, ...]:
    """The methods of :class:`BlobStore` (the required ones and the fast paths with defaults)."""
    return tuple(sorted(name for name, value in _public(BlobStore).items() if inspect.isfunction(value)))


def _describe(value: Any) -> str:
    if value is None:
        return "done"
    if isinstance(value, int):
        return f"{value} bytes"
    if isinstance(value, (bytes, bytearray)):
        return f"{len(value)} bytes"
    return "opened"


def _counted(found: Iterator[T], started: float, name: str, op: str, prefix: str) -> Iterator[T]:
    """``found`` as it is, with one line when it ends (the number of entries) or fails."""
    count = 0
    try:
        for item in found:
            count += 1
            yield item
    except BaseException as exc:
        log.debug("%s.%s(%s) raised %s after %d objects", name, op, redact(prefix), type(exc).__name__, count)
        raise
    log.debug("%s.%s(%s): %d objects in %.3fs", name, op, redact(prefix), count, time.monotonic() - started)


class LoggedStore(BlobStore):
    """A store that logs each call of the store it wraps, then returns that store's answer.

    Everything else (capabilities, fast paths, attributes of its own) is the wrapped store's;
    ``inner`` is it. See the module docstring for what is passed on, and how.
    """

    def __init__(self, inner: BlobStore) -> None:
        self.inner = inner
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

    def copy_source(self, uri: str) -> CopySource | None:
        return self._call(
            "copy_source",
            uri,
            lambda: self.inner.copy_source(uri),
            lambda s: "absent" if s is None else f"{s.size} bytes",
        )

    def delete(self, uri: str) -> None:
        self._call("delete", uri, lambda: self.inner.delete(uri))

    def list(self, prefix: str) -> Iterator[str]:
        return self._listing("list", prefix, lambda: self.inner.list(prefix))

    def list_details(self, prefix: str, *args: Any, **kwargs: Any) -> Iterator[ObjectInfo]:
        # the arguments as given (``recursive`` or not): the wrapped store's call is the caller's
        return self._listing("list_details", prefix, lambda: self.inner.list_details(prefix, *args, **kwargs))

    def _listing(self, op: str, prefix: str, make: Callable[[], Iterator[T]]) -> Iterator[T]:
        """The wrapped store's listing, called now (as it would be unwrapped), logged when it ends."""
        started = time.monotonic()
        try:
            found = make()
        except BaseException as exc:
            log.debug(
                "%s.%s(%s) raised %s after 0 objects", self._name, op, redact(prefix), type(exc).__name__
            )
            raise
        return _counted(found, started, self._name, op, prefix)

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


def _capability(name: str) -> property:
    def read(self: LoggedStore) -> Any:
        return getattr(self.inner, name)

    return property(read, doc=f"The wrapped store's ``{name}``.")


def _operation(name: str) -> Callable[..., Any]:
    """A logged pass-through for a method of ``BlobStore`` that has no line of its own here
    (one added later): the line names the method and, where the first argument is a URI, it."""
    template = getattr(BlobStore, name)

    @functools.wraps(template)
    def passed_on(self: LoggedStore, *args: Any, **kwargs: Any) -> Any:
        uri = args[0] if args and isinstance(args[0], str) else ""
        return self._call(name, uri, lambda: getattr(self.inner, name)(*args, **kwargs))

    return passed_on


for _name in capabilities():
    setattr(LoggedStore, _name, _capability(_name))
for _name in operations():
    if _name not in vars(LoggedStore):
        setattr(LoggedStore, _name, _operation(_name))
del _name
abc.update_abstractmethods(LoggedStore)  # a required method added to BlobStore is passed on too


class _LoggedWriter(BlobWriter):
    """Passes writes and copies to the wrapped writer; logs its commit or abort with the bytes
    written. Other attributes are the wrapped writer's."""

    def __init__(self, inner: BlobWriter, store_name: str) -> None:
        super().__init__(inner.uri)
        self._inner = inner
        self._store_name = store_name
        self._opened = time.monotonic()

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        self._inner.write(data)

    def _copy(self, source: CopySource, start: int, length: int, expect: CopyCheck | None) -> None:
        self._inner.copy(source, start, length, expect)

    def flush(self) -> None:
        self._inner.flush()

    def _commit(self) -> None:
        try:
            self._inner.close()
            self.committed_version = self._inner.committed_version
        except BaseException as exc:
            log.debug("%s commit of %s raised %s", self._store_name, redact(self.uri), type(exc).__name__)
            raise
        log.debug(
            "%s commit of %s: %d bytes, %d copied on the server, %.3fs after open",
            self._store_name,
            redact(self.uri),
            self.bytes_written,
            self.bytes_copied,
            time.monotonic() - self._opened,
        )

    def _abort(self) -> None:
        self._inner.abort()
        log.debug("%s abort of %s after %d bytes", self._store_name, redact(self.uri), self.bytes_written)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # its own state, or not set yet (during construction)
            raise AttributeError(name)
        return getattr(self._inner, name)
