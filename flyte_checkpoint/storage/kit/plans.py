"""Part plans of sharded saves: how one rank's segment fits its store's limits (no I/O).

Every rank of a sharded save writes its segment as pieces of one object (S3 parts, Azure
blocks, GCS objects composed later). Before it sends a byte, it plans them from an upper
bound of its segment's size (:func:`flyte_checkpoint.sharded.segment.segment_bound`) and the
store's :class:`PartLimits` (each plugin's ``config.SHARD_LIMITS``):

- the object's part numbers (S3: 10,000; Azure: 50,000 blocks), less those of the tail, are
  dealt out in rank order, the first ``spare % world`` ranks one more than the others; a world
  with more ranks than numbers is refused on every rank alike (:func:`check_world`);
- the rank's parts are all ``part_size`` bytes (the store's setting, larger where the bound
  needs it to fit the rank's numbers, never more than the store's largest part less
  ``hold``), but its last, which takes what remains: with a store's minimum part size
  (``hold``: S3's 5 MiB, which every part but the object's last must reach) the writer holds
  the last ``hold`` bytes of each full part back for the next one, so the rank's last part
  is at least ``hold`` bytes and needs no padding; only a segment shorter than ``hold``
  altogether is padded (and an empty one sends no part);
- a bound over what the rank's numbers, the largest part or the largest object take is
  refused before any byte is sent (:class:`~flyte_checkpoint.errors.ShardedSaveError`,
  naming the limit, the store, the world size and what to do).

GCS composes whole objects, up to ``per_request`` a request, in rounds: :func:`compose_plan`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import ShardedSaveError
from ...uri import redact
from .settings import GiB, KiB, MiB

TiB = 1024 * GiB
#: Bytes of parts one rank's segment keeps in flight at most when its plan's parts are large
#: (at the store's default 8 MiB parts, its ``max_concurrency`` decides alone).
IN_FLIGHT_BUDGET = 1 * GiB


@dataclass(frozen=True)
class PartLimits:
    """One store's rules for the pieces of one object written by many ranks."""

    #: The store as messages name it ("S3").
    store: str
    #: Every part but the object's last at least this many bytes (0: no minimum).
    min_part: int
    #: Bytes of one part at most.
    max_part: int
    #: Parts (part numbers, blocks) one object takes; ``None``: no limit (GCS composes objects).
    max_parts: int | None
    #: Bytes of one object at most.
    max_object: int
    #: Part sizes a multiple of this.
    multiple: int = 1
    #: Part numbers kept for the tail (the index) that the committing rank writes.
    tail_parts: int = 1
    #: What the limits are called in messages ("10,000 parts of at most 5 GiB").
    described: str = ""

    @property
    def rank_numbers(self) -> int | None:
        """Part numbers dealt out to the ranks (None: no limit)."""
        return None if self.max_parts is None else self.max_parts - self.tail_parts


