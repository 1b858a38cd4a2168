"""Part plans of sharded saves (issue 36): the kit's pure planning, and the bound of a segment
that a rank plans from, checked against what the packer really writes.

The plans of each cloud's own limits are tested in its plugin's tests (test_plans.py); here
the logic they share, with limits shaped like S3's and Azure's, and the bound."""

from __future__ import annotations

import io
import itertools
import os
from pathlib import Path

import pytest

from flyte_checkpoint.errors import ShardedSaveError
from flyte_checkpoint.storage.kit import PartLimits, compose_plan, plan_shard
from flyte_checkpoint.storage.kit.settings import GiB, MiB

S3_LIKE = PartLimits("S3", 5 * MiB, 5 * GiB, 10_000, 10_000 * 5 * GiB, described="10,000 parts")
AZURE_LIKE = PartLimits("Azure", 0, 4000 * MiB, 50_000, 50_000 * 4000 * MiB, described="50,000 blocks")
GCS_LIKE = PartLimits("GCS", 0, 5 * 1024 * GiB, None, 5 * 1024 * GiB)


def test_numbers_are_dealt_out_in_rank_order_without_overlap_and_all_used():
    for world in (1, 2, 3, 7, 64, 1000, 9999):
        plans = [plan_shard(S3_LIKE, rank=r, world=world, size=0, part_size=8 * MiB) for r in range(world)]
        assert plans[0].first == 1
        for a, b in itertools.pairwise(plans):
            assert b.first == a.first + a.count and b.count <= a.count <= b.count + 1
        assert plans[-1].first + plans[-1].count - 1 == 9_999  # every number but the tail's (10,000)


def test_a_world_larger_than_the_numbers_is_refused_alike_on_every_rank():
    for rank in (0, 1, 9_999):
        with pytest.raises(ShardedSaveError) as caught:
            plan_shard(S3_LIKE, rank=rank, world=10_000, size=0, part_size=8 * MiB)
        message = str(caught.value)
        assert "10,000 ranks" in message and "S3" in message and "at most 9,999 ranks" in message
        assert "Nothing was sent" in message


@pytest.mark.parametrize("limits", [S3_LIKE, AZURE_LIKE, GCS_LIKE], ids=["s3", "azure", "gcs"])
@pytest.mark.parametrize("world", [1, 2, 1000])
@pytest.mark.parametrize("size", [0, 1, 5 * MiB - 1, 5 * MiB, 5 * MiB + 1, 512 * MiB, 40 * GiB])
def test_every_plan_fits_its_limits_and_holds_its_bound(limits, world, size):
    for rank in {0, world - 1}:
        plan = plan_shard(limits, rank=rank, world=world, size=size, part_size=8 * MiB)
        sizes = plan.part_sizes(size)
        assert sum(sizes) == size + plan.padding_for(size)
        assert len(sizes) == plan.parts <= (plan.count if limits.max_parts else len(sizes))
        assert all(s <= limits.max_part for s in sizes)
        assert all(s >= limits.min_part for s in sizes)  # each rank's last part too: others follow it
        assert plan.buffer <= limits.max_part + limits.min_part
        if size >= limits.min_part:
            assert plan.padding_for(size) == 0


def test_padding_is_only_for_segments_shorter_than_the_minimum():
    plan = plan_shard(S3_LIKE, rank=0, world=64, size=64 * MiB, part_size=8 * MiB)
    assert [plan.padding_for(n) for n in (0, 1, 5 * MiB - 1, 5 * MiB, 64 * MiB)] == [0, 5 * MiB - 1, 1, 0, 0]
    # 512 MiB shards: no padding at all (the old plan padded a last part of a few bytes to 5 MiB)
    for world in (1, 2, 64, 256, 1000):
        plan = plan_shard(S3_LIKE, rank=world - 1, world=world, size=512 * MiB, part_size=8 * MiB)
        assert plan.padding_for(512 * MiB) / (512 * MiB) < 0.01
        assert plan.padding_for(512 * MiB) == 0


def test_a_bound_past_the_ranks_numbers_is_refused_naming_the_limit():
    with pytest.raises(ShardedSaveError) as caught:
        plan_shard(S3_LIKE, rank=3, world=1000, size=50 * GiB, part_size=8 * MiB, uri="s3://b/k")
    message = str(caught.value)
    for part in ("rank 3", "s3://b/k", "50.0 GiB", "S3", "10,000 parts", "1,000 ranks", "10 part numbers"):
        assert part in message, (part, message)
    assert "Nothing was sent" in message


