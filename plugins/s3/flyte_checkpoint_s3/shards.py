"""Sharded saves on S3: one multipart upload written by every rank (``flyte_checkpoint.sharded``).

Rank 0 starts the upload; each rank sends its segment as parts numbered from its own range
(``(10,000 - 1) // world`` numbers each), its last part padded to S3's 5 MiB minimum; rank 0
sends the tail as part 10,000 and completes the upload with every rank's parts in order
(and the whole object's CRC, combined from theirs), or aborts it. Unfinished uploads of the
same key that earlier, killed saves left are aborted after the next commit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flyte_checkpoint.storage.kit import part_size_for

from .config import MAX_PARTS, MIN_PART_SIZE
from .errors import error_code
from .uris import parse
from .writer import S3Writer

if TYPE_CHECKING:
    from .store import S3Store


class S3Segment(S3Writer):
    """One rank's parts, numbered ``first .. first + count - 1``, of rank 0's upload."""

    def __init__(self, store: S3Store, uri: str, upload_id: str, first: int, count: int) -> None:
        super().__init__(store, uri, parse(uri))
        self.upload_id = upload_id
        self.part_size = max(self.part_size, MIN_PART_SIZE)
        self._first = first
        self._next_part = first
        self.max_parts = first + count - 1
        self._results: list[Any] = []

    def _part_size(self, number: int) -> int:
        return part_size_for(
            number - self._first + 1,
            self.part_size,
            double_every=self.double_every,
            maximum=self.max_part_size,
        )

    def _start(self) -> None:
        pass  # the upload is rank 0's

    def _put_whole(self, data: bytes | bytearray) -> None:
        self._results = [self._send_part(self._first, data)]

    def _complete(self, results: list[Any], tail: memoryview | None) -> None:
        self._results = results

    def _cancel(self) -> None:
        pass  # rank 0 aborts the whole upload

    def padding_needed(self) -> int:
        """Bytes that bring the part being filled (the segment's last) to :data:`MIN_PART_SIZE`."""
        return max(0, MIN_PART_SIZE - self._fill)

    def finish(self) -> dict[str, Any]:
        self.close()
        return {"parts": [list(result) for result in self._results]}


class S3ShardedWrites:
    """:class:`flyte_checkpoint.sharded.writes.ShardedWrites` for one S3 object: one multipart
    upload, each rank's parts numbered from its own range (see the module docstring)."""

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
        count = (MAX_PARTS - 1) // world
        return S3Segment(self.store, self.uri, session["upload_id"], 1 + rank * count, count)

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
