"""Checksums on the wire: CRC32C (or MD5) sent with every write, the stored one verified by reads."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import urllib.request
from pathlib import Path
from urllib.parse import quote

import google_crc32c
import pytest
from flyte_checkpoint_gcs.store import GCSStore
from flyte_checkpoint_gcs.uris import parse

from flyte_checkpoint.errors import CorruptCheckpointError, TransientError
from flyte_checkpoint.uri import join

from .helpers import CHUNK, RANGE, Call, RecordingSession, make_store
from .server import GCSServer


def crc(data: bytes) -> str:
    return base64.b64encode(google_crc32c.Checksum(data).digest()).decode()


def md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def damage_metadata(emu: GCSServer, uri: str, field: str = "crc32c") -> None:
    """Make the emulator report a wrong checksum (real GCS cannot be made to; the emulator can)."""
    loc = parse(uri)
    req = urllib.request.Request(
        f"{emu.endpoint}/storage/v1/b/{loc.bucket}/o/{quote(loc.key, safe='')}",
        data=json.dumps({field: "AAAAAA=="}).encode(),
        headers={"Content-Type": "application/json"},
        method="PATCH",
    )
    urllib.request.urlopen(req, timeout=60).close()


@pytest.mark.parametrize("size", [3, 3 * RANGE + 1], ids=["one-range", "many-ranges"])
def test_a_damaged_stored_object_raises_on_read(
    store: GCSStore, gcs_server: GCSServer, gcs_root: str, size: int
) -> None:
    uri = join(gcs_root, "damaged")
    store.write_bytes(uri, os.urandom(size))
    damage_metadata(gcs_server, uri)
    with pytest.raises(CorruptCheckpointError, match="is damaged") as info, store.open_read(uri) as r:
        r.read()
    assert uri in str(info.value) and "CRC32C" in str(info.value)


def test_a_damaged_object_does_not_replace_the_download_target(
    store: GCSStore, gcs_server: GCSServer, gcs_root: str, tmp_path: Path
) -> None:
    uri = join(gcs_root, "damaged-file")
    store.write_bytes(uri, os.urandom(2 * RANGE + 9))
    damage_metadata(gcs_server, uri)
    target = tmp_path / "target.bin"
    target.write_bytes(b"previous")
    with pytest.raises(CorruptCheckpointError):
        store.download_file(uri, target)
    assert target.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["target.bin"], "no partial file left behind"


def test_verify_checksums_false_reads_without_checking(gcs_server: GCSServer, gcs_root: str) -> None:
    store = make_store(gcs_server.endpoint, verify_checksums=False)
    uri = join(gcs_root, "unchecked")
    data = os.urandom(2 * RANGE)
    store.write_bytes(uri, data)
    damage_metadata(gcs_server, uri)
    assert store.read_bytes(uri) == data


@pytest.mark.parametrize("size", [3 * CHUNK + 1000, 3 * CHUNK], ids=["short-last-chunk", "exact-chunks"])
def test_multi_chunk_upload_sends_the_whole_objects_crc32c_on_its_final_request(
    store: GCSStore, session: RecordingSession, gcs_root: str, size: int
) -> None:
    uri = join(gcs_root, "multi")
    data = os.urandom(size)
    store.write_bytes(uri, data)
    puts = session.chunk_puts()
    assert puts[-1].headers["X-Goog-Hash"] == f"crc32c={crc(data)}"
    assert all("X-Goog-Hash" not in p.headers for p in puts[:-1])
    blob = store.client.storage.bucket(parse(uri).bucket).get_blob(parse(uri).key)
    assert (blob.crc32c, blob.md5_hash) == (crc(data), md5(data))


def test_md5_and_none_are_sent_as_set(gcs_server: GCSServer, gcs_root: str) -> None:
    data = os.urandom(2 * CHUNK + 3)
    md5_session, none_session = RecordingSession(), RecordingSession()
    make_store(gcs_server.endpoint, checksum="md5", session=md5_session).write_bytes(
        join(gcs_root, "m"), data
    )
    make_store(gcs_server.endpoint, checksum="NONE", session=none_session).write_bytes(
        join(gcs_root, "n"), data
    )
    assert md5_session.chunk_puts()[-1].headers["X-Goog-Hash"] == f"md5={md5(data)}"
    assert all("X-Goog-Hash" not in p.headers for p in none_session.chunk_puts())


def _flip_a_byte(call: Call, data: object) -> object:
    if isinstance(data, (bytes, memoryview)) and call.method == "PUT" and len(data) > 10:
        data = bytes(data)
        return data[:5] + bytes([data[5] ^ 0xFF]) + data[6:]
    return data


def test_a_chunk_damaged_in_transit_is_transient_and_its_object_removed(
    gcs_server: GCSServer, gcs_root: str
) -> None:
    # The emulator ignores X-Goog-Hash on the final chunk (GCS refuses to finalize), so the
    # comparison with the server's description after the upload is what catches it here.
    store = make_store(gcs_server.endpoint, session=RecordingSession(fault=_flip_a_byte))
    uri = join(gcs_root, "damaged")
    with pytest.raises(TransientError, match="does not match what was written") as info:
        store.write_bytes(uri, os.urandom(2 * CHUNK + 7))
    assert "damaged in transit" in str(info.value) and "removed" in str(info.value)
    assert store.stat(uri) is None


def test_a_small_object_damaged_in_transit_is_refused_by_the_server(
    gcs_server: GCSServer, gcs_root: str
) -> None:
    def flip_in_multipart(call: Call, data: object) -> object:
        if "uploadType=multipart" in call.url and isinstance(data, bytes):
            i = data.index(b"PAYLOAD-")
            return data[:i] + b"payload-" + data[i + 8 :]
        return data

    store = make_store(gcs_server.endpoint, session=RecordingSession(fault=flip_in_multipart))
    uri = join(gcs_root, "refused")
    with pytest.raises(TransientError, match="arrived damaged") as info:
        store.write_bytes(uri, b"PAYLOAD-" + os.urandom(1000))
    assert "CRC32C" in str(info.value) and "nothing was stored" in str(info.value)
    assert store.stat(uri) is None
