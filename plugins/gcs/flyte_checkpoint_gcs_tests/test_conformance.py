"""The core's conformance suites against the emulator."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from flyte_checkpoint_gcs.store import GcsStore

from flyte_checkpoint.storage.blobstore import BlobStore
from flyte_checkpoint.storage.registry import get_registry
from flyte_checkpoint.testing import BlobStoreSuite, CheckpointSuite

from .conftest import BUCKET, CHUNK
from .server import GcsEmulator

#: Crosses 20 upload chunks and 14 read ranges with the small sizes of ``STORE_ENV``.
LARGE = 5 * 1024 * 1024 + 123


class TestGcsConformance(BlobStoreSuite, CheckpointSuite):
    """``gs://`` through the registry (the installed entry point), parallel ranged reads."""

    large_object_size = LARGE

    @pytest.fixture
    def store(self, gcs_emulator: GcsEmulator) -> BlobStore:
        store = get_registry().store_for(f"gs://{BUCKET}/x")
        assert isinstance(store, GcsStore)
        assert store.config.chunk_size == CHUNK
        return store

    @pytest.fixture
    def store_root(self, gcs_emulator: GcsEmulator) -> str:
        return f"gs://{BUCKET}/{uuid.uuid4().hex}"


class TestGcsAliasStreamingConformance(BlobStoreSuite):
    """``gcs://`` on a store built directly, reading each object with one streaming GET."""

    large_object_size = LARGE

    @pytest.fixture
    def store(self, gcs_emulator: GcsEmulator) -> Iterator[BlobStore]:
        store = GcsStore(
            endpoint=gcs_emulator.endpoint,
            anonymous=True,
            chunk_size=CHUNK,
            read_concurrency=1,
            retry_timeout=2,
        )
        yield store
        store.close()

    @pytest.fixture
    def store_root(self, gcs_emulator: GcsEmulator) -> str:
        return f"gcs://{BUCKET}/{uuid.uuid4().hex}"