def test_parts_grow_only_as_much_as_the_bound_needs():
    small = plan_shard(S3_LIKE, rank=0, world=64, size=64 * MiB, part_size=8 * MiB)
    assert small.part_size == 8 * MiB  # the store's setting where it fits
    big = plan_shard(S3_LIKE, rank=0, world=1000, size=40 * GiB, part_size=8 * MiB)
    assert big.count == 10 and big.part_size == -(-(40 * GiB - 5 * MiB) // 10) and big.parts == 10


def test_gcs_like_limits_share_no_numbers_and_refuse_only_past_the_largest_object():
    plan = plan_shard(GCS_LIKE, rank=9_999, world=10_000, size=50 * GiB, part_size=16 * MiB)
    assert plan.padding_for(50 * GiB) == 0
    with pytest.raises(ShardedSaveError, match="largest object"):
        plan_shard(GCS_LIKE, rank=0, world=2, size=5 * 1024 * GiB + 1, part_size=16 * MiB)


def test_compose_rounds():
    assert compose_plan(1, 32) == (1, 1)
    assert compose_plan(32, 32) == (1, 1)
    assert compose_plan(33, 32) == (2, 2)  # 32 composed, the 33rd passed on as it is
    assert compose_plan(1001, 32) == (2, 33)
    assert compose_plan(10_001, 32) == (3, 324)
    assert compose_plan(12, 3) == (3, 6)  # 12 -> 4 -> 2 -> 1: 4 + 1 + 1 (a single passed on)


# -- the bound a rank plans from -----------------------------------------------------------------


def _packed(folder: Path) -> int:
    from flyte_checkpoint.sharded.segment import pack_segment

    sink = io.BytesIO()
    pack_segment(folder, sink)
    return len(sink.getvalue())


def _tree(root: Path, kind: str) -> Path:
    root.mkdir()
    if kind == "empty":
        return root
    if kind == "random":  # stored: the data does not compress
        (root / "weights.bin").write_bytes(os.urandom(9 * MiB + 17))
        (root / "small").write_bytes(os.urandom(100))
    if kind == "zeros":
        (root / "zeros.bin").write_bytes(bytes(6 * MiB))
    if kind == "many":
        for i in range(300):
            (root / f"f{i}").write_bytes(os.urandom(i))
        (root / "empty").write_bytes(b"")
    if kind == "names":
        deep = root / ("d" * 90) / ("é" * 60)
        deep.mkdir(parents=True)
        (deep / ("n" * 200)).write_bytes(os.urandom(5000))
        os.symlink(deep / ("n" * 200), root / "inside-link")
        os.link(deep / ("n" * 200), root / "hard")
    if kind == "outside":
        outside = root.parent / f"{root.name}-out"
        outside.mkdir()
        (outside / "data").write_bytes(os.urandom(70_000))
        os.symlink(outside, root / "out-folder")
        os.symlink(outside / "data", root / "out-file")
    if kind == "mixed":  # a block that samples as compressible, then does not compress
        (root / "mixed.bin").write_bytes(bytes(64 * 1024) + os.urandom(4 * MiB))
    return root


@pytest.mark.parametrize("kind", ["empty", "random", "zeros", "many", "names", "outside", "mixed"])
def test_the_bound_is_never_below_what_the_packer_writes(tmp_path, kind):
    from flyte_checkpoint.sharded.segment import segment_bound

    folder = _tree(tmp_path / kind, kind)
    bound, written = segment_bound(folder), _packed(folder)
    assert written <= bound, (kind, written, bound)
    if kind == "random":  # tight for data that does not compress: a few KiB over 9 MiB
        assert bound - written < 64 * 1024, (written, bound)


def test_a_compressed_member_is_never_longer_than_stored(monkeypatch):
    """The bound's premise: compress_block falls back to stored when compressing grew the data."""
    from flyte_checkpoint.format import pipeline
    from flyte_checkpoint.format.compression import stored_length

    data = bytes(64 * 1024) + os.urandom(2 * MiB)  # the sample compresses, the rest does not
    pieces = pipeline.compress_block(data, 1)
    assert sum(len(p) for p in pieces) <= stored_length(len(data))


def test_large_parts_are_sent_fewer_at_once():
    """A writer holds one part more than it sends: with parts of GiBs, the store's
    max_concurrency would hold tens of GiB, so the plan keeps about 1 GiB in flight."""
    small = plan_shard(S3_LIKE, rank=0, world=64, size=64 * MiB, part_size=8 * MiB)
    assert small.concurrency(8) == 8
    large = plan_shard(S3_LIKE, rank=0, world=64, size=50 * GiB, part_size=8 * MiB)
    assert large.concurrency(8) == 3 and 3 * large.buffer <= GiB
    huge = plan_shard(S3_LIKE, rank=0, world=1000, size=40 * GiB, part_size=8 * MiB)
    assert huge.concurrency(8) == 1
