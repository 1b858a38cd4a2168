"""Reads: streamed, in order, with concurrent ranged GETs for large objects."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from flyte_checkpoint.errors import NotFoundError, TransientError

from .helpers import data

pytestmark = pytest.mark.integration
RANGE = 64 * 1024


@pytest.fixture
def ranged(make_s3_store: Any) -> Any:
    return make_s3_store(read_range_size=RANGE, read_concurrency=3)


@pytest.mark.parametrize("chunk", [1, 1000, RANGE - 1, RANGE, RANGE + 1, 5 * RANGE])
def test_reads_of_any_size_deliver_the_object_in_order(ranged: Any, s3_root: str, chunk: int) -> None:
    uri = f"{s3_root}/obj"
    payload = data(7 * RANGE + 321, seed=chunk)
    ranged.write_bytes(uri, payload)
    out = io.BytesIO()
    with ranged.open_read(uri) as r:
        if chunk == 1:  # byte by byte is slow: only the first and last ranges
            out.write(b"".join(r.read(1) for _ in range(RANGE + 2)))
            out.write(r.read())
        else:  # exactly ``chunk`` bytes, across ranges, fewer only at the end
            while piece := r.read(chunk):
                assert len(piece) == min(chunk, len(payload) - out.tell()), f"read({chunk}) at {out.tell()}"
                out.write(piece)
        assert r.read(10) == b""
    assert out.getvalue() == payload


def test_readinto_and_buffered_wrapping(ranged: Any, s3_root: str) -> None:
    uri = f"{s3_root}/obj"
    payload = data(3 * RANGE + 5)
    ranged.write_bytes(uri, payload)
    with ranged.open_read(uri) as raw:
        buf = bytearray(RANGE // 2)
        n = raw.readinto(buf)
        assert 0 < n <= len(buf) and bytes(buf[:n]) == payload[:n]
        rest = io.BufferedReader(raw, buffer_size=10_000).read()
    assert bytes(buf[:n]) + rest == payload


def test_close_early_stops_the_read(ranged: Any, s3_root: str) -> None:
    uri = f"{s3_root}/obj"
    ranged.write_bytes(uri, data(10 * RANGE))
    r = ranged.open_read(uri)
    assert len(r.read(100)) == 100
    r.close()
    assert r.closed
    with pytest.raises(ValueError):
        r.read(1)


def test_object_replaced_during_a_ranged_read_is_transient(make_s3_store: Any, s3_root: str) -> None:
    store = make_s3_store(read_range_size=RANGE, read_concurrency=1)
    uri = f"{s3_root}/moving"
    store.write_bytes(uri, data(6 * RANGE, seed=1))
    with store.open_read(uri) as r:
        r.read(RANGE)  # the first GET's range; the next range is already in flight
        store.write_bytes(uri, data(6 * RANGE, seed=2))
        with pytest.raises(TransientError, match="changed while it was being read"):
            while r.read(RANGE):
                pass


def test_read_range_edges(ranged: Any, s3_root: str) -> None:
    uri = f"{s3_root}/obj"
    payload = data(1000)
    ranged.write_bytes(uri, payload)
    assert ranged.read_range(uri, 0, 1) == payload[:1]
    assert ranged.read_range(uri, 990, 100) == payload[990:]
    assert ranged.read_range(uri, 1000, 10) == b""
    assert ranged.read_range(uri, 5000, 10) == b""
    assert ranged.read_range(uri, 3, 0) == b""
    with pytest.raises(NotFoundError):
        ranged.read_range(f"{s3_root}/absent", 0, 10)


def test_download_file_replaces_target_only_when_whole(ranged: Any, s3_root: str, tmp_path: Path) -> None:
    uri = f"{s3_root}/obj"
    payload = data(5 * RANGE + 1)
    ranged.write_bytes(uri, payload)
    target = tmp_path / "out.bin"
    target.write_bytes(b"previous")
    with pytest.raises(NotFoundError):
        ranged.download_file(f"{s3_root}/absent", target)
    assert target.read_bytes() == b"previous"
    ranged.download_file(uri, target)
    assert target.read_bytes() == payload
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_zero_byte_object_reads_empty(ranged: Any, s3_root: str) -> None:
    uri = f"{s3_root}/empty"
    ranged.write_bytes(uri, b"")
    with ranged.open_read(uri) as r:
        assert r.read() == b""
        assert r.read(5) == b""


def test_list_details_is_one_listing_with_sizes_times_and_folders(
    make_s3_store: Any, s3_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sizes and times come from ListObjectsV2 itself: no HEAD per object; one level uses the delimiter."""
    store = make_s3_store()
    for name, size in (("a", 3), ("d/b", 5), ("d/e/c", 7)):
        store.write_bytes(f"{s3_root}/{name}", b"x" * size)
    monkeypatch.setattr(type(store), "stat", lambda *a: pytest.fail("list_details called stat"))
    every = list(store.list_details(s3_root + "/"))
    assert [(i.uri, i.size, i.is_folder) for i in every] == [
        (f"{s3_root}/a", 3, False),
        (f"{s3_root}/d/b", 5, False),
        (f"{s3_root}/d/e/c", 7, False),
    ]
    assert all(i.modified is not None and i.modified.tzinfo is not None for i in every)
    top = [(i.uri, i.size, i.is_folder) for i in store.list_details(s3_root + "/", recursive=False)]
    assert top == [(f"{s3_root}/a", 3, False), (f"{s3_root}/d/", None, True)]
