"""Block uploads: many blocks, single-request small blobs, nothing committed on failure."""

from __future__ import annotations

import base64
import hashlib
import os
import threading
from pathlib import Path

import pytest
from flyte_checkpoint_azure.config import MAX_PART_SIZE, MAX_PARTS
from flyte_checkpoint_azure.store import AzureStore
from flyte_checkpoint_azure.writer import DOUBLE_EVERY, AzureWriter

from flyte_checkpoint.errors import ContainerNotFoundError, NotFoundError, StoreError, TransientError

from .helpers import BUCKET, config, pool_threads

BLOCK = 64 * 1024


@pytest.mark.integration
def test_many_blocks_commit_as_one_blob(make_store, blob_service, prefix: str) -> None:
    others = frozenset(pool_threads())
    store = make_store(part_size=BLOCK, max_concurrency=4)
    uri = f"az://{BUCKET}/{prefix}/many"
    data = os.urandom(50 * BLOCK + 1234)
    with store.open_write(uri) as w:
        for i in range(0, len(data), 10_007):  # odd write sizes cross block boundaries
            w.write(data[i : i + 10_007])
    committed, uncommitted = blob_service.get_blob_client(BUCKET, f"{prefix}/many").get_block_list("all")
    assert [b.size for b in committed] == [BLOCK] * 50 + [1234]
    assert uncommitted == []
    assert store.read_bytes(uri) == data
    assert 0 < len(pool_threads(others)) <= 4 + 8  # the store's one pool: max_concurrency + read_concurrency
    store.close()
    assert pool_threads(others) == []


@pytest.mark.integration
def test_small_blob_goes_in_one_request(make_store, blob_service, prefix: str) -> None:
    store = make_store(part_size=BLOCK)
    uri = f"az://{BUCKET}/{prefix}/small"
    store.write_bytes(uri, b"x" * (BLOCK - 1))
    blob = blob_service.get_blob_client(BUCKET, f"{prefix}/small")
    committed, uncommitted = blob.get_block_list("all")
    assert (committed, uncommitted) == ([], [])  # Put Blob, not a block list
    assert (
        bytes(blob.get_blob_properties().content_settings.content_md5)
        == hashlib.md5(b"x" * (BLOCK - 1)).digest()
    )


@pytest.mark.integration
def test_blocks_are_invisible_until_close(make_store, prefix: str) -> None:
    store = make_store(part_size=BLOCK)
    uri = f"az://{BUCKET}/{prefix}/pending"
    w = store.open_write(uri)
    w.write(os.urandom(5 * BLOCK))
    w._wait_parts()  # the five blocks are staged on the server
    assert store.stat(uri) is None
    assert list(store.list(f"az://{BUCKET}/{prefix}/")) == []
    w.close()
    assert store.stat(uri) == 5 * BLOCK


@pytest.mark.integration
def test_exception_mid_write_commits_nothing(make_store, prefix: str) -> None:
    store = make_store(part_size=BLOCK)
    uri = f"az://{BUCKET}/{prefix}/kept"
    store.write_bytes(uri, b"previous checkpoint")
    with pytest.raises(RuntimeError, match="crash"), store.open_write(uri) as w:
        w.write(os.urandom(6 * BLOCK + 5))
        raise RuntimeError("crash")
    assert store.read_bytes(uri) == b"previous checkpoint"


@pytest.mark.integration
def test_server_refusing_blocks_mid_write_commits_nothing(make_store, blob_service, prefix: str) -> None:
    """A lease taken while blocks are uploading makes the rest fail: the old blob stays."""
    store = make_store(part_size=BLOCK, max_concurrency=2)
    uri = f"az://{BUCKET}/{prefix}/leased"
    store.write_bytes(uri, b"old")
    blob = blob_service.get_blob_client(BUCKET, f"{prefix}/leased")
    lease = None
    try:
        with pytest.raises(StoreError, match="locked by a lease") as info, store.open_write(uri) as w:
            w.write(os.urandom(2 * BLOCK))
            lease = blob.acquire_lease(lease_duration=-1)
            w.write(os.urandom(4 * BLOCK))
        assert f"{prefix}/leased" in str(info.value)
    finally:
        if lease is not None:
            lease.break_lease()
    assert store.read_bytes(uri) == b"old"


@pytest.mark.integration
def test_missing_container_fails_the_write_and_says_so(make_store, prefix: str) -> None:
    store = make_store(part_size=BLOCK)
    for size in (10, 3 * BLOCK):  # single request, and blocks
        with (
            pytest.raises(ContainerNotFoundError, match="'fcp-no-such-bucket' does not exist"),
            store.open_write(f"az://fcp-no-such-bucket/{prefix}/x") as w,
        ):
            w.write(b"y" * size)


