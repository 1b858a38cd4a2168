"""The shipped conformance suite, run on the built-in stores."""

from __future__ import annotations

import uuid

import pytest

from flyte_checkpoint.registry import store_for
from flyte_checkpoint.stores.local import LocalStore
from flyte_checkpoint.stores.memory import MemoryStore
from flyte_checkpoint.testing import BlobStoreSuite, CheckpointSuite


class TestLocalStore(BlobStoreSuite, CheckpointSuite):
    @pytest.fixture
    def store(self):
        return LocalStore()

    @pytest.fixture
    def store_root(self, tmp_path):
        return str(tmp_path / "store")


class TestLocalStoreByFileUri(BlobStoreSuite):
    large_object_size = 4 * 1024 * 1024

    @pytest.fixture
    def store(self):
        return store_for("file:///")

    @pytest.fixture
    def store_root(self, tmp_path):
        return str(tmp_path / "store")


class TestMemoryStore(BlobStoreSuite, CheckpointSuite):
    @pytest.fixture
    def store(self):
        return MemoryStore()

    @pytest.fixture
    def store_root(self):
        return f"memory://suite/{uuid.uuid4().hex}"
