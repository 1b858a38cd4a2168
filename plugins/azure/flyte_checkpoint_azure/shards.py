"""Sharded saves on Azure: blocks staged by every rank, one block list (``flyte_checkpoint.sharded``).

Each rank stages its segment as blocks of the destination blob (Put Block), with ids tagged by
a digest of the save's token and its call's joiner nonce, then the rank, so ranks (and two
processes reporting as one rank) never collide and every id has the length of an ordinary writer's
(Azure wants one length for a blob's blocks). Rank 0 stages the tail and commits the ranks'
block ids in rank order, then the tail's, in one Put Block List: the blob
appears whole, or stays as it was. Azure has no minimum block size, so segments need no
padding. Staged blocks cannot be deleted on their own: those of a failed or killed save stay
uncommitted (invisible) until the blob's next commit discards them, or a week passes, so
``abort`` and ``sweep`` have nothing to remove. The object is committed without an MD5 (it
cannot be combined from the ranks' blocks; every block carries its own Content-MD5).
"""

from __future__ import annotations

import hashlib
import threading
from typing import TYPE_CHECKING, Any

from flyte_checkpoint.storage.kit import PlannedShards, ShardPlan
from flyte_checkpoint.uri import redact

from .config import SHARD_LIMITS
from .uris import parse
from .writer import AzureWriter

if TYPE_CHECKING:
    from collections.abc import Callable

    from .store import AzureStore

#: Characters of a block id's tag that tell the save and the joiner apart (the rest of the 16
#: is the rank, or ``tail``).
_SAVE_CHARS = 10


def _tag(token: str, who: str, joiner: str = "") -> str:
    """A 16-character block-id tag: a digest of the save's token and the joiner, then the rank
    (or ``tail``)."""
    save = hashlib.sha256(f"{token}/{joiner}".encode()).hexdigest()[:_SAVE_CHARS]
    return f"{save}{who:0>{16 - _SAVE_CHARS}}"


class AzureSegment(AzureWriter):
    """One rank's blocks of the blob: its share of the 49,999 (:func:`plan_shard`), each of
    the plan's size (the store's ``part_size``, larger where the rank's bound needs it), staged
    but never committed here."""

    def __init__(self, store: AzureStore, uri: str, token: str, joiner: str, plan: ShardPlan) -> None:
        super().__init__(store, store.client.blob(parse(uri)), uri)
        self._tag = _tag(token, str(plan.rank), joiner)
        self._md5 = None  # the object's MD5 is not this segment's to give
        self.plan = plan
        self.part_size = plan.part_size
        self.max_parts = plan.count
        self.max_concurrency = plan.concurrency(self.max_concurrency)  # large parts: fewer at once
        self._places = threading.Semaphore(self.max_concurrency)
        self.double_every = plan.count + 1  # every block the plan's size: none doubles
        self._blocks: list[str] = []

    def _submit(self, job: Callable[[int], Any]) -> None:
        if self._next_part > self.max_parts:
            raise self.plan.outgrown(redact(self.uri))
        super()._submit(job)

    def _put_whole(self, data: bytes | bytearray) -> None:
        self._blocks = [self._send_part(1, data)] if data else []

    def _complete(self, results: list[Any], tail: memoryview | None) -> None:
        self._blocks = list(results)

    def padding_needed(self) -> int:
        return 0  # no minimum block size

    def finish(self) -> dict[str, Any]:
        self.close()
        return {"blocks": self._blocks}


class AzureShardedWrites(PlannedShards):
    """:class:`flyte_checkpoint.sharded.writes.ShardedWrites` for one Azure blob: every rank's
    blocks staged on the blob, committed in one block list (see the module docstring)."""

    limits = SHARD_LIMITS

    store: AzureStore
    uri: str

    def __init__(self, store: AzureStore, uri: str) -> None:
        self.store = store
        self.uri = uri

    def begin(self, token: str) -> dict[str, Any]:
        return {}  # a block blob's upload begins with its first block

    def segment(self, session: dict[str, Any], rank: int, world: int, joiner: str) -> AzureSegment:
        plan = self._prepared
        if plan is None or (plan.rank, plan.world) != (rank, world):
            plan = self.plan(rank, world, 0)  # not prepared: the store's part_size, the rank's share
        return AzureSegment(self.store, self.uri, session["token"], joiner, plan)

    def commit(self, session: dict[str, Any], pieces: list[dict[str, Any]], tail: bytes) -> None:
        writer = AzureWriter(self.store, self.store.client.blob(parse(self.uri)), self.uri)
        writer._tag = _tag(session["token"], "tail")
        writer._md5 = None
        blocks = [block for piece in pieces for block in piece["blocks"]]
        if tail:
            blocks.append(writer._send_part(1, tail))
        writer._complete(blocks, None)

    def abort(self, session: dict[str, Any]) -> None:
        pass  # staged blocks cannot be deleted alone; the blob's next commit discards them

    def sweep(self, session: dict[str, Any]) -> None:
        pass  # the commit just made discarded every block it did not name


__all__ = ["AzureSegment", "AzureShardedWrites"]
