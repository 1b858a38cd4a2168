"""Part plans of sharded saves on GCS (issue 36), computed from GCS's own limits
(``config.SHARD_LIMITS``) and its default ``part_size``, without a server or an upload: at 1, 2,
1,000 and 10,000 ranks, for shards of 0, 1 byte, 5 MiB +-1, 512 MiB and 50 GiB."""

from __future__ import annotations

import pytest
from flyte_checkpoint_gcs.config import SHARD_LIMITS, GCSConfig

from flyte_checkpoint.errors import ShardedSaveError
from flyte_checkpoint.storage.kit import plan_shard
from flyte_checkpoint.storage.kit.settings import GiB
from flyte_checkpoint.testing.plans import SIZES, WORLDS, check_padding_under_one_percent, check_plans

PART_SIZE = GCSConfig.resolve(env={}).part_size

#: GCS composes whole objects: no numbers to share, every world fits; only a piece (or the
#: composite) past 5 TiB is refused.
REFUSED: set[tuple[int, int]] = set()


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("size", SIZES)
def test_plans_at_the_limits(world, size):
    check_plans(SHARD_LIMITS, PART_SIZE, world, size, refused=(world, size) in REFUSED)


@pytest.mark.parametrize("world", [1, 2, 64, 256, 1000])
def test_padding_of_512_mib_shards_is_under_one_percent(world):
    check_padding_under_one_percent(SHARD_LIMITS, PART_SIZE, world)


def test_a_piece_past_five_tib_is_refused_and_compose_rounds_are_counted():
    from flyte_checkpoint_gcs.shards import GCSShardedWrites

    with pytest.raises(ShardedSaveError, match="largest object"):
        plan_shard(SHARD_LIMITS, rank=0, world=1, size=5 * 1024 * GiB + 1, part_size=PART_SIZE)
    assert GCSShardedWrites.compose_requests(1000) == (2, 33)
    assert GCSShardedWrites.compose_requests(10_000) == (3, 324)
