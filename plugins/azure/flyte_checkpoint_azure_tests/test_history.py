"""Checkpoint history on Azure (issue 37): the core's HistorySuite against Azurite."""

from __future__ import annotations

import uuid

import pytest

from flyte_checkpoint.testing.history import HistorySuite

from .helpers import BUCKET
from .server import AzureServer

pytestmark = pytest.mark.integration


class TestAzureHistory(HistorySuite):
    @pytest.fixture
    def store_root(self, azure_env: AzureServer) -> str:
        return f"az://{BUCKET}/{uuid.uuid4().hex}"
