"""Checkpoint history on GCS (issue 37): the core's HistorySuite against the emulator."""

from __future__ import annotations

import uuid

import pytest

from flyte_checkpoint.testing.history import HistorySuite

from .helpers import BUCKET
from .server import GCSServer

pytestmark = pytest.mark.integration


class TestGCSHistory(HistorySuite):
    @pytest.fixture
    def store_root(self, gcs_server: GCSServer) -> str:
        return f"gs://{BUCKET}/{uuid.uuid4().hex}"
