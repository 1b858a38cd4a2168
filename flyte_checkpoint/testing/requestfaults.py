"""Faults at each kind of request of a save and of a read, through the fault proxy.

A backend that treats only 4xx answers as errors passes a suite whose faults hit only the first
request of a new connection: its commit, on a kept-alive connection, is never refused. Here the
proxy puts HTTP 429, 500, 503 and a reset at each kind of request a save makes (the start, the
first and the last part, the commit; the abort of a failed save) and a read makes (a stat, the
first and the last range, a listing, a delete), found from a clean run of each
(:mod:`.requestkinds`). The verdicts:

- a save raises a ``TransientError`` or goes through; afterwards the object is the new one, or
  (when the save raised) the previous one, whole, with nothing else left under the prefix. A save
  that returns normally with the previous object in place broke "a save that returned normally
  committed";
- a read raises a ``TransientError`` (never ``NotFoundError``: the object exists) or returns
  the right answer; a ``delete`` that returns has removed the object.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import NotFoundError, TransientError
from ..storage.blobstore import BlobStore
from ..uri import join
from .data import data, described, outcome, read_to_end, write_in_chunks
from .faultproxy import Fault, RequestRule
from .recipe import part_of
from .requestkinds import REQUEST_FAULTS, Position, commit_index, fault_label, positions, request_kind
from .sizes import units

if TYPE_CHECKING:
    from .faults import FaultBench


class _Abandoned(Exception):
    """Raised inside a writer's ``with`` block so that it aborts."""


