"""The core's conformance suites, run on the S3 store against moto's S3 server."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from flyte_checkpoint_s3.store import S3Store

from flyte_checkpoint.storage.registry import store_for
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
from .server import S3Server

pytestmark = pytest.mark.integration


class TestS3Conformance(BlobStoreSuite, CheckpointSuite, CopySuite, CopyCheckSuite):
    """Through the registry (the entry point), configured by the environment with small parts."""

    large_object_size = 4 * 1024 * 1024 + 123  # 17 parts and ranges of 256 KiB

    @pytest.fixture
    def store(self, s3_env: dict[str, str], raw_s3: Any) -> S3Store:
        store = store_for(f"s3://{BUCKET}/x")
        assert isinstance(store, S3Store)
        assert store.config.part_size == 256 * 1024
        return store

    @pytest.fixture
    def store_root(self) -> str:
        return f"s3://{BUCKET}/{uuid.uuid4().hex}"


class TestS3ConformanceDirect(BlobStoreSuite):
    """Built directly: one part in flight, ranges larger than the objects (single-GET reads)."""

    large_object_size = 2 * 1024 * 1024 + 7

    @pytest.fixture
    def store(self, make_s3_store: Any, raw_s3: Any) -> S3Store:
        return make_s3_store(max_concurrency=1, read_range_size=64 * 1024 * 1024, read_concurrency=1)

    @pytest.fixture
    def store_root(self) -> str:
        return f"s3://{BUCKET}/{uuid.uuid4().hex}"


class TestS3aConformance(BlobStoreSuite):
    """The ``s3a://`` alias, through the registry."""

    large_object_size = 1024 * 1024 + 1

    @pytest.fixture
    def store(self, s3_env: dict[str, str], raw_s3: Any) -> S3Store:
        store = store_for(f"s3a://{BUCKET}/x")
        assert store is store_for(f"s3://{BUCKET}/x")
        return store

    @pytest.fixture
    def store_root(self) -> str:
        return f"s3a://{BUCKET}/{uuid.uuid4().hex}"


class TestS3Faults(FaultSuite, CrashSuite):
    """Through the fault proxy in front of moto, and a child process killed mid-upload."""

    @pytest.fixture
    def store_recipe(self, s3_server: S3Server, raw_s3: Any) -> StoreRecipe:
        return StoreRecipe(s3_server.endpoint, fault_store, missing_container=f"s3://{MISSING_BUCKET}/ckpt")

    @pytest.fixture
    def store_root(self) -> str:
        return f"s3://{BUCKET}/{uuid.uuid4().hex}"
