"""Part plans of sharded saves on S3 (issue 36), computed from S3's own limits
(``config.SHARD_LIMITS``) and its default ``part_size``, without a server or an upload: at 1, 2,
1,000 and 10,000 ranks, for shards of 0, 1 byte, 5 MiB +-1, 512 MiB and 50 GiB."""

from __future__ import annotations

import pytest
from flyte_checkpoint_s3.config import SHARD_LIMITS, S3Config

from flyte_checkpoint.storage.kit.settings import GiB
from flyte_checkpoint.testing.plans import SIZES, WORLDS, check_padding_under_one_percent, check_plans

PART_SIZE = S3Config.resolve(env={}).part_size

#: S3's 9,999 part numbers of at most 5 GiB: 10,000 ranks get none; at 1,000 ranks a rank gets 10
#: (the last 9), at most 49.95 GiB, so 50 GiB shards do not fit (nor would 1,000 of them fit
#: S3's largest object, 48.8 TiB).
REFUSED = {(10_000, size) for size in SIZES} | {(1000, 50 * GiB)}


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("size", SIZES)
def test_plans_at_the_limits(world, size):
    check_plans(SHARD_LIMITS, PART_SIZE, world, size, refused=(world, size) in REFUSED)


@pytest.mark.parametrize("world", [1, 2, 64, 256, 1000])
def test_padding_of_512_mib_shards_is_under_one_percent(world):
    check_padding_under_one_percent(SHARD_LIMITS, PART_SIZE, world)
