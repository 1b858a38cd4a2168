"""Checks of a store's part plans for sharded saves (issue 36), from its limits alone: no
server, no upload. A plugin's tests call :func:`check_plans` for each (world, size) of
:data:`WORLDS` x :data:`SIZES` with the pairs its limits refuse, and
:func:`check_padding_under_one_percent` for large shards."""

from __future__ import annotations

import pytest

from ..errors import ShardedSaveError
from ..storage.kit import PartLimits, plan_shard
from ..storage.kit.settings import GiB, MiB

#: Worlds at the limits: one rank, two, a thousand and ten thousand.
WORLDS = (1, 2, 1000, 10_000)
#: Shard sizes at the limits: none, one byte, S3's minimum part and one byte either side, a
#: large shard and a very large one.
SIZES = (0, 1, 5 * MiB - 1, 5 * MiB, 5 * MiB + 1, 512 * MiB, 50 * GiB)


def check_plans(limits: PartLimits, part_size: int, world: int, size: int, refused: bool) -> None:
    """Plan the first, a middle and the last rank of ``world`` for a shard of ``size`` bytes:
    refused (ShardedSaveError naming the store, the world and the limit, saying nothing was
    sent) when ``refused``, else parts that hold the shard within the store's limits and its
    share of part numbers, never smaller than ``part_size``, unpadded from 5 MiB up."""
    for rank in sorted({0, world // 2, world - 1}):
        if refused:
            with pytest.raises(ShardedSaveError) as caught:
                plan_shard(limits, rank=rank, world=world, size=size, part_size=part_size, uri="u")
            message = str(caught.value)
            assert limits.store in message and f"{world:,} ranks" in message, message
            assert limits.described in message and "Nothing was sent" in message, message
            continue
        plan = plan_shard(limits, rank=rank, world=world, size=size, part_size=part_size)
        sizes = plan.part_sizes(size)
        assert sum(sizes) == size + plan.padding_for(size)
        if limits.max_parts is not None:
            assert len(sizes) <= plan.count
            assert plan.first + plan.count - 1 <= limits.max_parts - 1  # the last is the tail's
        assert all(limits.min_part <= s <= limits.max_part for s in sizes)
        assert plan.part_size >= part_size  # never smaller than the setting
        if size >= 5 * MiB:
            assert plan.padding_for(size) == 0


def check_padding_under_one_percent(limits: PartLimits, part_size: int, world: int) -> None:
    """The last rank of ``world`` with a 512 MiB shard: no padding (under 1% is the goal)."""
    plan = plan_shard(limits, rank=world - 1, world=world, size=512 * MiB, part_size=part_size)
    assert plan.padding_for(512 * MiB) / (512 * MiB) < 0.01
    assert plan.padding_for(512 * MiB) == 0
