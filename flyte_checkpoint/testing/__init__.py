"""The conformance suites a backend must pass, shipped for backend authors.

Mix the suites into a test class of your own and provide pytest fixtures::

    import pytest
    from flyte_checkpoint.testing import (
        BlobStoreSuite, CheckpointSuite, CrashSuite, FaultSuite, StoreRecipe,
    )

    def build_store(endpoint):               # module level: CrashSuite's child imports it
        return MyStore(endpoint_url=endpoint, request_attempts=1, read_timeout=1.0)

    class TestMyStore(BlobStoreSuite, CheckpointSuite, FaultSuite, CrashSuite):
        @pytest.fixture
        def store(self):
            return MyStore(...)

        @pytest.fixture
        def store_root(self):
            return "mystore://test-bucket/" + uuid.uuid4().hex   # empty, unique per test

        @pytest.fixture
        def store_recipe(self, my_server):
            return StoreRecipe(
                upstream=my_server.endpoint,
                build=build_store,
                missing_container="mystore://no-such-bucket/x",  # a bucket the server lacks
            )

``store`` is the :class:`~flyte_checkpoint.storage.blobstore.BlobStore` under test and
``store_root`` a URI prefix under which nothing exists yet (the suites check that).
For ``CheckpointSuite`` the store must also be the one the registry resolves for
``store_root``'s scheme (an installed plugin, or :func:`flyte_checkpoint.register_store`).

- :class:`BlobStoreSuite`: the contract of :mod:`flyte_checkpoint.storage.blobstore` (streams,
  atomic writes, stat, delete, list, errors), at sizes it picks around the store's parts and
  read ranges (:mod:`.sizes`), with siblings that share a name prefix and odd keys
  (:mod:`.listing`), and with readers while the object is overwritten (:mod:`.overwrites`);
- :class:`CheckpointSuite`: save and load through ``Checkpoint``;
- :class:`FaultSuite` (network stores): through a :class:`FaultProxy` in front of the server,
  an interrupted save (sized from the store's ``part_size``) leaves the previous object whole
  and no partial one; a cut download is retried or raised, never returned short; a stalled one
  ends by the store's timeout; HTTP 403 is ``CheckpointPermissionError``, never "no
  checkpoint" (every request denied, or the object's alone); 429 and 5xx are
  ``TransientError`` and the core's retry gets through them;
  HTTP 429, 500, 503 and a reset at each kind of request of a save and a read (the commit
  included) never lose a save nor answer a read wrong (:mod:`.requestfaults`); it includes
- :class:`RequestFaultSuite` (a protocol the HTTP proxy cannot carry, such as FTP): the
  faults at each kind of request and the denied requests, put by the recipe's own
  ``injector`` in the server; it includes
- :class:`ContainerSuite`: every operation in a missing bucket raises
  ``ContainerNotFoundError`` (stores with no server mix it in alone);
- :class:`CopySuite` (stores that declare ``copy_limits``): objects built from written bytes
  and ranges of other objects copied by the server, in order, atomic, never from a source
  replaced meanwhile;
- :class:`CopyCheckSuite` (stores that declare ``copy_limits``): a copy checked against the
  CRC-32s the caller expects commits nothing, and names the damaged pieces, where the source's
  bytes are not those;
- :class:`IncrementalSuite` (network stores with ``copy_limits``): folder saves through a
  proxy that counts the bytes sent: only changed files go up; a source replaced mid-save and a
  save killed midway commit nothing;
- :class:`PinnedReadSuite` (any store): ``pin`` describes one version of an object and reads
  only it (where the store declares ``supports_pinned_reads``), and ``changed()`` tells a
  replaced or removed object, so that a load racing a commit is never called damaged;
- :class:`HistorySuite` (any store the registry resolves): manifests written with every save,
  ``fc.history`` from one listing and the summaries (its store calls counted: no object read),
  generations kept by ``copy_object``, and ``load(fallback=True)`` (docs/history.md);
- :class:`CrashSuite`: a process SIGKILLed mid-save (mid-upload, through the proxy, for a
  network store) leaves the previous object whole: it catches a server that writes in place.

``FaultSuite``, ``ContainerSuite`` and ``CrashSuite`` build their stores from the
``store_recipe`` fixture (a
:class:`StoreRecipe`: the server's endpoint and how to build a store pointed at any endpoint,
with SDK retries off and short timeouts: a backend on the kit's ``CloudConfig`` passes
:data:`RECIPE_SETTINGS`). A failing test's message says ``promise broken:`` and names the
promise (or ``setup:`` when the test's own preparation failed).

Class attributes adapt the suites to the backend:

- ``large_object_size``: bytes of the large checkpoint test, and a size the size tests add to
  the ones they pick (default 24 MiB);
- ``overwrites`` (default 8, or ``FCP_SUITE_OVERWRITES``): the versions of the readers' test;
- ``supports_list`` (default True): set it to False for a store that cannot list; the
  listing test is then not part of the class at all (it neither runs nor skips), and the
  other tests stop looking at listings;
- ``fault_parts`` / ``crash_parts`` (default 4): the size, in parts, of the objects the fault
  and crash tests save.
"""

from .containers import ContainerSuite
from .copies import CopySuite
from .crash import CrashSuite
from .faultproxy import Fault, FaultProxy
from .faults import FaultSuite, RequestFaultSuite
from .history import HistorySuite
from .incremental import CopyCheckSuite, IncrementalSuite
from .pinned import PinnedReadSuite
from .recipe import RECIPE_SETTINGS, StoreRecipe
from .suite import BlobStoreSuite, CheckpointSuite

__all__ = [
    "RECIPE_SETTINGS",
    "BlobStoreSuite",
    "CheckpointSuite",
    "ContainerSuite",
    "CopyCheckSuite",
    "CopySuite",
    "CrashSuite",
    "Fault",
    "FaultProxy",
    "FaultSuite",
    "HistorySuite",
    "IncrementalSuite",
    "PinnedReadSuite",
    "RequestFaultSuite",
    "StoreRecipe",
]
