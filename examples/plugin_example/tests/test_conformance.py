"""The example backend passes the conformance suites, resolved through its entry point."""

import functools
import uuid

import pytest
from fc_example_store.store import FolderStore

from flyte_checkpoint import configure_store
from flyte_checkpoint.storage import store_for
from flyte_checkpoint.testing import BlobStoreSuite, CheckpointSuite, ContainerSuite, CrashSuite, StoreRecipe

#: Small parts and ranges, so that a few MiB cross many of them (the suite tests around both).
SMALL = {"part_size": 256 * 1024, "read_range_size": 64 * 1024, "max_concurrency": 2}


@pytest.fixture
def store_folder(tmp_path):
    """The store's root folder, with the bucket folder the tests use (a bucket must exist)."""
    (tmp_path / "root" / "bucket").mkdir(parents=True)
    return tmp_path / "root"


class TestFolderStore(BlobStoreSuite, CheckpointSuite):
    large_object_size = 4 * 1024 * 1024

    @pytest.fixture
    def store(self, store_folder):
        configure_store("folder", root=str(store_folder), **SMALL)  # the next store_for builds a new store
        yield store_for("folder://any")
        configure_store("folder")  # back to the environment and the defaults

    @pytest.fixture
    def store_root(self):
        return f"folder://bucket/{uuid.uuid4().hex}"


class TestFolderStoreRecipe(CrashSuite, ContainerSuite):
    """A process killed mid-save (no server: on its own report) leaves the previous object
    whole; every operation in a missing bucket raises ContainerNotFoundError."""

    @pytest.fixture
    def store_recipe(self, store_folder):
        # FolderStore(None, root=...): the endpoint argument is the config's place, unused
        build = functools.partial(FolderStore, root=str(store_folder), **SMALL)
        return StoreRecipe(None, build, missing_container="folder://no-such-bucket/ckpt")

    @pytest.fixture
    def store_root(self):
        return f"folder://bucket/{uuid.uuid4().hex}"
