"""Reads: ranged GETs through the SDK, pinned to one generation, in parallel, in order."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from flyte_checkpoint_gcs.store import GCSStore

from flyte_checkpoint.uri import join

from .helpers import RANGE, RecordingSession, make_store
from .server import GCSServer


def media_gets(session: RecordingSession) -> list:
    return session.find("GET", "alt=media")


def test_large_object_is_read_in_ordered_parallel_ranges_pinned_to_one_generation(
    store: GCSStore, session: RecordingSession, gcs_root: str
) -> None:
    uri = join(gcs_root, "big")
    data = os.urandom(10 * RANGE + 17)
    store.write_bytes(uri, data)
    session.calls.clear()
    out = bytearray()
    with store.open_read(uri) as r:
        while piece := r.read(100_000):
            out += piece
    assert bytes(out) == data
    gets = media_gets(session)
    assert sorted(c.headers["Range"] for c in gets) == sorted(
        f"bytes={i * RANGE}-{min((i + 1) * RANGE, len(data)) - 1}" for i in range(11)
    )
    assert all("generation=" in c.url for c in gets), "every range is pinned to one generation"
    assert len(session.calls) == 1 + 11, "one metadata request, then the ranges: nothing else"


def test_small_object_is_one_metadata_request_and_one_get(
    store: GCSStore, session: RecordingSession, gcs_root: str
) -> None:
    uri = join(gcs_root, "small")
    store.write_bytes(uri, b"x" * 1000)
    session.calls.clear()
    with store.open_read(uri) as r:
        assert r.read() == b"x" * 1000
    assert [c.method for c in session.calls] == ["GET", "GET"] and len(media_gets(session)) == 1


def test_ranges_run_on_the_stores_pool_with_its_thread_names(gcs_server: GCSServer, gcs_root: str) -> None:
    names: set[str] = set()

    class NamingSession(RecordingSession):
        def request(self, method, url, *args, **kwargs):  # type: ignore[no-untyped-def]
            if "alt=media" in url:
                names.add(threading.current_thread().name)
            return super().request(method, url, *args, **kwargs)

    store = make_store(gcs_server.endpoint, session=NamingSession(), read_concurrency=3)
    uri = join(gcs_root, "pooled")
    store.write_bytes(uri, os.urandom(6 * RANGE))
    assert store.read_bytes(uri)
    assert names and all(n.startswith("flyte-checkpoint-gcs-") for n in names), names
    assert store.pool.workers == 1 + 3
    store.close()


def test_read_n_and_read_all_mix(store: GCSStore, gcs_root: str) -> None:
    uri = join(gcs_root, "mix")
    data = os.urandom(3 * RANGE + 5)
    store.write_bytes(uri, data)
    with store.open_read(uri) as r:
        head = r.read(10)
        rest = r.read()
        assert r.read() == b"" and r.read(5) == b""
    assert head + rest == data


def test_download_file(store: GCSStore, gcs_root: str, tmp_path: Path) -> None:
    uri = join(gcs_root, "dl")
    data = os.urandom(5 * RANGE + 3)
    store.write_bytes(uri, data)
    store.download_file(uri, tmp_path / "out.bin")
    assert (tmp_path / "out.bin").read_bytes() == data
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_read_range_edges(store: GCSStore, gcs_root: str) -> None:
    uri = join(gcs_root, "ranges")
    data = os.urandom(2 * RANGE)
    store.write_bytes(uri, data)
    assert store.read_range(uri, RANGE - 3, 6) == data[RANGE - 3 : RANGE + 3]
    assert store.read_range(uri, len(data) - 4, 100) == data[-4:]
    assert store.read_range(uri, len(data) + 10, 5) == b""
    assert store.read_range(uri, 0, 0) == b""


def test_reader_is_a_binary_file_object(store: GCSStore, gcs_root: str) -> None:
    uri = join(gcs_root, "fileobj")
    store.write_bytes(uri, b"abc")
    r = store.open_read(uri)
    assert r.readable() and not r.seekable()
    buf = bytearray(8)
    assert r.readinto(buf) == 3 and bytes(buf[:3]) == b"abc"
    r.close()
    assert r.closed
    with pytest.raises(ValueError):
        r.read(1)


def test_a_store_sends_only_the_requests_it_asks_for(
    store: GCSStore, session: RecordingSession, gcs_root: str
) -> None:
    """google-cloud-storage >= 3.17 fetches a bucket's metadata from a background thread (for
    OpenTelemetry attributes): the store turns that off, so its session sends exactly the
    requests of its operations. Every thread started meanwhile is joined before counting."""
    before = set(threading.enumerate())
    uri = join(gcs_root, "counted")
    assert store.stat(uri) is None  # the object's metadata, then the bucket probe (a one-name list)
    store.write_bytes(uri, b"small")  # one multipart upload
    assert store.read_bytes(uri) == b"small"  # the object's metadata, one media GET
    for thread in set(threading.enumerate()) - before:
        if not thread.name.startswith("flyte-checkpoint-gcs-"):  # pool threads live on
            thread.join(timeout=60)  # a hang guard only
    paths = [f"{c.method} {c.url.split('/storage/v1', 1)[-1].split('?')[0]}" for c in session.calls]
    name = uri.split("/", 3)[3].replace("/", "%2F")
    bucket = uri.split("/")[2]
    assert paths == [
        f"GET /b/{bucket}/o/{name}",
        f"GET /b/{bucket}/o",
        f"POST /b/{bucket}/o",
        f"GET /b/{bucket}/o/{name}",
        f"GET /b/{bucket}/o/{name}",
    ], paths
