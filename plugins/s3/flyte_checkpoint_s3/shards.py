"""Sharded saves on S3: one multipart upload written by every rank (``flyte_checkpoint.sharded``).

Rank 0 starts the upload; each rank sends its segment as parts numbered from its own range of
the 9,999 numbers (dealt out in rank order, :func:`flyte_checkpoint.storage.kit.plan_shard`),
each part as large as the rank's bound of its segment needs to fit its numbers (at least the
store's ``part_size``, at most 5 GiB less 5 MiB); the last 5 MiB of each full part are held back
for the next one, so the rank's last part, which other ranks' parts follow, always reaches S3's
5 MiB minimum without padding; only a segment shorter than 5 MiB in all is padded (an empty
one sends no part). Rank 0 sends the tail as part 10,000 and completes the upload with every
rank's parts in order (and the whole object's CRC, combined from theirs), or aborts it. A
world of more than 9,999 ranks, or a rank whose bound does not fit its numbers, is refused
before any part is sent. Unfinished uploads of the same key that earlier, killed saves left
are aborted after the next commit.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from flyte_checkpoint.storage.kit import PlannedShards, ShardPlan
from flyte_checkpoint.uri import redact

from .config import MAX_PARTS, SHARD_LIMITS
from .errors import error_code
from .uris import parse
from .writer import S3Writer

if TYPE_CHECKING:
    from collections.abc import Callable

    from .store import S3Store


class S3Segment(S3Writer):
    """One rank's parts, numbered ``plan.first .. plan.first + plan.count - 1``, of rank 0's
    upload: ``plan.part_size`` bytes each but the last, which holds from 5 MiB (``plan.hold``,
    held back from the part before) to ``plan.part_size + plan.hold`` bytes."""

    def __init__(self, store: S3Store, uri: str, upload_id: str, plan: ShardPlan) -> None:
        super().__init__(store, uri, parse(uri))
        self.upload_id = upload_id
        self.plan = plan
        self.part_size = plan.part_size
        self._hold = plan.hold
        # Full while more bytes follow, a part keeps its last ``hold`` bytes back for the next
        # (the kit's reserve), so the segment's last part is never shorter than S3's minimum.
        self._reserve = plan.hold
        self._first = plan.first
        self._next_part = plan.first
        self.max_parts = plan.first + plan.count - 1
        self.max_concurrency = plan.concurrency(self.max_concurrency)  # large parts: fewer at once
        self._places = threading.Semaphore(self.max_concurrency)
        self._results: list[Any] = []
        #: Bytes of padding added to the segment (its last part brought to S3's minimum).
        self.padded = 0

    def _part_size(self, number: int) -> int:
        return self.plan.part_size

    def _submit(self, job: Callable[[int], Any]) -> None:
        if self._next_part > self.max_parts:
            raise self.plan.outgrown(redact(self.uri))
        super()._submit(job)

    def _start(self) -> None:
        pass  # the upload is rank 0's

    def _put_whole(self, data: bytes | bytearray) -> None:
        self._results = [self._send_part(self._first, data)] if data else []  # an empty segment: no part

    def _complete(self, results: list[Any], tail: memoryview | None) -> None:
        self._results = results

    def _cancel(self) -> None:
        pass  # rank 0 aborts the whole upload

    def padding_needed(self) -> int:
        """Bytes that bring the segment's last part to S3's 5 MiB minimum: only for a segment
        shorter than that in all (a longer one's last part holds the bytes held back)."""
        self.padded = self._hold - self._fill if 0 < self._fill < self._hold else 0
        return self.padded

    def finish(self) -> dict[str, Any]:
        self.close()
        return {"parts": [list(result) for result in self._results]}


class S3ShardedWrites(PlannedShards):
    """:class:`flyte_checkpoint.sharded.writes.ShardedWrites` for one S3 object: one multipart
    upload, each rank's parts numbered from its own range (see the module docstring)."""

    limits = SHARD_LIMITS

    store: S3Store
    uri: str

    def __init__(self, store: S3Store, uri: str) -> None:
        self.store = store
        self.uri = uri
        self.loc = parse(uri)

    def _args(self, **more: Any) -> dict[str, Any]:
        return {"Bucket": self.loc.bucket, "Key": self.loc.key, **more}

    def begin(self, token: str) -> dict[str, Any]:
        args = self._args()
        if self.store.crc is not None:
            args.update(ChecksumAlgorithm=self.store.crc.name, ChecksumType=self.store.config.checksum_type)
        resp = self.store.call(
            lambda: self.store.client.get().create_multipart_upload(**args), self.uri, "start an upload to"
        )
        return {"upload_id": resp["UploadId"]}

    def segment(self, session: dict[str, Any], rank: int, world: int, joiner: str) -> S3Segment:
        # Two processes reporting as one rank send the same part numbers; the completion names
        # each part's ETag and checksum, so a part replaced by the other fails it (InvalidPart).
        plan = self._prepared
        if plan is None or (plan.rank, plan.world) != (rank, world):
            plan = self.plan(rank, world, 0)  # not prepared: the store's part_size, the rank's share
        return S3Segment(self.store, self.uri, session["upload_id"], plan)

    def commit(self, session: dict[str, Any], pieces: list[dict[str, Any]], tail: bytes) -> None:
        writer = S3Writer(self.store, self.uri, self.loc)
        writer.upload_id = session["upload_id"]
        results = [tuple(part) for piece in pieces for part in piece["parts"]]
        results.append(writer._send_part(MAX_PARTS, tail))
        writer._complete(results, None)

    def abort(self, session: dict[str, Any]) -> None:
        upload_id = session.get("upload_id")
        if upload_id is None:
            return
        try:
            self.store.call(
                lambda: self.store.client.get().abort_multipart_upload(**self._args(UploadId=upload_id)),
                self.uri,
                "abort the upload of",
            )
        except Exception as exc:
            if error_code(exc) != "NoSuchUpload" and "NoSuchUpload" not in str(exc):
                raise

    def sweep(self, session: dict[str, Any]) -> None:
        def uploads() -> list[str]:
            found = []
            for page in (
                self.store.client.get()
                .get_paginator("list_multipart_uploads")
                .paginate(Bucket=self.loc.bucket, Prefix=self.loc.key)
            ):
                found += [u["UploadId"] for u in page.get("Uploads", ()) if u["Key"] == self.loc.key]
            return found

        for upload_id in self.store.call(uploads, self.uri, "list the uploads of"):
            if upload_id != session.get("upload_id"):
                self.abort({"upload_id": upload_id})
