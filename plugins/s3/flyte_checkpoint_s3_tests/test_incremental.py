"""Incremental folder saves on S3 (issue 18): unchanged files become ``UploadPartCopy`` parts;
the bytes that go up are counted at a proxy in front of moto's server (the core's
``IncrementalSuite``)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from flyte_checkpoint.testing import IncrementalSuite, StoreRecipe

from .helpers import BUCKET, fault_store, key_of

pytestmark = pytest.mark.integration

MiB = 1024 * 1024


class TestS3Incremental(IncrementalSuite):
    """Parts of 8 MiB, files of 6 MiB (above S3's 5 MiB minimum part: one copy each at least).
    moto ignores ``CopySourceIfMatch``: a replaced source is caught by the writer's check of
    every source's ETag before ``CompleteMultipartUpload`` (so no server detail in the error)."""

    file_size = 6 * MiB
    part_size = "8MiB"

    @pytest.fixture
    def store_recipe(self, s3_endpoint: str, raw_s3: Any) -> StoreRecipe:
        return StoreRecipe(s3_endpoint, fault_store)

    @pytest.fixture
    def store_root(self, s3_env: dict[str, str], raw_s3: Any) -> str:
        return f"s3://{BUCKET}/{uuid.uuid4().hex}"

    def pieces_left(self, server: Any, uri: str) -> list[Any]:
        return server.client.list_multipart_uploads(Bucket=BUCKET, Prefix=key_of(uri)).get("Uploads", [])
