"""A segment removed before rank 0 commits it (issue 36, "doubtful": another save to the same URI
swept it, as two rank 0s that open sessions at the same moment can): the save fails on every rank
with a ShardedSaveError that says what happened and what to do, not a bare FileNotFoundError, and
nothing is committed."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import ShardedSaveError
from flyte_checkpoint.sharded import coordinate
from flyte_checkpoint.sharded.writes import coordination_prefix
from tests import shardranks as sr


@pytest.mark.timeout(120)
def test_a_segment_removed_before_the_commit_fails_every_rank_naming_the_cause(tmp_path: Path) -> None:
    """Proves: rank 1's piece unlinked as rank 0 begins to commit (what another save's sweep
    does) fails both ranks with "was gone when rank 0 committed ... two jobs", the previous
    checkpoint kept."""
    dest = str(tmp_path / "store" / "ckpt")
    sr.save_previous(dest, tmp_path)
    folders = sr.folders_of(tmp_path, [{f"r{r}": bytes([r]) * 1000} for r in range(2)])

    def sweep_rank_1(rank: int, step: str) -> None:
        if rank == 0 and step == "committing":
            pieces = glob.glob(coordination_prefix(dest) + "*.piece-00001.*")
            assert pieces
            for piece in pieces:
                os.unlink(piece)

    coordinate.observers.append(sweep_rank_1)
    try:
        errors = sr.save_threads(dest, folders, job="swept")
    finally:
        coordinate.observers.remove(sweep_rank_1)
    assert len(errors) == 2 and all(isinstance(e, ShardedSaveError) for e in errors), errors
    for e in errors:
        assert "was gone when rank 0 committed" in str(e) and "two jobs" in str(e), e
        assert "previous checkpoint" in str(e)
    with fc.Checkpoint(str(tmp_path / "next"), dest) as cp:
        path = cp.load_sync()
        assert path is not None and sr.tree(Path(path)) == {"prev": b"the previous checkpoint"}
