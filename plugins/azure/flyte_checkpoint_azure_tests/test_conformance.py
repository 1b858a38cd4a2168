"""The core's conformance suites against Azurite, through the registry and built directly."""

from __future__ import annotations

import uuid

import pytest
from flyte_checkpoint_azure.config import AzureConfig
from flyte_checkpoint_azure.store import AzureStore

from flyte_checkpoint.storage.registry import get_registry, store_for
from flyte_checkpoint.testing import (
    BlobStoreSuite,
    CheckpointSuite,
    CopyCheckSuite,
    CopySuite,
    CrashSuite,
    FaultSuite,
    StoreRecipe,
)

from .helpers import BUCKET, MISSING_BUCKET, fault_store
from .server import ACCOUNT_KEY, ACCOUNT_NAME, AzureServer

pytestmark = pytest.mark.integration


class TestAzureConformance(BlobStoreSuite, CheckpointSuite, CopySuite, CopyCheckSuite):
    """``az://`` URIs; the store is the one the registry builds from the entry point and
    the environment (connection string, 320 KiB blocks, 192 KiB read ranges)."""

    # About 10 blocks and 17 ranges: many parts, in flight at once, cheaply.
    large_object_size = 3 * 1024 * 1024 + 12_345

    @pytest.fixture
    def store(self, azure_env: AzureServer) -> AzureStore:
        store = store_for(f"az://{BUCKET}/x")
        assert isinstance(store, AzureStore)
        assert get_registry().backend_for("az://c/x").distribution == "flyte-checkpoint-azure"
        return store

    @pytest.fixture
    def store_root(self) -> str:
        return f"az://{BUCKET}/{uuid.uuid4().hex}"


class TestAzureFaults(FaultSuite, CrashSuite):
    """Through the fault proxy in front of Azurite, and a child process killed mid-upload."""

    @pytest.fixture
    def store_recipe(self, azure_server: AzureServer) -> StoreRecipe:
        return StoreRecipe(
            azure_server.endpoint, fault_store, missing_container=f"az://{MISSING_BUCKET}/ckpt"
        )

    @pytest.fixture
    def store_root(self) -> str:
        return f"az://{BUCKET}/{uuid.uuid4().hex}"


def test_list_details_comes_from_the_listing(make_store, prefix: str) -> None:
    """Native: modification times are given, and no object is stat'ed (the default would)."""
    store = make_store()
    root = f"az://{BUCKET}/{prefix}"
    store.write_bytes(f"{root}/a/1", b"1")
    store.write_bytes(f"{root}/b", b"22")
    store.stat = None  # type: ignore[assignment,method-assign]  # any stat call would fail
    every = list(store.list_details(root + "/"))
    assert [(i.uri, i.size) for i in every] == [(f"{root}/a/1", 1), (f"{root}/b", 2)]
    assert all(i.modified is not None and i.modified.tzinfo is not None for i in every)
    top = [(i.uri, i.is_folder) for i in store.list_details(root + "/", recursive=False)]
    assert top == [(f"{root}/a/", True), (f"{root}/b", False)]


class TestAzureConformanceAccountHostUri(BlobStoreSuite):
    """``abfss://container@account.dfs.core.windows.net/...`` URIs with a store built
    directly from an account name, key and endpoint, with its MD5 checks off."""

    large_object_size = 2 * 1024 * 1024 + 7  # 6 blocks of 384 KiB, 21 ranges of 100 kB

    @pytest.fixture
    def store(self, azure_server: AzureServer):
        store = AzureStore(
            AzureConfig.resolve(
                env={},
                account_name=ACCOUNT_NAME,
                account_key=ACCOUNT_KEY,
                endpoint_url=azure_server.endpoint,
                part_size=384 * 1024,
                max_concurrency=3,
                read_range_size=100_000,
                read_concurrency=3,
                checksum="NONE",
                verify_checksums=False,
            )
        )
        yield store
        store.close()

    @pytest.fixture
    def store_root(self) -> str:
        return f"abfss://{BUCKET}@{ACCOUNT_NAME}.dfs.core.windows.net/{uuid.uuid4().hex}"
