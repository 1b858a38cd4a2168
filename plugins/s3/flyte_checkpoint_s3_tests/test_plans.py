"""Part plans of sharded saves on S3 (issue 36), computed from S3's own limits
(``config.SHARD_LIMITS``) and its default ``part_size``, without a server or an upload: at 1, 2,
1,000 and 10,000 ranks, for shards of 0, 1 byte, 5 MiB +-1, 512 MiB and 50 GiB."""

from __future__ import annotations

import pytest
from flyte_checkpoint_s3.config import SHARD_LIMITS, S3Config

from flyte_checkpoint.errors import ShardedSaveError
from flyte_checkpoint.storage.kit import plan_shard
from flyte_checkpoint.storage.kit.settings import GiB, MiB

WORLDS = [1, 2, 1000, 10_000]
SIZES = [0, 1, 5 * MiB - 1, 5 * MiB, 5 * MiB + 1, 512 * MiB, 50 * GiB]
PART_SIZE = S3Config.resolve(env={}).part_size

#: S3's 9,999 part numbers of at most 5 GiB: 10,000 ranks get none; at 1,000 ranks a rank gets 10
#: (the last 9), at most 49.95 GiB, so 50 GiB shards do not fit (nor would 1,000 of them fit
#: S3's largest object, 48.8 TiB).
REFUSED = {(10_000, size) for size in SIZES} | {(1000, 50 * GiB)}


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("size", SIZES)
def test_plans_at_the_limits(world, size):
    for rank in sorted({0, world // 2, world - 1}):
        if (world, size) in REFUSED:
            with pytest.raises(ShardedSaveError) as caught:
                plan_shard(SHARD_LIMITS, rank=rank, world=world, size=size, part_size=PART_SIZE, uri="u")
            message = str(caught.value)
            assert SHARD_LIMITS.store in message and f"{world:,} ranks" in message, message
            assert SHARD_LIMITS.described in message and "Nothing was sent" in message, message
            continue
        plan = plan_shard(SHARD_LIMITS, rank=rank, world=world, size=size, part_size=PART_SIZE)
        sizes = plan.part_sizes(size)
        assert sum(sizes) == size + plan.padding_for(size)
        if SHARD_LIMITS.max_parts is not None:
            assert len(sizes) <= plan.count
            assert plan.first + plan.count - 1 <= SHARD_LIMITS.max_parts - 1  # the last is the tail's
        assert all(SHARD_LIMITS.min_part <= s <= SHARD_LIMITS.max_part for s in sizes)
        assert plan.part_size >= PART_SIZE  # never smaller than the setting
        if size >= 5 * MiB:
            assert plan.padding_for(size) == 0


@pytest.mark.parametrize("world", [1, 2, 64, 256, 1000])
def test_padding_of_512_mib_shards_is_under_one_percent(world):
    plan = plan_shard(SHARD_LIMITS, rank=world - 1, world=world, size=512 * MiB, part_size=PART_SIZE)
    assert plan.padding_for(512 * MiB) / (512 * MiB) < 0.01
    assert plan.padding_for(512 * MiB) == 0
