"""Part plans of sharded saves on Azure (issue 36), computed from Azure's own limits
(``config.SHARD_LIMITS``) and its default ``part_size``, without a server or an upload: at 1, 2,
1,000 and 10,000 ranks, for shards of 0, 1 byte, 5 MiB +-1, 512 MiB and 50 GiB."""

from __future__ import annotations

import pytest
from flyte_checkpoint_azure.config import SHARD_LIMITS, AzureConfig

from flyte_checkpoint.errors import ShardedSaveError
from flyte_checkpoint.storage.kit import plan_shard
from flyte_checkpoint.storage.kit.settings import GiB, MiB
from flyte_checkpoint.testing.plans import SIZES, WORLDS, check_padding_under_one_percent, check_plans

PART_SIZE = AzureConfig.resolve(env={}).part_size

#: Azure's 49,999 blocks of at most 4,000 MiB: at 1,000 ranks a rank gets 50 (the last 49), so
#: 50 GiB shards fit in blocks of 1 GiB; at 10,000 ranks it gets 5 (the last 4), at most 15.6 GiB.
REFUSED = {(10_000, 50 * GiB)}


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("size", SIZES)
def test_plans_at_the_limits(world, size):
    check_plans(SHARD_LIMITS, PART_SIZE, world, size, refused=(world, size) in REFUSED)


@pytest.mark.parametrize("world", [1, 2, 64, 256, 1000])
def test_padding_of_512_mib_shards_is_under_one_percent(world):
    check_padding_under_one_percent(SHARD_LIMITS, PART_SIZE, world)


def test_a_world_past_the_blocks_is_refused_on_every_rank():
    for rank in (0, 49_999):
        with pytest.raises(ShardedSaveError, match="at most 49,999 ranks"):
            plan_shard(SHARD_LIMITS, rank=rank, world=50_000, size=0, part_size=PART_SIZE)
    plan_shard(SHARD_LIMITS, rank=49_998, world=49_999, size=512 * MiB, part_size=PART_SIZE)
