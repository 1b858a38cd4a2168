"""The example backend passes the conformance suite, resolved through its entry point."""

import functools
import uuid

import pytest
from fc_example_store.store import FolderStore

from flyte_checkpoint import configure_store
from flyte_checkpoint.storage import store_for
from flyte_checkpoint.testing import BlobStoreSuite, CheckpointSuite, CrashSuite, StoreRecipe


class TestFolderStore(BlobStoreSuite, CheckpointSuite):
    large_object_size = 4 * 1024 * 1024

    @pytest.fixture
    def store(self, tmp_path):
        configure_store("folder", root=str(tmp_path / "root"))  # the next store_for builds a new store
        yield store_for("folder://any")
        configure_store("folder")  # back to the environment and the defaults

    @pytest.fixture
    def store_root(self):
        return f"folder://bucket/{uuid.uuid4().hex}"


class TestFolderStoreCrash(CrashSuite):
    """A process killed mid-save (no server: on its own report) leaves the previous object whole."""

    @pytest.fixture
    def store_recipe(self, tmp_path):
        # FolderStore(None, root=...): the endpoint argument is the config's place, unused
        return StoreRecipe(None, functools.partial(FolderStore, root=str(tmp_path / "root")))

    @pytest.fixture
    def store_root(self):
        return f"folder://bucket/{uuid.uuid4().hex}"
