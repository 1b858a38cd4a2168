"""The core's conformance suites against the emulator."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from flyte_checkpoint_gcs.store import GCSStore

from flyte_checkpoint.storage.blobstore import BlobStore
from flyte_checkpoint.storage.registry import get_registry
from flyte_checkpoint.testing import BlobStoreSuite, CheckpointSuite

from .helpers import BUCKET, CHUNK, make_store
from .server import GcsEmulator

#: Crosses 20 upload chunks and 14 read ranges with the small sizes of ``STORE_ENV``.
LARGE = 5 * 1024 * 1024 + 123


class TestGcsConformance(BlobStoreSuite, CheckpointSuite):
    """``gs://`` through the registry (the installed entry point), parallel ranged reads."""

    large_object_size = LARGE

    @pytest.fixture
    def store(self, gcs_emulator: GcsEmulator) -> BlobStore:
        store = get_registry().store_for(f"gs://{BUCKET}/x")
        assert isinstance(store, GCSStore)
        assert store.config.part_size == CHUNK
        return store

    @pytest.fixture
    def store_root(self, gcs_emulator: GcsEmulator) -> str:
        return f"gs://{BUCKET}/{uuid.uuid4().hex}"


class TestGcsAliasSerialConformance(BlobStoreSuite):
    """``gcs://`` on a store built directly, reading one range at a time, SDK retries on."""

    large_object_size = LARGE

    @pytest.fixture
    def store(self, gcs_emulator: GcsEmulator) -> Iterator[BlobStore]:
        store = make_store(gcs_emulator.endpoint, read_concurrency=1, request_attempts=3)
        yield store
        store.close()

    @pytest.fixture
    def store_root(self, gcs_emulator: GcsEmulator) -> str:
        return f"gcs://{BUCKET}/{uuid.uuid4().hex}"
