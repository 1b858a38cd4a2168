"""How the ranks' segments become one object on a store.

A store that can take one object from many writers declares it with a method
``sharded_writes(uri)`` returning a :class:`ShardedWrites` (the local store: per-rank files
joined with ``copy_file_range`` and renamed; S3: one multipart upload, a range of part
numbers per rank). Any other store gets :class:`GatherWrites`: each rank writes its segment
as a temporary object and the committing rank copies them, in order, into one ordinary
(atomic) write, which costs one more upload of everything (a warning says so).
"""

from __future__ import annotations

import shutil
from typing import Any, Protocol

from ..storage.blobstore import COPY_CHUNK, BlobStore
from ..storage.stores.local import LocalShardedWrites, Session, coordination_prefix
from ..uri import redact
from ..util.logs import logger


class Segment(Protocol):
    """One rank's part of the object: ``write`` its bytes, then ``finish`` (or ``abort``)."""

    def write(self, data: bytes | bytearray | memoryview) -> int: ...

    def padding_needed(self) -> int:
        """Bytes to add (as padding members) so that the segment meets the store's minimum part size."""
        ...

    def finish(self) -> dict[str, Any]:
        """Make the segment durable; returns what :meth:`ShardedWrites.commit` needs of it (JSON)."""
        ...

    def abort(self) -> None: ...


class ShardedWrites(Protocol):
    """A store's way of committing one object written by many ranks (see the module docstring).

    A store whose object takes a limited count of parts also has ``check_world(world)``, called
    on every rank before any request (it raises ShardedSaveError for a world its part numbers
    cannot share); ``plan(rank, world, size)``, the rank's part plan for a segment of at most
    ``size`` bytes (:func:`flyte_checkpoint.storage.kit.plan_shard`; pure); and
    ``prepare(rank, world, size)``, called with the bound of the rank's segment before
    :meth:`segment`: it plans the parts that segment then writes, and raises ShardedSaveError
    (before any byte is sent) when they cannot hold it."""

    def begin(self, token: str) -> Session:
        """On the committing rank, before any segment: server-side state for a save (JSON)."""
        ...

    def segment(self, session: Session, rank: int, world: int, joiner: str) -> Segment:
        """Where rank ``rank`` writes its segment. ``joiner`` (a nonce of the rank's call) keeps
        two processes that report as one rank from writing over each other's segment."""
        ...

    def commit(self, session: Session, pieces: list[dict[str, Any]], tail: bytes) -> None:
        """Make the object appear whole: the segments in rank order, then ``tail``."""
        ...

    def abort(self, session: Session) -> None:
        """Discard what the save wrote (idempotent, best effort)."""
        ...

    def sweep(self, session: Session) -> None:
        """Remove what earlier saves to this object left (pieces of ranks that were killed)."""
        ...


def writes_for(store: BlobStore, uri: str) -> ShardedWrites:
    """The store's own :class:`ShardedWrites`, else the gathering fallback (with a warning)."""
    native = getattr(store, "sharded_writes", None)
    if native is not None:
        return native(uri)
    logger().warning(
        "%s cannot take one object from many writers: the ranks' segments are gathered and"
        " written again by rank 0 (one more upload of the whole checkpoint)",
        redact(uri),
    )
    return GatherWrites(store, uri)


class _ObjectSegment:
    def __init__(self, store: BlobStore, uri: str) -> None:
        self._writer = store.open_write(uri)
        self._uri = uri

    def write(self, data: bytes | bytearray | memoryview) -> int:
        return self._writer.write(data)

    def padding_needed(self) -> int:
        return 0

    def finish(self) -> dict[str, Any]:
        self._writer.close()
        return {"uri": self._uri}

    def abort(self) -> None:
        self._writer.abort()


class GatherWrites:
    """Segments as temporary objects under the coordination prefix, copied by the committing
    rank into one ordinary write of the object."""

    def __init__(self, store: BlobStore, uri: str) -> None:
        self.store = store
        self.uri = uri
        self.prefix = coordination_prefix(uri)

    def begin(self, token: str) -> Session:
        return {}

    def _piece(self, token: str, rank: int, joiner: str) -> str:
        return f"{self.prefix}{token}.piece-{rank:05d}.{joiner}"

    def segment(self, session: Session, rank: int, world: int, joiner: str) -> Segment:
        return _ObjectSegment(self.store, self._piece(session["token"], rank, joiner))

    def commit(self, session: Session, pieces: list[dict[str, Any]], tail: bytes) -> None:
        with self.store.open_write(self.uri) as out:
            for piece in pieces:
                with self.store.open_read(piece["uri"]) as src:
                    shutil.copyfileobj(src, out, COPY_CHUNK)
            out.write(tail)
        self.abort(session)

    def abort(self, session: Session) -> None:
        self.store.delete_many(list(self.store.list(f"{self.prefix}{session['token']}.piece-")))

    def sweep(self, session: Session) -> None:
        mine = f"{self.prefix}{session['token']}."
        self.store.delete_many(
            [uri for uri in self.store.list(self.prefix) if ".piece-" in uri and not uri.startswith(mine)]
        )


__all__ = [
    "GatherWrites",
    "LocalShardedWrites",
    "Segment",
    "Session",
    "ShardedWrites",
    "coordination_prefix",
    "writes_for",
]
