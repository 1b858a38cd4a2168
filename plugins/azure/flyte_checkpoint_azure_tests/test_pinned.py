"""Pinned reads on Azure against Azurite, which honours ``If-Match`` on Get Blob (412 once the
blob's ETag changed): the pin suite."""

from __future__ import annotations

import uuid

import pytest
from flyte_checkpoint_azure.store import AzureStore

from flyte_checkpoint.errors import ObjectReplacedError
from flyte_checkpoint.storage.registry import store_for
from flyte_checkpoint.testing import PinnedReadSuite

from .helpers import BUCKET
from .server import AzureServer

pytestmark = pytest.mark.integration


class TestAzurePins(PinnedReadSuite):
    @pytest.fixture
    def store(self, azure_env: AzureServer) -> AzureStore:
        store = store_for(f"az://{BUCKET}/x")
        assert isinstance(store, AzureStore) and store.supports_pinned_reads
        return store

    @pytest.fixture
    def store_root(self) -> str:
        return f"az://{BUCKET}/{uuid.uuid4().hex}"


def test_a_pin_of_a_replaced_blob_raises_at_each_kind_of_read(azure_env: AzureServer) -> None:
    store = store_for(f"az://{BUCKET}/x")
    uri = f"az://{BUCKET}/{uuid.uuid4().hex}/obj"
    store.write_bytes(uri, b"a" * 1000)
    pinned = store.pin(uri)
    assert pinned is not None
    store.write_bytes(uri, b"b" * 1000)
    with pytest.raises(ObjectReplacedError, match="changed while it was being read"):
        pinned.read_range(0, 10)
    with pytest.raises(ObjectReplacedError):
        pinned.open_read().read()
