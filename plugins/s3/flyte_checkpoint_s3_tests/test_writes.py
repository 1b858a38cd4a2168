"""Writes: one PUT when small, multipart with many parts when large, nothing left on failure."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from flyte_checkpoint_s3.config import MAX_PART_SIZE
from flyte_checkpoint_s3.writer import DOUBLE_EVERY

from flyte_checkpoint.errors import ContainerNotFoundError, TransientError
from flyte_checkpoint.storage.kit import part_size_for

from .helpers import BUCKET, data, key_of, multipart_uploads

pytestmark = pytest.mark.integration
PART = 64 * 1024  # the test server's smallest part


def _etag(raw_s3: Any, uri: str) -> str:
    return raw_s3.head_object(Bucket=BUCKET, Key=key_of(uri))["ETag"].strip('"')


def test_many_parts_round_trip(make_s3_store: Any, raw_s3: Any, s3_root: str) -> None:
    store = make_s3_store(part_size=PART, max_concurrency=4)
    uri = f"{s3_root}/many"
    payload = data(60 * PART + 1234, seed=3)
    with store.open_write(uri) as w:
        for i in range(0, len(payload), 50_000):
            w.write(payload[i : i + 50_000])
    assert _etag(raw_s3, uri).endswith("-61")
    assert store.read_bytes(uri) == payload
    assert multipart_uploads(raw_s3, uri) == []


def test_parts_in_flight_are_bounded(make_s3_store: Any, s3_root: str) -> None:
    store = make_s3_store(part_size=PART, max_concurrency=2)
    with store.open_write(f"{s3_root}/bounded") as w:
        w.write(data(20 * PART))
    assert w.upload_id is not None
    assert 1 <= w.peak_in_flight <= 2


def test_object_of_one_part_is_a_single_put(make_s3_store: Any, raw_s3: Any, s3_root: str) -> None:
    store = make_s3_store(part_size=PART)
    uri = f"{s3_root}/one-part"
    with store.open_write(uri) as w:
        w.write(data(PART))
    assert w.upload_id is None
    assert "-" not in _etag(raw_s3, uri)
    assert store.read_bytes(uri) == data(PART)


def test_a_small_object_holds_its_own_size_not_a_whole_part(
    make_s3_store: Any, raw_s3: Any, s3_root: str
) -> None:
    import tracemalloc

    store = make_s3_store(part_size=8 * 1024 * 1024)
    uri = f"{s3_root}/small"
    tracemalloc.start()
    try:
        with store.open_write(uri) as w:
            for piece in (b"step=", b"1200", b"\n" * 3000):
                w.write(piece)
            _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024
    assert store.read_bytes(uri) == b"step=1200" + b"\n" * 3000


def test_exception_mid_write_leaves_no_object_and_no_upload(
    make_s3_store: Any, raw_s3: Any, s3_root: str
) -> None:
    store = make_s3_store(part_size=PART, max_concurrency=2)
    uri = f"{s3_root}/crash"
    with pytest.raises(RuntimeError, match="simulated crash"), store.open_write(uri) as w:
        w.write(data(10 * PART))
        assert w.upload_id
        raise RuntimeError("simulated crash")
    assert store.stat(uri) is None
    assert multipart_uploads(raw_s3, uri) == []


def test_abort_leaves_no_upload(make_s3_store: Any, raw_s3: Any, s3_root: str) -> None:
    store = make_s3_store(part_size=PART)
    uri = f"{s3_root}/aborted"
    w = store.open_write(uri)
    w.write(data(5 * PART))
    assert multipart_uploads(raw_s3, uri) != []
    w.abort()
    assert multipart_uploads(raw_s3, uri) == []
    assert store.stat(uri) is None


def test_failing_part_aborts_the_upload(make_s3_store: Any, raw_s3: Any, s3_root: str) -> None:
    store = make_s3_store(part_size=PART, max_concurrency=1)
    uri = f"{s3_root}/lost-upload"
    w = store.open_write(uri)
    w.write(data(3 * PART))
    upload_id = w.upload_id
    # Someone else (a lifecycle rule, an operator) aborts the upload: the next parts fail.
    # (AWS answers NoSuchUpload and moto 5.2.5 answers 500: both a TransientError, so the save is retried.)
    raw_s3.abort_multipart_upload(Bucket=BUCKET, Key=key_of(uri), UploadId=upload_id)
    with pytest.raises(TransientError) as info, w:
        w.write(data(3 * PART))
    assert "s3://" in str(info.value)
    assert w.closed
    assert store.stat(uri) is None
    assert multipart_uploads(raw_s3, uri) == []


def test_write_to_missing_container_says_so(make_s3_store: Any) -> None:
    store = make_s3_store(part_size=PART)
    missing = pytest.raises(ContainerNotFoundError, match="'fcp-no-such-bucket' does not exist")
    with missing, store.open_write("s3://fcp-no-such-bucket/k") as w:
        w.write(data(3 * PART))
    with pytest.raises(ContainerNotFoundError, match="'fcp-no-such-bucket' does not exist"):
        store.write_bytes("s3://fcp-no-such-bucket/small", b"x")


def test_upload_file_in_parts(make_s3_store: Any, raw_s3: Any, s3_root: str, tmp_path: Path) -> None:
    store = make_s3_store(part_size=PART, max_concurrency=3)
    src = tmp_path / "big.bin"
    payload = data(25 * PART + 99, seed=9)
    src.write_bytes(payload)
    uri = f"{s3_root}/file"
    store.upload_file(src, uri)
    assert _etag(raw_s3, uri).endswith("-26")
    assert store.read_bytes(uri) == payload
    assert multipart_uploads(raw_s3, uri) == []


def test_upload_file_of_one_part_is_a_single_put(
    make_s3_store: Any, raw_s3: Any, s3_root: str, tmp_path: Path
) -> None:
    store = make_s3_store(part_size=PART)
    src = tmp_path / "small.bin"
    src.write_bytes(b"abc")
    store.upload_file(src, f"{s3_root}/small")
    assert "-" not in _etag(raw_s3, f"{s3_root}/small")
    assert store.read_bytes(f"{s3_root}/small") == b"abc"


def test_part_size_grows_so_parts_never_run_out() -> None:
    base = 8 * 1024 * 1024

    def size(number: int) -> int:
        return part_size_for(number, base, double_every=DOUBLE_EVERY, maximum=MAX_PART_SIZE)

    assert size(1) == base
    assert size(1000) == base
    assert size(1001) == 2 * base
    assert size(10_000) <= MAX_PART_SIZE
    total = sum(size(n) for n in range(1, 10_001))
    assert total > 5 * 1024**4  # more than S3's largest object


def test_one_store_serves_many_threads(make_s3_store: Any, raw_s3: Any, s3_root: str) -> None:
    store = make_s3_store(part_size=PART, read_range_size=PART, max_concurrency=2, read_concurrency=2)
    payloads = {f"{s3_root}/t{i}": data(5 * PART + i, seed=i) for i in range(6)}

    def round_trip(uri: str) -> bool:
        with store.open_write(uri) as w:
            w.write(payloads[uri])
        return store.read_bytes(uri) == payloads[uri]

    with ThreadPoolExecutor(6) as pool:
        assert all(pool.map(round_trip, payloads))
    assert multipart_uploads(raw_s3, s3_root) == []
