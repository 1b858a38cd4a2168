"""Block blob uploads: blocks staged from the store's pool, committed as one block list at close."""

from __future__ import annotations

import base64
import os
import uuid
from typing import TYPE_CHECKING, Any

from azure.storage.blob import BlobClient

from flyte_checkpoint.storage.blobstore import CopySource
from flyte_checkpoint.storage.kit.parts import Buffer, PartWriter

from . import copies, integrity
from .config import MAX_PART_SIZE, MAX_PARTS

if TYPE_CHECKING:
    from .store import AzureStore

#: The block size doubles after every this many blocks, so huge objects fit in MAX_PARTS.
DOUBLE_EVERY = 10_000


class AzureWriter(PartWriter):
    """Stages full blocks (Put Block, each with its Content-MD5) while the next one fills;
    ``close()`` commits the block list with the object's MD5, ``abort()`` commits nothing.
    A ``copy()`` stages blocks with Put Block From URL (:mod:`.copies`) in the same block list;
    an object with copied blocks is stored without an MD5 (the copied bytes never pass here).

    An object of at most one block goes up in one Put Blob at close. Uncommitted blocks are
    never visible; the service discards them at the blob's next commit, or after a week (they
    cannot be deleted alone without touching the committed blob, so ``_cancel`` does nothing).
    """

    def __init__(self, store: AzureStore, blob: BlobClient, uri: str) -> None:
        config = store.config
        super().__init__(
            uri,
            part_size=config.part_size,
            max_concurrency=config.max_concurrency,
            pool=store.pool,
            double_every=DOUBLE_EVERY,
            max_parts=MAX_PARTS,
            max_part_size=MAX_PART_SIZE,
            copy_limits=copies.LIMITS,
        )
        self._store = store
        self._blob = blob
        self._md5 = integrity.for_write(config)
        # A per-writer tag keeps concurrent writers' block ids apart; the ids of one blob must
        # all have the same length.
        self._tag = uuid.uuid4().hex[:16]
        #: Some block was copied on the server (:mod:`.copies`): the object's MD5 is then unknown.
        self._copied = False

    def _write(self, data: Buffer) -> None:
        if self._md5 is not None:
            self._md5.update(data)
        super()._write(data)

    def upload_file(self, path: str | os.PathLike[str]) -> None:
        """Write a local file; with MD5 on, its blocks are read in order here (an MD5 cannot be
        combined from blocks read in parallel), otherwise by the pool threads that send them."""
        if self._md5 is None:
            super().upload_file(path)
            return
        from flyte_checkpoint.storage.kit import open_source

        with open_source(path) as src, self:
            while data := src.read(self.part_size):
                self.write(data)

    def _put_whole(self, data: bytes | bytearray) -> None:
        try:
            done = self._blob.upload_blob(
                bytes(data),
                length=len(data),
                overwrite=True,
                validate_content=self._md5 is not None,
                max_concurrency=1,
            )
            self.committed_version = _etag(done)
        except Exception as exc:
            raise self._store.map_error(exc, self.uri, "write")

    def _start(self) -> None:
        pass  # a block blob's upload begins with its first block

    def _block_id(self, number: int) -> str:
        return base64.b64encode(f"{self._tag}{number:08d}".encode()).decode()

    def _send_part(self, number: int, data: bytes | bytearray) -> str:
        block_id = self._block_id(number)
        headers = integrity.block_headers(self._store.config, data)
        try:
            self._blob.stage_block(block_id, data, length=len(data), headers=headers)  # type: ignore[arg-type]
        except Exception as exc:
            raise self._store.map_error(exc, self.uri, "upload a block of")
        return block_id

    def _copy_part(self, number: int, source: CopySource, start: int, length: int) -> str:
        """``Put Block From URL`` (see :mod:`.copies`); returns the block's id."""
        self._copied = True
        block_id = self._block_id(number)
        copies.copy_block(self._store, self._blob, self.uri, block_id, source, start, length)
        return block_id

    def _read_source(self, source: CopySource, start: int, length: int) -> bytes:
        return copies.read_source(self._store, source, start, length)

    def _complete(self, results: list[Any], tail: memoryview | None) -> None:
        # MD5 cannot be combined from blocks, and copied blocks' bytes never came here: an object
        # with copied blocks is stored without an MD5 (its gzip members carry CRC-32s and the
        # index each file's SHA-256, which loads check).
        md5 = None if self._copied else self._md5
        try:
            done = self._blob.commit_block_list(results, content_settings=integrity.content_settings(md5))
            self.committed_version = _etag(done)
        except Exception as exc:
            raise self._store.map_error(exc, self.uri, "commit the uploaded blocks of")


def _etag(answer: Any) -> str | None:
    """The ETag of a commit's answer (the listing's version of the blob), if it gives one."""
    etag = answer.get("etag") if isinstance(answer, dict) else None
    return etag if isinstance(etag, str) else None
