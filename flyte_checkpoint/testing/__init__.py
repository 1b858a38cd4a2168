"""The conformance suite a backend must pass, shipped for backend authors.

Mix the suites into a test class of your own and provide two pytest fixtures::

    import pytest
    from flyte_checkpoint.testing import BlobStoreSuite, CheckpointSuite

    class TestMyStore(BlobStoreSuite, CheckpointSuite):
        @pytest.fixture
        def store(self):
            return MyStore(...)

        @pytest.fixture
        def store_root(self, store):
            return "mystore://test-bucket/" + uuid.uuid4().hex   # empty, unique per test

``store`` is the :class:`~flyte_checkpoint.storage.blobstore.BlobStore` under test and
``store_root`` a URI prefix under which nothing exists yet (the suite checks that).
For ``CheckpointSuite`` the store must also be the one the registry resolves for
``store_root``'s scheme (an installed plugin, or :func:`flyte_checkpoint.register_store`).

Class attributes adapt the suite to the backend:

- ``large_object_size``: bytes in the "large object" tests (default 24 MiB: big
  enough to cross multipart/chunk boundaries of the usual defaults);
- ``supports_list`` (default True): set it to False for a store that cannot list; the
  listing test is then not part of the class at all (it neither runs nor skips), and the
  other tests stop looking at listings.
"""

from .suite import BlobStoreSuite, CheckpointSuite

__all__ = ["BlobStoreSuite", "CheckpointSuite"]
