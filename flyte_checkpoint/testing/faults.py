"""The fault suite: a network store's promises, tested through a fault-injecting proxy.

Mix :class:`FaultSuite` into a test class that provides the fixtures ``store_recipe`` (a
:class:`~flyte_checkpoint.testing.recipe.StoreRecipe`) and ``store_root`` (an empty, unique URI
prefix, as for :class:`~flyte_checkpoint.testing.BlobStoreSuite`). Each test builds fresh stores
pointed at a :class:`~flyte_checkpoint.testing.faultproxy.FaultProxy` in front of the recipe's
server, injects one fault, and checks the result with a store that talks to the server itself.
A failure's message starts with ``promise broken:`` and says which promise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest

from ..errors import CheckpointError, CheckpointPermissionError, NotFoundError, TransientError
from ..storage.blobstore import BlobStore
from ..uri import join
from .containers import ContainerSuite
from .data import data as _data
from .data import outcome, read_to_end, write_in_chunks
from .faultproxy import Fault, FaultProxy, RequestRule
from .recipe import StoreRecipe, part_of
from .registered import QUICK_RETRY, load_through
from .requestfaults import RequestFaultTests
from .suite import check_empty_root

#: Bytes into a connection at which a download fault fires: past the headers and a stat's
#: answer, inside the body of the object (or of its first ranges).
MID_BODY = 100_000


class FaultBench:
    """What a fault test works with: the proxy in front of the server, a store on the server
    itself (to check objects), the empty root, and :meth:`store` for new stores on the proxy."""

    def __init__(self, recipe: StoreRecipe, proxy: FaultProxy, direct: BlobStore, root: str) -> None:
        self.recipe, self.proxy, self.direct, self.root = recipe, proxy, direct, root
        self.built: list[BlobStore] = []

    def store(self) -> BlobStore:
        """A new store (a new connection pool) whose requests go through the proxy."""
        self.built.append(self.recipe.build(self.proxy.url))
        return self.built[-1]

    def done(self, store: BlobStore) -> None:
        """Close a store made by :meth:`store` (a test that makes many closes each when done)."""
        self.built.remove(store)
        store.close()


class DeniedObjectTests:
    """The object's requests denied alone (mixed into :class:`FaultSuite` and
    :class:`RequestFaultSuite`, which give the ``faults`` fixture)."""

    def test_a_denied_object_in_a_bucket_that_answers_is_a_permission_error(self, faults: FaultBench) -> None:
        """Only the requests that name the object denied (the bucket's answered, as when an
        account may list a bucket but not read one folder of it): reads and a ``Checkpoint``
        load still raise ``CheckpointPermissionError``, never "no checkpoint" (a store that
        takes a denial for absence, then finds the bucket there, answers ``None``)."""
        rules: list[RequestRule] = []

        def deny() -> None:
            rules.append(
                # the object's name in its requests' lines, however the store spells the path
                faults.proxy.fail_request(lambda line: "denied" in line, Fault.answer(403), times=2**62)
            )

        check_denied(faults, deny, lambda: rules[0].fired, writes=False)


class FaultSuite(DeniedObjectTests, RequestFaultTests, ContainerSuite):
    """Interrupted saves, cut and stalled downloads, denied and throttled requests; a fault at
    each kind of request (:mod:`.requestfaults`); a missing container (:class:`ContainerSuite`).

    ``fault_parts``: the parts (``store.part_size`` bytes each; 256 KiB for a store that
    declares none) of an object in the save tests; the upload is cut once all but one part
    has gone to the server, so a writer that sends parts in place has sent at least one.
    """

    fault_parts: int = 4

    @pytest.fixture
    def faults(self, store_recipe: StoreRecipe, store_root: str) -> Iterator[FaultBench]:
        """The proxy in front of the recipe's server, a store on the server itself, the root."""
        assert store_recipe.upstream is not None, (
            "setup: FaultSuite needs a store that talks to a server: its StoreRecipe has no upstream"
        )
        direct = store_recipe.direct()
        with FaultProxy(store_recipe.upstream) as proxy:
            bench = FaultBench(store_recipe, proxy, direct, store_root)
            try:
                if direct.supports_list:
                    check_empty_root(direct, store_root)
                yield bench
            finally:
                for store in [*bench.built, direct]:
                    store.close()

    # -- saves ---------------------------------------------------------------------------

    def _cut_save(self, faults: FaultBench, uri: str) -> None:
        """Save ``fault_parts`` and a half parts at ``uri``, the upload cut one part before its
        end (every connection reset from then on); the save must raise a project error."""
        store = faults.store()
        part = part_of(store)
        size = self.fault_parts * part + part // 2
        faults.proxy.cut("up", size - part)
        _, error = outcome(lambda: write_in_chunks(store, uri, _data(size, seed=2)))
        assert faults.proxy.fired, (
            f"setup: the cut never fired: the store sent less than {size - part} bytes for a {size}-byte save"
        )
        assert error is not None, (
            f"promise broken: a save to {uri} whose upload was reset for good returned without an error"
        )
        assert isinstance(error, CheckpointError), (
            f"promise broken: errors are the project's own; a reset upload raised"
            f" {type(error).__name__}: {error}"
        )

    def test_interrupted_save_leaves_the_previous_object_whole(self, faults: FaultBench) -> None:
        """A save reset mid-upload (after more than one part went to the server) leaves the
        previous object exactly as it was, and no other object under the prefix."""
        uri = join(faults.root, "interrupted")
        previous = _data(100_000, seed=1)
        faults.direct.write_bytes(uri, previous)
        self._cut_save(faults, uri)
        size = faults.direct.stat(uri)
        assert size == len(previous) and faults.direct.read_bytes(uri) == previous, (
            f"promise broken: an interrupted save leaves the previous object whole; {uri} now holds"
            f" {size} bytes, not the previous {len(previous)} (the writer sent parts in place?)"
        )
        if faults.direct.supports_list:
            left = list(faults.direct.list(faults.root))
            assert left == [uri], (
                f"promise broken: an interrupted save leaves no partial object; listed {left}"
            )

    def test_interrupted_save_leaves_no_partial_object(self, faults: FaultBench) -> None:
        """A first save of a URI reset mid-upload leaves no object there."""
        uri = join(faults.root, "never-whole")
        self._cut_save(faults, uri)
        size = faults.direct.stat(uri)
        assert size is None, (
            f"promise broken: an interrupted save leaves no partial object; {uri} holds {size} bytes"
        )
        if faults.direct.supports_list:
            left = list(faults.direct.list(faults.root))
            assert left == [], f"promise broken: an interrupted save leaves no partial object; listed {left}"

    # -- downloads -----------------------------------------------------------------------

    def _stored(self, faults: FaultBench, name: str) -> tuple[str, bytes]:
        uri = join(faults.root, name)
        data = _data(self.fault_parts * part_of(faults.direct) + 12_345, seed=4)
        faults.direct.write_bytes(uri, data)
        return uri, data

    def test_cut_download_is_retried_or_raised_never_returned_short(self, faults: FaultBench) -> None:
        """A download reset or ended early (a FIN) mid-body either comes back whole (the store
        retried inside the stream) or raises a project error; it never ends the stream early.
        Cut for good, it raises (and not ``NotFoundError``: the object exists)."""
        uri, data = self._stored(faults, "cut-download")
        for fault in (Fault.reset("down", after=MID_BODY), Fault.truncate("down", after=MID_BODY)):
            faults.proxy.reset_records()
            faults.proxy.fail(fault, times=1)
            store = faults.store()
            for name, read in (("open_read", read_to_end), ("read_bytes", BlobStore.read_bytes)):
                got, error = outcome(lambda: read(store, uri))  # noqa: B023 - called at once
                if error is None:
                    assert got == data, (
                        f"promise broken: a cut download is retried or raised, never returned short;"
                        f" {name} after a {fault.action} returned {len(got)} of {len(data)} bytes"
                        + (" (equal length, other bytes)" if len(got) == len(data) else "")
                    )
                else:
                    assert isinstance(error, CheckpointError) and not isinstance(error, NotFoundError), (
                        f"promise broken: a cut download raises a project error other than NotFoundError;"
                        f" {name} after a {fault.action} raised {type(error).__name__}: {error}"
                    )
            assert faults.proxy.fired == 1, (
                f"setup: the {fault.action} never fired: the object is smaller than {MID_BODY} bytes?"
            )
        faults.proxy.cut("down", len(data) // 2)
        got, error = outcome(lambda: read_to_end(faults.store(), uri))
        assert error is not None, (
            f"promise broken: a download cut for good raises; open_read returned"
            f" {len(got)} of {len(data)} bytes"
        )
        assert isinstance(error, CheckpointError) and not isinstance(error, NotFoundError), (
            f"promise broken: a cut download raises a project error other than NotFoundError;"
            f" it raised {type(error).__name__}: {error}"
        )

    def test_stalled_download_ends_by_a_timeout(self, faults: FaultBench) -> None:
        """A download whose every connection stops sending mid-body raises ``TransientError``
        once the store's read timeout passes (build the recipe's store with a short one); it
        never hangs. (The proxy's hang guard is not the timeout under test.)"""
        uri, _ = self._stored(faults, "stalled")
        faults.proxy.fail(Fault.stall("down", after=MID_BODY))
        got, error = outcome(lambda: read_to_end(faults.store(), uri))
        assert faults.proxy.fired, "setup: the stall never fired"
        assert error is not None, (
            f"promise broken: a download that stalls for good raises; it returned {len(got)} bytes"
        )
        assert isinstance(error, TransientError), (
            f"promise broken: a stalled download is a TransientError (retried by the core); it raised"
            f" {type(error).__name__}: {error}"
        )

    # -- refusals ------------------------------------------------------------------------

    def test_denied_request_is_a_permission_error_never_no_checkpoint(self, faults: FaultBench) -> None:
        """Every operation answered HTTP 403 raises ``CheckpointPermissionError``, never
        ``NotFoundError`` or ``None``: a load through ``Checkpoint`` then fails instead of
        starting training from zero."""
        check_denied(faults, lambda: faults.proxy.fail(Fault.answer(403)), lambda: faults.proxy.fired)

    def test_throttling_and_server_errors_are_retried_by_the_core(self, faults: FaultBench) -> None:
        """HTTP 429, 500 and 503 raise ``TransientError`` (a store that returns after one such
        answer retried it itself: build the recipe's store without SDK retries), and the
        core's retry policy then gets the operation through: the proxy answers the first two
        requests with the status and passes the rest, and the object is whole."""
        uri = join(faults.root, "throttled")
        faults.direct.write_bytes(uri, b"first")
        for status in (429, 500, 503):
            faults.proxy.reset_records()
            faults.proxy.fail(Fault.answer(status), times=1)
            got, error = outcome(lambda: faults.store().read_bytes(uri))
            assert faults.proxy.fired == 1, (
                f"setup: the proxy answered {faults.proxy.fired} requests with {status}, not 1"
            )
            assert isinstance(error, TransientError), (
                f"promise broken: HTTP {status} raises TransientError, which the core retries; the read "
                + (
                    "returned: the store's SDK retried by itself (build the recipe's store with"
                    " request attempts 1)"
                    if error is None
                    else f"raised {type(error).__name__}: {error}"
                )
            )
            data = _data(part_of(faults.direct) + 1000, seed=status)
            for name, operation in (
                ("save", lambda: write_in_chunks(faults.store(), uri, data)),  # noqa: B023
                ("load", lambda: faults.store().read_bytes(uri)),
            ):
                faults.proxy.reset_records()
                faults.proxy.fail(Fault.answer(status), times=2)
                got, error = outcome(lambda: QUICK_RETRY.call(operation, f"{name} under HTTP {status}"))  # noqa: B023
                assert error is None, (
                    f"promise broken: the core retries HTTP {status}; a {name} failed after two such"
                    f" answers: {type(error).__name__}: {error}"
                )
                assert faults.proxy.fired == 2, (
                    f"setup: the proxy answered {faults.proxy.fired} requests with {status}, not 2"
                )
                if name == "load":
                    assert got == data, (
                        f"promise broken: a retried load returns the object whole ({len(got)} bytes)"
                    )
            assert faults.direct.read_bytes(uri) == data, (
                "promise broken: a retried save stores the object whole"
            )


def check_denied(
    faults: FaultBench, deny: Callable[[], Any], fired: Callable[[], int], *, writes: bool = True
) -> None:
    """After ``deny()`` (requests answered "denied", HTTP 403 or the protocol's reply of that
    meaning), every operation on the object ``denied`` (reads only, unless ``writes``) raises
    ``CheckpointPermissionError``; ``fired()`` counts the denials given."""
    uri = join(faults.root, "denied")
    faults.direct.write_bytes(uri, b"exists")
    deny()
    store = faults.store()
    operations: dict[str, Callable[[], Any]] = {
        "stat": lambda: store.stat(uri),
        **({"stat of an absent object": lambda: store.stat(join(faults.root, "absent"))} if writes else {}),
        "open_read": lambda: read_to_end(store, uri),
        "read_range": lambda: store.read_range(uri, 0, 3),
        "Checkpoint.load_sync": lambda: load_through(store, uri, join(faults.root, "next")),
    }
    if writes:
        operations["write"] = lambda: store.write_bytes(join(faults.root, "new"), b"x")
    if writes and store.supports_list:
        operations["list"] = lambda: list(store.list(faults.root + "/"))
    for name, operation in operations.items():
        before = fired()
        got, error = outcome(operation)
        assert writes or fired() > before, f"setup: {name} made no request that names the object"
        assert isinstance(error, CheckpointPermissionError), (
            f"promise broken: a denied request (HTTP 403) raises CheckpointPermissionError, never"
            f" 'no checkpoint'; {name} "
            + (f"returned {got!r}" if error is None else f"raised {type(error).__name__}: {error}")
        )
    assert fired() >= len(operations), (
        f"setup: {fired()} requests were denied, fewer than the {len(operations)} operations"
    )


class RequestFaultSuite(DeniedObjectTests, RequestFaultTests, ContainerSuite):
    """For a store whose protocol :class:`FaultProxy` cannot carry (it speaks HTTP; FTP's data
    connections go around any proxy): the faults at each kind of request
    (:mod:`.requestfaults`) and the denied requests of :class:`FaultSuite`, put by the recipe's
    own ``injector`` (:class:`~flyte_checkpoint.testing.recipe.StoreRecipe`) in the server;
    and :class:`ContainerSuite`."""

    @pytest.fixture
    def faults(self, store_recipe: StoreRecipe, store_root: str) -> Iterator[FaultBench]:
        """The recipe's injector (as the bench's proxy), a store on the server, the root."""
        injector = store_recipe.injector
        assert injector is not None, (
            "setup: RequestFaultSuite needs StoreRecipe.injector, the store's own fault injection"
        )
        direct = store_recipe.build(injector.url)
        # The request tests use only the part of FaultProxy's interface an injector has.
        bench = FaultBench(store_recipe, cast(FaultProxy, injector), direct, store_root)
        injector.heal()
        injector.reset_records()
        try:
            if direct.supports_list:
                check_empty_root(direct, store_root)
            yield bench
        finally:
            injector.heal()
            for store in [*bench.built, direct]:
                store.close()

    def test_denied_request_is_a_permission_error_never_no_checkpoint(self, faults: FaultBench) -> None:
        """Every operation denied (the injector's answer to HTTP 403, at every request) raises
        ``CheckpointPermissionError``, never ``NotFoundError`` or ``None``."""
        rules: list[RequestRule] = []

        def deny() -> None:
            rules.append(faults.proxy.fail_request(lambda line: True, Fault.answer(403), times=2**62))

        check_denied(faults, deny, lambda: rules[0].fired)
