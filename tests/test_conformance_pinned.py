"""The pinned-read suite (flyte_checkpoint.testing.pinned) on the built-in stores, and on a store
that cannot pin (the default pin: plain reads, checked afterwards)."""

from __future__ import annotations

import uuid

import pytest

from flyte_checkpoint.storage.blobstore import BlobStore
from flyte_checkpoint.storage.pinned import CheckedObject
from flyte_checkpoint.storage.stores.local import LocalStore
from flyte_checkpoint.storage.stores.memory import MemoryStore
from flyte_checkpoint.testing import PinnedReadSuite


class UnpinnedMemoryStore(MemoryStore):
    """The memory store without its pin: what a third-party store that never heard of pins gets."""

    supports_pinned_reads = False
    pin = BlobStore.pin


class TestLocalStorePins(PinnedReadSuite):
    @pytest.fixture
    def store(self):
        return LocalStore()

    @pytest.fixture
    def store_root(self, tmp_path):
        return str(tmp_path / "store")


class TestMemoryStorePins(PinnedReadSuite):
    @pytest.fixture
    def store(self):
        return MemoryStore()

    @pytest.fixture
    def store_root(self):
        return f"memory://pins/{uuid.uuid4().hex}"


class TestUnpinnedStore(PinnedReadSuite):
    """Reads of whatever is there: only ``changed()`` is promised, so the pin tests are not part
    of this class; the default pin compares the size and ``copy_source``'s version."""

    server_honours_pins = False

    @pytest.fixture
    def store(self):
        return UnpinnedMemoryStore()

    @pytest.fixture
    def store_root(self):
        return f"memory://unpinned/{uuid.uuid4().hex}"

    def test_the_default_pin_is_a_checked_object(self, store, store_root):
        store.write_bytes(f"{store_root}/x", b"x")
        assert isinstance(store.pin(f"{store_root}/x"), CheckedObject)
