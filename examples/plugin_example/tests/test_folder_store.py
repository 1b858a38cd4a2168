"""The example backend passes the conformance suite, resolved through its entry point."""

import uuid

import pytest

from flyte_checkpoint.storage.registry import store_for
from flyte_checkpoint.testing import BlobStoreSuite, CheckpointSuite


class TestFolderStore(BlobStoreSuite, CheckpointSuite):
    large_object_size = 4 * 1024 * 1024

    @pytest.fixture
    def store(self, tmp_path, monkeypatch):
        monkeypatch.setenv("FOLDER_STORE_ROOT", str(tmp_path / "root"))
        from flyte_checkpoint.storage.registry import get_registry

        get_registry().close()  # a fresh store reads the new root
        return store_for("folder://any")

    @pytest.fixture
    def store_root(self, store):
        return f"folder://bucket/{uuid.uuid4().hex}"
