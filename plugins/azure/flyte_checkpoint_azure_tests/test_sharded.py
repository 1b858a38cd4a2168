"""Sharded saves on Azure (issue 19): no native capability yet, so rank 0 gathers the ranks'
segments (temporary blobs) into one upload; 4 rank processes against Azurite."""

from __future__ import annotations

import uuid

import pytest

from .helpers import CONTAINER

try:
    from tests import shardranks as sr
except ImportError:  # pragma: no cover - the repository's tests are needed
    pytest.skip("run from the repository root", allow_module_level=True)


def test_four_ranks_gathered_on_rank_0(azure_env, tmp_path):
    sr.check_gathered(f"az://{CONTAINER}/{uuid.uuid4().hex}/ckpt", tmp_path)
