"""Streaming writes as staged blocks, committed as one block list on a clean close."""

from __future__ import annotations

import base64
import hashlib
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from azure.storage.blob import BlobClient, ContentSettings

from flyte_checkpoint.errors import CheckpointError, StoreError
from flyte_checkpoint.storage.blobstore import BlobWriter
from flyte_checkpoint.uri import redact

from .settings import MAX_BLOCK_SIZE, AzureSettings

#: Azure's limit of blocks in one blob.
MAX_BLOCKS = 50_000
#: The block size doubles after every this many blocks, so huge objects fit in MAX_BLOCKS.
GROWTH_EVERY = 10_000

ErrorMapper = Callable[[BaseException, str], CheckpointError]


def block_size_for(index: int, base: int) -> int:
    """The size of block number ``index`` (from 0) when the first blocks are ``base`` bytes."""
    return min(MAX_BLOCK_SIZE, base << (index // GROWTH_EVERY))


class AzureBlobWriter(BlobWriter):
    """Buffers one block; full blocks upload concurrently (at most ``upload_concurrency`` in
    flight, so memory stays below ``block_size * (upload_concurrency + 1)``); ``close()``
    commits the block list, ``abort()`` commits nothing.

    An object smaller than one block goes in a single Put Blob request at close. Uncommitted
    blocks are never visible; the service discards them at the blob's next commit, or after
    a week. (They cannot be deleted on their own without touching the committed blob.)
    """

    def __init__(self, uri: str, blob: BlobClient, settings: AzureSettings, fail: ErrorMapper) -> None:
        super().__init__(uri)
        self._blob = blob
        self._settings = settings
        self._fail = fail
        self._buf = bytearray()
        self._block_ids: list[str] = []
        self._futures: list[Future[None]] = []
        self._slots = threading.Semaphore(settings.upload_concurrency)
        self._pool: ThreadPoolExecutor | None = None
        self._error: BaseException | None = None
        self._md5 = hashlib.md5(usedforsecurity=False) if settings.checksum else None
        # A per-writer tag keeps concurrent writers' block ids apart; ids of one blob must
        # all have the same length.
        self._tag = uuid.uuid4().hex[:16]

    # -- BlobWriter ------------------------------------------------------------

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B") if isinstance(data, memoryview) else memoryview(data)
        if self._md5 is not None:
            self._md5.update(view)
        while len(view):
            size = self._next_block_size()
            if not self._buf and len(view) >= size:
                # A whole block: stage it without going through the buffer (and without
                # any copy when the caller handed over exactly one block of immutable bytes).
                whole = isinstance(data, bytes) and len(view) == size == len(data)
                self._stage(data if whole else view[:size].tobytes())  # type: ignore[arg-type]
                view = view[size:]
                continue
            take = min(size - len(self._buf), len(view))
            self._buf += view[:take]
            view = view[take:]
            if len(self._buf) >= size:
                block, self._buf = self._buf, bytearray()
                self._stage(block)

    def _commit(self) -> None:
        if not self._block_ids:
            self._put_whole()
            return
        if self._buf:
            block, self._buf = self._buf, bytearray()
            self._stage(block)
        self._wait_all()
        settings = ContentSettings(content_md5=bytearray(self._md5.digest())) if self._md5 else None
        try:
            self._blob.commit_block_list(self._block_ids, content_settings=settings)
        except Exception as exc:
            raise self._fail(exc, "commit the uploaded blocks of") from exc
        finally:
            self._shutdown()

    def _abort(self) -> None:
        self._buf = bytearray()
        for fut in self._futures:
            fut.cancel()
        self._shutdown()

    # -- internals -------------------------------------------------------------

    def _next_block_size(self) -> int:
        return block_size_for(len(self._block_ids), self._settings.block_size)

    def _put_whole(self) -> None:
        data = bytes(self._buf)
        self._buf = bytearray()
        try:
            self._blob.upload_blob(
                data,
                length=len(data),
                overwrite=True,
                validate_content=self._settings.checksum,
                max_concurrency=1,
            )
        except Exception as exc:
            raise self._fail(exc, "write") from exc

    def _stage(self, block: bytes | bytearray) -> None:
        self._raise_if_failed()
        index = len(self._block_ids)
        if index >= MAX_BLOCKS:
            raise StoreError(
                f"cannot write {redact(self.uri)}: more than {MAX_BLOCKS} blocks; raise"
                " FLYTE_CHECKPOINT_AZURE_BLOCK_SIZE"
            )
        self._slots.acquire()  # back-pressure: wait while upload_concurrency blocks are in flight
        try:
            self._raise_if_failed()
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    self._settings.upload_concurrency, thread_name_prefix="fcp-azure-put"
                )
            block_id = base64.b64encode(f"{self._tag}{index:08d}".encode()).decode()
            fut = self._pool.submit(self._put_block, block_id, block)
        except BaseException:
            self._slots.release()
            raise
        self._block_ids.append(block_id)
        self._futures.append(fut)
        fut.add_done_callback(self._on_done)

    def _put_block(self, block_id: str, block: bytes | bytearray) -> None:
        # The SDK's own validate_content wants bytes; hashing here spares a copy of the block.
        headers = None
        if self._settings.checksum:
            digest = hashlib.md5(block, usedforsecurity=False).digest()
            headers = {"Content-MD5": base64.b64encode(digest).decode()}
        self._blob.stage_block(block_id, block, length=len(block), headers=headers)

    def _on_done(self, fut: Future[None]) -> None:
        self._slots.release()
        if not fut.cancelled() and fut.exception() is not None and self._error is None:
            self._error = fut.exception()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._fail(self._error, "upload a block of") from self._error

    def _wait_all(self) -> None:
        for fut in self._futures:
            try:
                fut.result()
            except Exception as exc:
                raise self._fail(exc, "upload a block of") from exc

    def _shutdown(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
