"""Reads: parallel ranged GETs pinned to one generation, streaming GETs, integrity."""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from flyte_checkpoint_gcs.store import GcsStore
from flyte_checkpoint_gcs.uris import parse

from flyte_checkpoint.errors import CorruptCheckpointError
from flyte_checkpoint.uri import join

from .conftest import CHUNK
from .server import GcsEmulator
from .spy import RecordingSession

RANGE = 256 * 1024


@pytest.fixture
def session() -> RecordingSession:
    return RecordingSession()


def make_store(emu: GcsEmulator, session: RecordingSession, concurrency: int) -> GcsStore:
    return GcsStore(
        endpoint=emu.endpoint,
        anonymous=True,
        chunk_size=CHUNK,
        read_range_size=RANGE,
        read_concurrency=concurrency,
        retry_timeout=0,
        session=session,
    )


@pytest.fixture(params=[4, 1], ids=["parallel", "streamed"])
def store(
    request: pytest.FixtureRequest, gcs_emulator: GcsEmulator, session: RecordingSession
) -> Iterator[GcsStore]:
    s = make_store(gcs_emulator, session, request.param)
    yield s
    s.close()


def damage_metadata(emu: GcsEmulator, uri: str) -> None:
    """Make the emulator report a wrong CRC32C (real GCS cannot be made to; the emulator can)."""
    loc = parse(uri)
    req = urllib.request.Request(
        f"{emu.endpoint}/storage/v1/b/{loc.bucket}/o/{quote(loc.name, safe='')}",
        data=json.dumps({"crc32c": "AAAAAA=="}).encode(),
        headers={"Content-Type": "application/json"},
        method="PATCH",
    )
    urllib.request.urlopen(req, timeout=10).close()


def test_large_object_is_read_in_ordered_parallel_ranges(
    gcs_emulator: GcsEmulator, session: RecordingSession, gcs_root: str
) -> None:
    store = make_store(gcs_emulator, session, 4)
    uri = join(gcs_root, "big")
    data = os.urandom(10 * RANGE + 17)
    store.write_bytes(uri, data)
    session.calls.clear()
    out = bytearray()
    with store.open_read(uri) as r:
        while piece := r.read(100_000):
            out += piece
    assert bytes(out) == data
    gets = [c for c in session.find("GET", "alt=media")]
    assert len(gets) == 11
    assert sorted(c.headers["Range"] for c in gets) == sorted(
        f"bytes={i * RANGE}-{min((i + 1) * RANGE, len(data)) - 1}" for i in range(11)
    )
    assert all("generation=" in c.url for c in gets), "every range is pinned to one generation"


def test_small_object_is_one_streaming_get(store: GcsStore, session: RecordingSession, gcs_root: str) -> None:
    uri = join(gcs_root, "small")
    store.write_bytes(uri, b"x" * 1000)
    session.calls.clear()
    with store.open_read(uri) as r:
        assert r.read() == b"x" * 1000
    assert len(session.find("GET", "alt=media")) == 1


def test_read_n_and_read_all_mix(store: GcsStore, gcs_root: str) -> None:
    uri = join(gcs_root, "mix")
    data = os.urandom(3 * RANGE + 5)
    store.write_bytes(uri, data)
    with store.open_read(uri) as r:
        head = r.read(10)
        rest = r.read()
        assert r.read() == b""
    assert head + rest == data


def test_damaged_object_raises_on_read(store: GcsStore, gcs_emulator: GcsEmulator, gcs_root: str) -> None:
    uri = join(gcs_root, "damaged")
    store.write_bytes(uri, os.urandom(3 * RANGE + 1))
    damage_metadata(gcs_emulator, uri)
    with pytest.raises(CorruptCheckpointError, match="is damaged") as info, store.open_read(uri) as r:
        r.read()
    assert uri in str(info.value)


def test_damaged_object_does_not_replace_the_download_target(
    store: GcsStore, gcs_emulator: GcsEmulator, gcs_root: str, tmp_path: Path
) -> None:
    uri = join(gcs_root, "damaged-file")
    store.write_bytes(uri, os.urandom(2 * RANGE + 9))
    damage_metadata(gcs_emulator, uri)
    target = tmp_path / "target.bin"
    target.write_bytes(b"previous")
    with pytest.raises(CorruptCheckpointError):
        store.download_file(uri, target)
    assert target.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["target.bin"], "no partial file left behind"


def test_download_file(store: GcsStore, gcs_root: str, tmp_path: Path) -> None:
    uri = join(gcs_root, "dl")
    data = os.urandom(5 * RANGE + 3)
    store.write_bytes(uri, data)
    store.download_file(uri, tmp_path / "out.bin")
    assert (tmp_path / "out.bin").read_bytes() == data


def test_read_range_edges(store: GcsStore, gcs_root: str) -> None:
    uri = join(gcs_root, "ranges")
    data = os.urandom(2 * RANGE)
    store.write_bytes(uri, data)
    assert store.read_range(uri, RANGE - 3, 6) == data[RANGE - 3 : RANGE + 3]
    assert store.read_range(uri, len(data) - 4, 100) == data[-4:]
    assert store.read_range(uri, len(data) + 10, 5) == b""
    assert store.read_range(uri, 0, 0) == b""


def test_reader_is_a_binary_file_object(store: GcsStore, gcs_root: str) -> None:
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
