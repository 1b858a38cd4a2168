"""Sharded saves on Azure (issue 19): 4 rank processes stage blocks of one blob and rank 0
commits one block list (``flyte_checkpoint_azure.shards``), against Azurite."""

from __future__ import annotations

import base64
import os
import uuid
from typing import Any

import pytest
from flyte_checkpoint_azure.uris import parse

from .helpers import BUCKET

try:
    from tests import shardranks as sr
except ImportError:  # pragma: no cover - the repository's tests are needed
    pytest.skip("run from the repository root", allow_module_level=True)

pytestmark = pytest.mark.integration

WORLD = 4


@pytest.fixture
def dest(azure_env: Any) -> str:
    return f"az://{BUCKET}/{uuid.uuid4().hex}/ckpt"


def blob(blob_service: Any, uri: str) -> Any:
    return blob_service.get_blob_client(BUCKET, parse(uri).key)


def untar(blob_service: Any, uri: str) -> dict[str, bytes]:
    return sr.tar_files(blob(blob_service, uri).download_blob().readall())


def leftovers(blob_service: Any, uri: str) -> list[str]:
    """Uncommitted blocks of the blob, and coordination objects but the session marker and the
    last result (no temporary piece: the ranks' segments are blocks, not objects)."""
    container = blob_service.get_container_client(BUCKET)
    names = [b.name.rsplit("/", 1)[1] for b in container.list_blobs(parse(uri).key + ".fcp-shard/")]
    staged = blob(blob_service, uri).get_block_list("uncommitted")[1]
    return [n for n in names if n != "open" and not n.endswith(".result")] + [b.id for b in staged]


def tags(blob_service: Any, uri: str) -> list[str]:
    """The committed blocks' tags (their ids without the block number), in order."""
    committed = blob(blob_service, uri).get_block_list("committed")[0]
    return [base64.b64decode(b.id).decode()[:16] for b in committed]


def test_four_ranks_stage_blocks_of_one_blob(tmp_path, blob_service, dest):
    folders = sr.make_folders(tmp_path, WORLD, size=300_000)
    assert sr.run(dest, folders) == ["OK"] * WORLD
    expected = sr.union(folders)
    assert untar(blob_service, dest) == expected
    assert sr.restore(dest, tmp_path) == expected
    found = tags(blob_service, dest)
    # Each rank's blocks, in rank order, then rank 0's tail: one block list, no gathering.
    ranks = [t[-6:] for t in dict.fromkeys(found)]
    assert ranks == [f"{r:0>6}" for r in range(WORLD)] + ["00tail"], found
    assert len(set(found)) == WORLD + 1  # one tag per rank (its save and joiner), one for the tail
    assert leftovers(blob_service, dest) == []
    for rank, folder in enumerate(folders):
        import flyte_checkpoint as fc
        from flyte_checkpoint.sharded import load_sharded

        with fc.Checkpoint(str(tmp_path / f"own-{rank}"), dest) as cp:
            assert sr.tree(load_sharded(cp, own=True, rank=rank)) == sr.tree(folder)


def test_a_failed_rank_commits_nothing_and_the_next_save_drops_its_blocks(tmp_path, blob_service, dest):
    first = sr.make_folders(tmp_path, WORLD, tag="first")
    assert sr.run(dest, first) == ["OK"] * WORLD
    results = sr.run(dest, sr.make_folders(tmp_path, WORLD, tag="second"), fail={1: True})
    assert all("rank 1: OSError: this rank's disk is on fire" in r for r in results), results
    assert untar(blob_service, dest) == sr.union(first)
    assert sr.run(dest, first) == ["OK"] * WORLD
    assert untar(blob_service, dest) == sr.union(first)
    assert leftovers(blob_service, dest) == []


@pytest.mark.parametrize("seed", range(int(os.environ.get("FCP_SHARD_KILLS", "3"))))
def test_sigkill_of_a_random_rank_never_leaves_a_mix(tmp_path, blob_service, dest, seed):
    sr.check_random_kill(
        dest, tmp_path, 200 + seed, lambda: untar(blob_service, dest), lambda: leftovers(blob_service, dest)
    )


def test_torchrun_ranks_stage_one_block_list_and_a_failure_commits_nothing(tmp_path, blob_service, dest):
    sr.torchrun_case(dest, tmp_path, lambda: untar(blob_service, dest))


def test_a_parallel_inflate_restores_an_object_of_staged_blocks(tmp_path, dest, monkeypatch):
    """The ranks' segments end at block boundaries, not at the loader's ranges: the parallel
    load (forced on this machine's cores) restores the union and verifies every file."""
    folders = sr.make_folders(tmp_path, WORLD)
    for rank, folder in enumerate(folders):  # 36 MB that does not compress: over the parallel threshold
        (folder / f"weights{rank}.bin").write_bytes(os.urandom(9_000_000))
    assert sr.run(dest, folders) == ["OK"] * WORLD
    assert sr.parallel_restore(dest, tmp_path, monkeypatch) == sr.union(folders)


def test_an_empty_rank_stages_no_block(tmp_path, blob_service, dest):
    """Part plans (issue 36): an empty folder writes no gzip member, so its rank stages nothing."""
    import shutil

    folders = sr.make_folders(tmp_path, 3, size=1000)
    shutil.rmtree(folders[1])
    folders[1].mkdir()
    assert sr.save_threads(dest, folders) == []
    assert untar(blob_service, dest) == sr.union(folders)
    assert sr.restore(dest, tmp_path) == sr.union(folders)
