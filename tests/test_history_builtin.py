"""The history suite (flyte_checkpoint.testing.history) on the built-in file and memory stores."""

from __future__ import annotations

import os

import pytest

from flyte_checkpoint.testing.history import HistorySuite


class TestFileHistory(HistorySuite):
    @pytest.fixture
    def store_root(self, tmp_path) -> str:
        return str(tmp_path / "store")


class TestMemoryHistory(HistorySuite):
    @pytest.fixture
    def store_root(self) -> str:
        return f"memory://history-{os.urandom(6).hex()}"
