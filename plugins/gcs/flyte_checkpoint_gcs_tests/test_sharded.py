"""Sharded saves on GCS (issue 19): no native capability yet, so rank 0 gathers the ranks'
segments (temporary objects) into one upload; 4 rank processes against the emulator."""

from __future__ import annotations

import uuid

import pytest

from .helpers import BUCKET

try:
    from tests import shardranks as sr
except ImportError:  # pragma: no cover - the repository's tests are needed
    pytest.skip("run from the repository root", allow_module_level=True)


def test_four_ranks_gathered_on_rank_0(gcs_emulator, tmp_path):
    sr.check_gathered(f"gs://{BUCKET}/{uuid.uuid4().hex}/ckpt", tmp_path)
