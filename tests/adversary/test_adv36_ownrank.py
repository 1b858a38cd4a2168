"""adv36: load_sharded(own=True, rank=-1) restores the last rank's files.

save_sharded refuses rank=-1 (ConfigurationError: "rank -1 is outside a world of 2"), and so
does load_sharded when the rank comes from RANK=-1; given as ``rank=-1`` it is taken as a
Python index into the object's shards and returns the files the last rank saved: files no
rank -1 ever wrote, restored as "this rank's".
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import ConfigurationError
from flyte_checkpoint.sharded import load_sharded, save_sharded


@pytest.mark.timeout(120)
@pytest.mark.parametrize("rank", [-1, -2])
def test_negative_rank_is_refused_not_a_python_index(tmp_path: Path, rank: int) -> None:
    uri = str(tmp_path / "store" / "ckpt")
    folders = []
    for r in range(2):
        d = tmp_path / f"r{r}"
        d.mkdir()
        (d / f"only-rank-{r}.bin").write_bytes(bytes([r]) * 100)
        folders.append(d)
    errors: list[BaseException] = []

    def go(r: int) -> None:
        try:
            save_sharded(uri, folders[r], rank=r, world_size=2, job="j", timeout=30)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=go, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with fc.Checkpoint(str(tmp_path / "next"), uri) as cp:
        try:
            path = load_sharded(cp, own=True, rank=rank)
        except ConfigurationError:
            return  # as save_sharded(rank=-1) and RANK=-1 are refused
        restored = sorted(str(p.relative_to(path)) for p in Path(path).rglob("*")) if path else None
        pytest.fail(f"load_sharded(own=True, rank={rank}) restored {restored}: files rank {rank} never saved")
