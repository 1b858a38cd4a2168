"""Sharded saves on GCS: each rank's segment a temporary object, composed by the committing rank
(``flyte_checkpoint.sharded``).

Each rank writes its segment as an ordinary object (a resumable upload, as any write) beside the
target, ``<object>.fcp-shard/<token>.piece-<rank>.<joiner>``, and reports its generation; the committing
rank writes the tail the same way (``.piece-tail``) and makes the object with ``objects.compose``,
whose sources are whole objects, at most 32 a request, each pinned by ``ifGenerationMatch`` to
the generation its writer reported (a piece replaced meanwhile fails the commit with 412 instead
of entering the object). More pieces than one request takes are composed in rounds into
temporary objects (``.piece-join-<round>-<n>``) and those into the object: only the last request
writes the object, so it appears whole or not at all. The pieces (tail and joins included) are
deleted after the commit or abort, and those of killed saves by the next save (``sweep``): their
names are the gathering fallback's, whose ``abort`` and ``sweep`` are reused. GCS computes the
composite's CRC32C itself (composites have no MD5); reads verify it.

This differs from S3's one multipart upload (``flyte_checkpoint_s3.shards``) because GCS's
resumable session takes its chunks in order from one writer, while compose joins whole objects
with no minimum size: no padding is needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flyte_checkpoint.errors import ShardedSaveError
from flyte_checkpoint.sharded.writes import GatherWrites, Session
from flyte_checkpoint.storage.kit import PlannedShards, compose_plan
from flyte_checkpoint.uri import redact

from . import errors
from .config import MAX_OBJECT_SIZE, MAX_SOURCES, SHARD_LIMITS
from .uris import parse
from .writer import CONTENT_TYPE, GCSWriter

if TYPE_CHECKING:
    from .store import GCSStore


class GCSSegment(GCSWriter):
    """One rank's segment: its cloud's writer, as S3's and Azure's are; here of a temporary
    object, written as any object is."""

    def __init__(self, store: GCSStore, uri: str) -> None:
        super().__init__(store, parse(uri), uri)

    def padding_needed(self) -> int:
        return 0  # compose takes sources of any size

    def finish(self) -> dict[str, Any]:
        self.close()
        return {"uri": self.uri, "generation": self.generation, "size": self.bytes_written}


class GCSShardedWrites(PlannedShards, GatherWrites):
    """:class:`flyte_checkpoint.sharded.writes.ShardedWrites` for one GCS object (see the module
    docstring). Unlike S3's and Azure's, it builds on the core's gathering fallback
    (:class:`~flyte_checkpoint.sharded.writes.GatherWrites`), whose piece names, abort and sweep
    fit objects composed from whole pieces; only the commit is GCS's own."""

    limits = SHARD_LIMITS

    store: GCSStore
    uri: str

    def begin(self, token: str) -> Session:
        return super().begin(token)  # the pieces are named by the token: nothing to start

    @staticmethod
    def compose_requests(world: int) -> tuple[int, int]:
        """(rounds, compose requests) of the commit of ``world`` ranks' pieces and the tail."""
        return compose_plan(world + 1, MAX_SOURCES)

    def segment(self, session: Session, rank: int, world: int, joiner: str) -> GCSSegment:
        return GCSSegment(self.store, self._piece(session["token"], rank, joiner))

    def commit(self, session: Session, pieces: list[dict[str, Any]], tail: bytes) -> None:
        total = sum(int(p.get("size", 0)) for p in pieces) + len(tail)
        if total > MAX_OBJECT_SIZE:  # the one limit no rank could check alone: refused before compose
            raise ShardedSaveError(
                f"the {len(pieces):,} ranks' segments of {redact(self.uri)} add up to {total:,} bytes, more"
                f" than GCS's largest object ({MAX_OBJECT_SIZE:,} bytes, 5 TiB), which compose cannot"
                " make: nothing was committed. Save fewer bytes to one checkpoint (split the ranks into"
                " groups that each save to their own URI)"
            )
        token = session["token"]
        last = GCSSegment(self.store, self._piece_named(token, "tail"))
        last.write(tail)
        sources = [(p["uri"], int(p["generation"])) for p in [*pieces, last.finish()]]
        rounds = 0
        while len(sources) > MAX_SOURCES:
            joined = []
            for n, first in enumerate(range(0, len(sources), MAX_SOURCES)):
                group = sources[first : first + MAX_SOURCES]
                name = self._piece_named(token, f"join-{rounds}-{n:05d}")
                joined.append(group[0] if len(group) == 1 else (name, self._compose(name, group)))
            sources = joined
            rounds += 1
        self._compose(self.uri, sources)
        self.abort(session)

    def abort(self, session: Session) -> None:
        super().abort(session)  # deletes this save's pieces

    def sweep(self, session: Session) -> None:
        super().sweep(session)  # deletes the pieces killed saves left

    def _piece_named(self, token: str, name: str) -> str:
        return f"{self.prefix}{token}.piece-{name}"

    def _compose(self, uri: str, sources: list[tuple[str, int]]) -> int:
        """Compose ``sources`` (URIs and generations) into ``uri``; its new generation."""
        loc = parse(uri)
        config = self.store.config
        try:
            bucket = self.store.client.storage.bucket(loc.bucket)
            target = bucket.blob(loc.key)
            target.content_type = CONTENT_TYPE
            target.compose(
                [bucket.blob(parse(source).key) for source, _ in sources],
                if_source_generation_match=[generation for _, generation in sources],
                timeout=config.timeout,
                retry=self.store.client.retry(),
            )
        except Exception as exc:
            raise errors.map_error(exc, uri, "write", config=config)
        return int(target.generation)
