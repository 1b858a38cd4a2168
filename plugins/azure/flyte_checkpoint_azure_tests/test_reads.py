"""Streaming reads: ranges prefetched concurrently and delivered in order."""

from __future__ import annotations

import os

import pytest

from flyte_checkpoint.errors import NotFoundError, TransientError
from flyte_checkpoint.storage.kit.reads import RangedReader

from .helpers import BUCKET, pool_threads

pytestmark = pytest.mark.integration

CHUNK = 50_000


def test_small_reads_across_many_ranges(make_store, prefix: str) -> None:
    others = frozenset(pool_threads())
    store = make_store(read_range_size=CHUNK, read_concurrency=3)
    uri = f"az://{BUCKET}/{prefix}/ranged"
    data = os.urandom(20 * CHUNK + 17)
    store.write_bytes(uri, data)
    out = bytearray()
    with store.open_read(uri) as r:
        assert r.readable() and not r.seekable()
        while piece := r.read(7_777):
            assert len(piece) == 7_777 or len(out) + len(piece) == len(data)  # full reads
            out += piece
        assert r.tell() == len(data)
        assert isinstance(r, RangedReader)  # the kit's bounded read-ahead, on the store's pool
    assert out == data
    assert 0 < len(pool_threads(others)) <= 4 + 8
    store.close()
    assert pool_threads(others) == []


def test_readinto_and_read_all(make_store, prefix: str) -> None:
    store = make_store(read_range_size=CHUNK)
    uri = f"az://{BUCKET}/{prefix}/into"
    data = os.urandom(3 * CHUNK + 1)
    store.write_bytes(uri, data)
    with store.open_read(uri) as r:
        buf = bytearray(CHUNK + 10)
        assert r.readinto(buf) == CHUNK + 10
        assert r.read() == data[CHUNK + 10 :]
        assert r.read(5) == b""
    assert bytes(buf) == data[: CHUNK + 10]


def test_closing_early_stops_the_prefetch(make_store, prefix: str) -> None:
    store = make_store(read_range_size=CHUNK, read_concurrency=4)
    uri = f"az://{BUCKET}/{prefix}/early"
    store.write_bytes(uri, os.urandom(30 * CHUNK))
    r = store.open_read(uri)
    r.read(10)
    r.close()
    with pytest.raises(ValueError, match="closed"):
        r.read(1)


def test_an_object_replaced_while_read_is_a_retryable_error(make_store, prefix: str) -> None:
    store = make_store(read_range_size=CHUNK, read_concurrency=2)
    uri = f"az://{BUCKET}/{prefix}/moving"
    store.write_bytes(uri, os.urandom(12 * CHUNK))
    with store.open_read(uri) as r:
        r.read(CHUNK)
        store.write_bytes(uri, os.urandom(12 * CHUNK))  # a new version (new ETag)
        with pytest.raises(TransientError, match="changed while it was being read"):
            r.read()


def test_empty_blob(make_store, prefix: str) -> None:
    store = make_store()
    uri = f"az://{BUCKET}/{prefix}/empty"
    store.write_bytes(uri, b"")
    with store.open_read(uri) as r:
        assert r.read() == b""
    assert store.read_range(uri, 0, 10) == b""


def test_read_range_edges(make_store, prefix: str) -> None:
    store = make_store(read_range_size=CHUNK)
    uri = f"az://{BUCKET}/{prefix}/edges"
    data = os.urandom(4 * CHUNK)
    store.write_bytes(uri, data)
    assert store.read_range(uri, 0, 0) == b""
    assert store.read_range(uri, len(data), 10) == b""
    assert store.read_range(uri, len(data) + 100, 10) == b""
    assert store.read_range(uri, CHUNK - 3, 3 * CHUNK) == data[CHUNK - 3 : 4 * CHUNK - 3]


def test_read_range_of_an_absent_object_is_not_found(make_store, prefix: str) -> None:
    store = make_store()
    for length in (10, 0):
        with pytest.raises(NotFoundError):
            store.read_range(f"az://{BUCKET}/{prefix}/absent", 0, length)
