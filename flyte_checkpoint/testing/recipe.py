"""How the fault and crash suites build the store under test, pointed at any endpoint."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..storage.blobstore import BlobStore

#: Bytes of one "part" for a store that declares no ``part_size`` (it holds the whole object).
FALLBACK_PART = 256 * 1024
#: Settings of the kit's ``CloudConfig`` for a recipe's store: no SDK retry (the core's retry is
#: under test), a 2 s read timeout (a stalled transfer ends), 256 KiB parts and ranges, two in
#: flight (an upload cut near its end has sent whole parts). Lay a cloud's own limits over it.
RECIPE_SETTINGS: dict[str, Any] = {
    "part_size": 256 * 1024,
    "read_range_size": 256 * 1024,
    "max_concurrency": 2,
    "read_concurrency": 2,
    "request_attempts": 1,
    "read_timeout": 2.0,
}


@dataclass(frozen=True)
class StoreRecipe:
    """The store under test, buildable against the real server or the fault proxy in front of it.

    Attributes:
        upstream: the real server's endpoint, ``http://127.0.0.1:PORT`` (with a path when the
            store's endpoint setting has one, as Azurite's ``/devstoreaccount1``); ``None`` for
            a store with no server (a file system): only :class:`CrashSuite` applies to it.
        build: ``build(endpoint)`` returns a new store that sends every request to ``endpoint``
            (``None`` when ``upstream`` is).
            Build it as the suites need: no SDK retries (request attempts 1: the core's retry
            layer is the one under test), short read timeouts (a stall must end in seconds),
            and few parts in flight (``max_concurrency`` 1 or 2, so that an upload cut after
            several parts has sent at least one whole part). For :class:`CrashSuite` it must
            pickle: a module-level function, or a ``functools.partial`` of one with plain
            arguments; a child process unpickles it with the parent's ``sys.path``.
        missing_container: a URI prefix in a bucket (container) that does not exist on the
            server, such as ``"s3://no-such-bucket-fcp/ckpt"``: :class:`FaultSuite` checks that
            every operation there raises ``ContainerNotFoundError``. Required by that test.
        commit: a regular expression found (``re.search``) in the request line that commits a
            save (``"POST /b/k?uploadId=X"``: ``r"^POST .*[?&]uploadId="``), for
            :class:`FaultSuite`'s messages; default: a save's last request. Either way the suite
            puts faults at every kind of request.
        injector: for a protocol :class:`FaultProxy` cannot carry (it speaks HTTP; FTP's data
            connections go around any proxy), the author's own fault injection in or beside
            the server, for :class:`RequestFaultSuite`: ``url`` (the endpoint ``build`` takes),
            ``log`` (each request line of an operation, in the order the server got them),
            ``fail_request(match, fault, nth=1, times=1)`` returning a ``RequestRule`` as
            :meth:`FaultProxy.fail_request` does (``Fault.answer(status)`` answered with the
            protocol's reply of that meaning, ``Fault.reset`` closing the connection),
            ``heal()`` and ``reset_records()``.
    """

    upstream: str | None
    build: Callable[[Any], BlobStore]
    missing_container: str | None = None
    commit: str | None = None
    injector: Any = None

    def direct(self) -> BlobStore:
        """A store talking to the server itself (the suites check objects with it)."""
        return self.build(self.upstream)


def part_of(store: BlobStore) -> int:
    """The bytes of one part of ``store``'s writer (its ``part_size``, or :data:`FALLBACK_PART`)."""
    part = store.part_size
    return part if part else FALLBACK_PART