@dataclass(frozen=True)
class ShardPlan:
    """One rank's pieces: numbers ``first .. first + count - 1``, each ``part_size`` bytes but
    the last, which holds from ``hold`` to ``part_size + hold`` bytes (or the whole segment)."""

    store: str
    rank: int
    world: int
    #: The upper bound of the segment's size the plan was made for.
    size: int
    #: The rank's first part number (from 1).
    first: int
    #: Part numbers the rank may use (its share).
    count: int
    #: Bytes of every part but the rank's last.
    part_size: int
    #: Bytes of each full part held back for the next (the store's minimum part size, or 0).
    hold: int
    #: Parts a segment of ``size`` bytes takes at most.
    parts: int

    @property
    def capacity(self) -> int:
        """The most bytes the rank's numbers take with this part size."""
        return self.count * self.part_size + self.hold

    def parts_for(self, n: int) -> int:
        """Parts a segment of ``n`` bytes is sent in (0 for an empty one)."""
        if n <= 0:
            return 0
        return max(1, -(-(n - self.hold) // self.part_size))

    def padding_for(self, n: int) -> int:
        """Bytes of padding a segment of ``n`` bytes gets: only a non-empty one shorter than the
        store's minimum part is padded, to that minimum (its last part is never short else)."""
        return self.hold - n if 0 < n < self.hold else 0

    def part_sizes(self, n: int) -> list[int]:
        """The sizes of the parts a segment of ``n`` bytes is sent in, padding included."""
        count = self.parts_for(n)
        if count == 0:
            return []
        return [self.part_size] * (count - 1) + [n - (count - 1) * self.part_size + self.padding_for(n)]

    def outgrown(self, uri: str) -> ShardedSaveError:
        """The error of a segment that needs more parts than the plan has: its folder grew
        after it was measured."""
        return ShardedSaveError(
            f"rank {self.rank}'s segment of {uri} outgrew its plan: {self.count:,} parts of"
            f" {self.part_size:,} bytes, made for at most {self.size:,} bytes (its folder as it was"
            " measured before the save): its files grew while they were saved. Nothing was committed;"
            " save a folder that nothing writes to meanwhile"
        )

    @property
    def buffer(self) -> int:
        """Bytes one part being filled holds at most (the writer's memory per part)."""
        return self.part_size + self.hold

    def concurrency(self, configured: int) -> int:
        """Parts in flight at once: the store's ``max_concurrency``, fewer where the plan's parts
        are so large that more would hold over :data:`IN_FLIGHT_BUDGET` (at least one: a writer
        holds one part more than it sends)."""
        return max(1, min(configured, IN_FLIGHT_BUDGET // self.buffer))


def _size(n: float) -> str:
    for unit, scale in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{int(n):,} bytes"


def shares(limits: PartLimits, world: int) -> tuple[int, int]:
    """(numbers every rank gets, ranks that get one more): the first ``extra`` ranks get
    ``base + 1``."""
    numbers = limits.rank_numbers
    if numbers is None:
        return 1, 0
    return numbers // world, numbers % world


def check_world(limits: PartLimits, world: int, uri: str = "the object") -> None:
    """Raise :class:`ShardedSaveError` (the same on every rank) if the store's part numbers
    cannot give each of ``world`` ranks one."""
    if world < 1:
        raise ShardedSaveError(f"a sharded save needs at least one rank, not a world of {world}")
    numbers = limits.rank_numbers
    if numbers is not None and world > numbers:
        raise ShardedSaveError(
            f"a sharded save of {world:,} ranks cannot write one {limits.store} object at {uri}:"
            f" {limits.store} takes {limits.described or f'{limits.max_parts:,} parts'} an object, so"
            f" at most {numbers:,} ranks (one part number each, {limits.tail_parts} for the index)."
            f" Nothing was sent. Save at most {numbers:,} ranks to one checkpoint: split the job into"
            f" groups that each call save_sharded on its own URI with its own rank= and world_size="
        )


def plan_shard(
    limits: PartLimits,
    *,
    rank: int,
    world: int,
    size: int,
    part_size: int,
    uri: str = "the object",
) -> ShardPlan:
    """The plan of rank ``rank``'s pieces for a segment of at most ``size`` bytes, with the
    store's ``part_size`` setting (pure: computes, sends nothing).

    Raises:
        ShardedSaveError: the world has more ranks than the store has part numbers, or the
            segment may need more than the rank's numbers of the largest parts, or more than
            the store's largest object (the message names the limit, the store, the world
            size and what to do).
    """
    check_world(limits, world, uri)
    if not 0 <= rank < world:
        raise ShardedSaveError(f"rank {rank} is outside a world of {world}")
    size = max(0, size)
    hold = limits.min_part if limits.min_part > 1 else 0
    largest = _round_down(limits.max_part - hold, limits.multiple)
    if size > limits.max_object:
        raise ShardedSaveError(
            f"rank {rank}'s segment of the sharded save to {uri} may reach {_size(size)} ({size:,}"
            f" bytes: its files' tar stream, as gzip stores data that does not compress), more than"
            f" {limits.store}'s largest object ({_size(limits.max_object)}), before any byte was sent."
            f" Save less on this rank (spread its files over more ranks, or save some of them to"
            f" another checkpoint)"
        )
    base, extra = shares(limits, world)
    if limits.max_parts is None:
        first, count = 1, -1  # no numbers to share: any count of parts
    else:
        first = 1 + rank * base + min(rank, extra)
        count = base + (1 if rank < extra else 0)
    chosen = max(part_size, limits.min_part, 1)
    if count > 0:
        needed = -(-max(0, size - hold) // count)  # the smallest part that fits the rank's numbers
        chosen = max(chosen, needed)
    chosen = min(_round_up(chosen, limits.multiple), max(largest, limits.multiple))
    plan = ShardPlan(limits.store, rank, world, size, first, count, chosen, hold, 0)
    parts = plan.parts_for(size)
    if count > 0 and parts > count:
        most = count * largest + hold
        raise ShardedSaveError(
            f"rank {rank}'s segment of the sharded save to {uri} may reach {_size(size)} ({size:,}"
            f" bytes: its files' tar stream, as gzip stores data that does not compress), but"
            f" {limits.store} takes {limits.described or f'{limits.max_parts:,} parts'} an object:"
            f" in a world of {world:,} ranks this rank gets {count:,} part numbers, at most"
            f" {_size(most)}. Nothing was sent. Save less on this rank (spread its files over the"
            f" ranks more evenly, or save some of them to another checkpoint)"
        )
    return ShardPlan(limits.store, rank, world, size, first, count, chosen, hold, parts)


def compose_plan(pieces: int, per_request: int) -> tuple[int, int]:
    """(rounds, requests) of composing ``pieces`` whole objects, ``per_request`` a request, in
    rounds (each round's results the next round's sources; the last request makes the object)."""
    if pieces < 1:
        return 0, 0
    rounds = requests = 0
    while True:
        groups = -(-pieces // per_request)
        rounds += 1
        requests += groups if pieces > per_request else 1
        if pieces <= per_request:
            return rounds, requests
        # a group of one source is passed on as it is (no request)
        singles = 1 if pieces % per_request == 1 else 0
        requests -= singles
        pieces = groups


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple if multiple > 1 else n


def _round_down(n: int, multiple: int) -> int:
    return n // multiple * multiple if multiple > 1 else n


__all__ = ["PartLimits", "ShardPlan", "check_world", "compose_plan", "plan_shard", "shares"]


class PlannedShards:
    """A store's sharded writes planned from its limits (``limits``, its config's
    ``SHARD_LIMITS``): :meth:`check_world`, :meth:`plan` and :meth:`prepare`, the same for every
    cloud; what differs between the clouds is in their limits alone. The class using it has
    ``store`` (whose ``config.part_size`` is the smallest part) and ``uri``."""

    limits: PartLimits
    store: Any
    uri: str
    _prepared: ShardPlan | None = None

    def check_world(self, world: int) -> None:
        """Raise ShardedSaveError if the store's parts cannot give each of ``world`` ranks one
        (pure: every rank calls it before any request)."""
        check_world(self.limits, world, redact(self.uri))

    def plan(self, rank: int, world: int, size: int) -> ShardPlan:
        """Rank ``rank``'s parts for a segment of at most ``size`` bytes (pure; raises
        ShardedSaveError when they cannot fit the store's limits)."""
        return plan_shard(
            self.limits,
            rank=rank,
            world=world,
            size=size,
            part_size=self.store.config.part_size,
            uri=redact(self.uri),
        )

    def prepare(self, rank: int, world: int, size: int) -> ShardPlan:
        """Plan the parts of the segment ``segment()`` gives next, for at most ``size`` bytes
        (raises ShardedSaveError, before any byte is sent, when they cannot hold it)."""
        self._prepared = self.plan(rank, world, size)
        return self._prepared