class RequestFaultTests:
    """HTTP 429, 500, 503 and a reset at each kind of request (mixed into
    :class:`~flyte_checkpoint.testing.FaultSuite`, which gives the ``faults`` fixture)."""

    def test_a_fault_at_any_request_of_a_save_loses_nothing(self, faults: FaultBench) -> None:
        """For each kind of request a save makes (of an object of several parts, and of one
        that goes in one request), HTTP 429, 500, 503 and a reset at its first and its last
        request: the save raises ``TransientError`` or goes through, and then the object is the
        new one, or the previous one if the save raised; never the previous one after a save
        that returned. A fault at the abort of a failed save leaves the previous object."""
        uri = join(faults.root, "request-faults")
        faults.direct.write_bytes(uri, data(1000, seed=1))
        part = part_of(faults.direct)
        sizes = {"a save of one request": 1000}
        if faults.direct.part_size:
            sizes = {"a save of several parts": 2 * part + part // 2, **sizes}
        seeds = iter(range(10, 10_000))
        requests: dict[str, list[str]] = {}
        for what, size in sizes.items():
            faults.proxy.reset_records()
            _, error = outcome(lambda: _save(faults, uri, data(size, seed=next(seeds))))  # noqa: B023
            assert error is None, f"setup: {what} through the proxy, with no fault, raised {error!r}"
            requests[what] = clean = list(faults.proxy.log)
            commit = commit_index(clean, faults.recipe.commit)
            for position in positions(clean, commit):
                for fault in REQUEST_FAULTS:
                    self._save_with_fault(faults, uri, data(size, seed=next(seeds)), what, position, fault)
        if faults.direct.part_size:
            committed = [line for lines in requests.values() for line in lines]
            self._abort_with_faults(faults, uri, data(2 * part + part // 2, seed=next(seeds)), committed)

    def test_a_fault_at_any_request_of_a_read_is_raised_never_a_wrong_answer(
        self, faults: FaultBench
    ) -> None:
        """For each kind of request ``stat``, ``open_read`` (an object of several ranges),
        ``read_range``, ``list`` and ``delete`` make, HTTP 429, 500, 503 and a reset at its
        first and its last request: the operation raises ``TransientError`` (never
        ``NotFoundError``: the object is there) or gives the right answer; a ``delete`` that
        returned has removed the object."""
        uri = join(faults.root, "read-faults")
        gone = join(faults.root, "read-faults-deleted")
        found = units(faults.direct)
        unit = found[0][0] if found else 256 * 1024
        payload = data(2 * unit + unit // 2, seed=5)
        faults.direct.write_bytes(uri, payload)
        operations: dict[str, tuple[Callable[[BlobStore], Any], Any]] = {
            "stat": (lambda s: s.stat(uri), len(payload)),
            "open_read": (lambda s: read_to_end(s, uri), payload),
            "read_range": (lambda s: s.read_range(uri, unit - 10, 20), payload[unit - 10 : unit + 10]),
            "delete": (lambda s: s.delete(gone), None),
        }
        if faults.direct.supports_list:
            operations["list"] = (lambda s: list(s.list(faults.root + "/")), sorted([uri, gone]))
        for name, (operation, expected) in operations.items():
            faults.direct.write_bytes(gone, b"to be deleted")
            faults.proxy.reset_records()
            clean, error = outcome(lambda: operation(_proxied(faults)))  # noqa: B023 - called at once
            assert error is None and clean == expected, (
                f"setup: {name} through the proxy, with no fault, {described(clean, error)}"
            )
            for position in positions(list(faults.proxy.log)):
                for fault in REQUEST_FAULTS:
                    faults.direct.write_bytes(gone, b"to be deleted")
                    self._read_with_fault(faults, name, operation, expected, position, fault, gone)

    # -- saves ------------------------------------------------------------------------------

    def _save_with_fault(
        self, faults: FaultBench, uri: str, payload: bytes, what: str, position: Position, fault: Fault
    ) -> None:
        previous = faults.direct.read_bytes(uri)
        rule, _, error = _with_fault(faults, position, fault, lambda: _save(faults, uri, payload))
        at = f"{fault_label(fault)} at {position.label}"
        assert rule.fired == 1, (
            f"setup: {what} never made {position.label} again (it made {rule.seen} requests like it):"
            " its requests differ from run to run"
        )
        stored = _stored(faults, uri)
        if error is None:
            assert stored == payload, (
                f"promise broken: a save that returned normally did not commit; with {at}, {what}"
                f" returned normally and {uri} holds "
                + ("the previous object" if stored == previous else _held(stored))
            )
        else:
            assert isinstance(error, TransientError), (
                f"promise broken: {fault_label(fault)} is a TransientError (the core retries it); with"
                f" {at}, {what} raised {type(error).__name__}: {error}"
            )
            assert stored in (previous, payload), (
                f"promise broken: a save that raised leaves the previous object (or the new one) whole;"
                f" with {at}, {uri} holds {_held(stored)}"
            )
        self._nothing_else(faults, uri, at)

    def _abort_with_faults(self, faults: FaultBench, uri: str, payload: bytes, clean: list[str]) -> None:
        """HTTP 429, 500, 503 and a reset at each request that only an aborted save makes
        (``clean``: the committed saves' requests). Which parts an aborted save sent before the
        abort stopped it varies; the abort's own requests are each made once."""
        committed = {request_kind(line) for line in clean}
        faults.proxy.reset_records()
        _abandon(faults, uri, payload)
        aborts = [p for p in positions(list(faults.proxy.log)) if p.kind not in committed]
        for position in aborts:
            for fault in REQUEST_FAULTS:
                previous = faults.direct.read_bytes(uri)
                rule, _, error = _with_fault(faults, position, fault, lambda: _abandon(faults, uri, payload))
                at = f"{fault_label(fault)} at the abort's {position.label}"
                assert rule.fired == 1, f"setup: an aborted save never made {position.label} again"
                assert error is None or isinstance(error, TransientError), (
                    f"promise broken: a failed abort raises a TransientError or nothing; with {at},"
                    f" the abort raised {type(error).__name__}: {error}"
                )
                stored = _stored(faults, uri)
                assert stored == previous, (
                    f"promise broken: an aborted save never commits; with {at}, {uri} holds"
                    f" {_held(stored)}, not the previous {len(previous)} bytes"
                )
                self._nothing_else(faults, uri, at)

    def _nothing_else(self, faults: FaultBench, uri: str, at: str) -> None:
        if faults.direct.supports_list:
            left = list(faults.direct.list(faults.root + "/"))
            assert left == [uri], (
                f"promise broken: a save leaves no other object behind (temporary or partial); with"
                f" {at}, the prefix lists {left}"
            )

    # -- reads ------------------------------------------------------------------------------

    def _read_with_fault(
        self,
        faults: FaultBench,
        name: str,
        operation: Callable[[BlobStore], Any],
        expected: Any,
        position: Position,
        fault: Fault,
        gone: str,
    ) -> None:
        rule, got, error = _with_fault(faults, position, fault, lambda: operation(_proxied(faults)))
        at = f"{fault_label(fault)} at {position.label}"
        assert rule.fired == 1, f"setup: {name} never made {position.label} again"
        if error is not None:
            assert isinstance(error, TransientError) and not isinstance(error, NotFoundError), (
                f"promise broken: {fault_label(fault)} is a TransientError (the core retries it), never"
                f" 'no object'; with {at}, {name} raised {type(error).__name__}: {error}"
            )
        elif name == "delete":
            left = faults.direct.stat(gone)
            assert left is None, (
                f"promise broken: a delete that returned removed the object; with {at}, it is still there"
            )
        else:
            assert got == expected, (
                f"promise broken: a read under a fault raises or returns the right answer; with {at},"
                f" {name} {described(got, None)}"
                + (" (no checkpoint: the object exists)" if got is None else "")
            )


def _stored(faults: FaultBench, uri: str) -> bytes | None:
    """The object's bytes on the server, or None when it is absent."""
    try:
        return faults.direct.read_bytes(uri)
    except NotFoundError:
        return None


def _held(stored: bytes | None) -> str:
    """``"no object (the previous one is gone)"`` or ``"N bytes of neither version"``."""
    return (
        "no object (the previous one is gone)"
        if stored is None
        else f"{len(stored)} bytes of neither version"
    )


def _save(faults: FaultBench, uri: str, payload: bytes) -> None:
    write_in_chunks(_proxied(faults), uri, payload)


def _abandon(faults: FaultBench, uri: str, payload: bytes) -> None:
    """A save given up by its caller (an exception in the writer's block), so it aborts; raises
    only what the abort itself raised instead of the caller's exception."""
    with contextlib.suppress(_Abandoned), _proxied(faults).open_write(uri) as w:
        for i in range(0, len(payload), 64 * 1024):
            w.write(payload[i : i + 64 * 1024])
        raise _Abandoned


def _with_fault(
    faults: FaultBench, position: Position, fault: Fault, call: Callable[[], Any]
) -> tuple[RequestRule, Any, BaseException | None]:
    """``call()`` with ``fault`` at ``position``: the rule, and the call's result or error."""
    rule = faults.proxy.fail_request(position.matches, fault, nth=position.nth)
    try:
        got, error = outcome(call)
    finally:
        faults.proxy.heal()
    return rule, got, error


def _proxied(faults: FaultBench) -> BlobStore:
    """The one store of the test on the proxy (a fault hits a request on whichever connection it
    goes: a store keeps its connections from one case to the next, as in real use)."""
    if not faults.built:
        faults.store()
    return faults.built[0]


__all__ = ["RequestFaultTests"]