@pytest.mark.integration
def test_concurrent_multi_block_writers_leave_one_whole_object(make_store, prefix: str) -> None:
    """Azure discards a blob's other uncommitted blocks when one block list commits: the
    second writer fails with a retryable error, and the blob is the first writer's, whole."""
    store = make_store(part_size=BLOCK)
    uri = f"az://{BUCKET}/{prefix}/race"
    a, b = b"A" * (3 * BLOCK), b"B" * (3 * BLOCK + 1)
    wa, wb = store.open_write(uri), store.open_write(uri)
    wa.write(a)
    wb.write(b)
    wb._wait_parts()
    wa.close()
    with pytest.raises(TransientError, match="another writer"):
        wb.close()
    assert store.read_bytes(uri) == a


@pytest.mark.integration
def test_upload_and_download_file_many_blocks(make_store, tmp_path: Path, prefix: str) -> None:
    store = make_store(part_size=BLOCK, read_range_size=50_000)
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(20 * BLOCK + 3))
    uri = f"az://{BUCKET}/{prefix}/file"
    store.upload_file(src, uri)
    dst = tmp_path / "dst.bin"
    store.download_file(uri, dst)
    assert dst.read_bytes() == src.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dst.bin", "src.bin"]


@pytest.mark.integration
def test_failed_download_leaves_the_target_alone(make_store, tmp_path: Path, prefix: str) -> None:
    store = make_store()
    dst = tmp_path / "dst.bin"
    dst.write_bytes(b"mine")
    with pytest.raises(NotFoundError, match="no object at"):
        store.download_file(f"az://{BUCKET}/{prefix}/absent", dst)
    assert dst.read_bytes() == b"mine"
    assert [p.name for p in tmp_path.iterdir()] == ["dst.bin"]


# -- the writer's own logic, with a stand-in for the SDK's BlobClient ----------------


class _GatedBlob:
    """Records staged blocks; every stage_block waits for ``gate`` (to fill the window)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.gate = threading.Event()
        self.active = self.max_active = 0
        self.blocks: dict[str, bytes] = {}
        self.md5s: dict[str, str] = {}
        self.committed: list[str] | None = None
        self.content_md5: bytes | None = None

    def stage_block(self, block_id, data, length, headers=None):
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            assert self.gate.wait(60), "test gate never opened"
            self.blocks[block_id] = bytes(data)
            self.md5s[block_id] = (headers or {}).get("Content-MD5", "")
        finally:
            with self.lock:
                self.active -= 1

    def commit_block_list(self, block_ids, content_settings=None):
        self.committed = list(block_ids)
        self.content_md5 = bytes(content_settings.content_md5) if content_settings else None

    def upload_blob(self, data, **kwargs):  # pragma: no cover - not reached here
        raise AssertionError("a multi-block write must not use a single put")


def _writer(blob: _GatedBlob, **settings) -> AzureWriter:
    return AzureWriter(AzureStore(config(account_name="acct", **settings)), blob, "az://c/x")  # type: ignore[arg-type]


def test_in_flight_blocks_are_bounded_and_the_writer_waits() -> None:
    blob = _GatedBlob()
    writer = _writer(blob, part_size=1000, max_concurrency=3)
    data = os.urandom(10_500)
    done = threading.Event()

    def produce() -> None:
        writer.write(data)
        done.set()

    t = threading.Thread(target=produce)
    t.start()
    for _ in range(6000):  # wait (bounded) until the window is full
        if blob.active == 3:
            break
        threading.Event().wait(0.01)
    assert blob.active == 3
    assert not done.is_set()  # the producer is held back: 3 in flight + 1 being filled
    blob.gate.set()
    t.join()
    writer.close()
    assert blob.max_active == 3
    assert b"".join(blob.blocks[i] for i in blob.committed or []) == data
    assert len(blob.committed or []) == 11
    for block_id, block in blob.blocks.items():  # every block carried its own MD5
        assert blob.md5s[block_id] == base64.b64encode(hashlib.md5(block).digest()).decode()
    assert blob.content_md5 == hashlib.md5(data).digest()
    assert len({len(i) for i in blob.committed or []}) == 1  # block ids of one length


def test_checksum_off_sends_no_md5() -> None:
    blob = _GatedBlob()
    blob.gate.set()
    writer = _writer(blob, part_size=10, checksum="NONE")
    writer.write(b"y" * 25)
    writer.close()
    assert set(blob.md5s.values()) == {""} and blob.content_md5 is None


def test_block_size_grows_to_fit_huge_objects() -> None:
    writer = _writer(_GatedBlob(), part_size=8)
    assert (writer._part_size(1), writer._part_size(DOUBLE_EVERY), writer._part_size(DOUBLE_EVERY + 1)) == (
        8,
        8,
        16,
    )
    huge = _writer(_GatedBlob(), part_size=2**30)
    assert huge._part_size(MAX_PARTS) == MAX_PART_SIZE
    default = _writer(_GatedBlob())
    reach = sum(default._part_size(i) for i in range(1, MAX_PARTS + 1))
    assert reach > 1024**4  # more than 1 TiB with the default 8 MiB blocks
