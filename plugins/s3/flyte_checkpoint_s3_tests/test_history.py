"""Checkpoint history on S3 (issue 37): the core's HistorySuite against moto's server."""

from __future__ import annotations

import uuid

import pytest

from flyte_checkpoint.testing.history import HistorySuite

from .helpers import BUCKET

pytestmark = pytest.mark.integration


class TestS3History(HistorySuite):
    @pytest.fixture
    def store_root(self, s3_env: dict[str, str]) -> str:
        return f"s3://{BUCKET}/{uuid.uuid4().hex}"
