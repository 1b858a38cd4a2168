"""MD5s: sent with every block, stored with the blob, checked on full reads."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from azure.storage.blob import ContentSettings

from flyte_checkpoint.errors import CorruptCheckpointError

from .helpers import BUCKET

pytestmark = pytest.mark.integration

BLOCK = 64 * 1024


@pytest.mark.parametrize("size", [1000, 5 * BLOCK + 3], ids=["single-put", "blocks"])
def test_blob_md5_is_stored(make_store, blob_service, prefix: str, size: int) -> None:
    store = make_store(part_size=BLOCK)
    data = os.urandom(size)
    store.write_bytes(f"az://{BUCKET}/{prefix}/obj", data)
    props = blob_service.get_blob_client(BUCKET, f"{prefix}/obj").get_blob_properties()
    assert bytes(props.content_settings.content_md5) == hashlib.md5(data).digest()


def _damage(blob_service, name: str) -> None:
    """Store a wrong MD5 with the blob: what a damaged object looks like to a reader."""
    blob = blob_service.get_blob_client(BUCKET, name)
    blob.set_http_headers(ContentSettings(content_md5=bytearray(hashlib.md5(b"other bytes").digest())))


@pytest.mark.parametrize("size", [1000, 5 * BLOCK + 3], ids=["one-range", "many-ranges"])
def test_mismatch_is_a_corruption_error(make_store, blob_service, prefix: str, size: int) -> None:
    store = make_store(part_size=BLOCK, read_range_size=BLOCK)
    uri = f"az://{BUCKET}/{prefix}/bad"
    store.write_bytes(uri, os.urandom(size))
    _damage(blob_service, f"{prefix}/bad")
    with pytest.raises(CorruptCheckpointError, match="is damaged") as info, store.open_read(uri) as r:
        r.read()
    assert f"az://{BUCKET}/{prefix}/bad" in str(info.value)


def test_download_file_of_a_damaged_blob_leaves_nothing(
    make_store, blob_service, prefix: str, tmp_path: Path
) -> None:
    store = make_store(part_size=BLOCK, read_range_size=BLOCK)
    uri = f"az://{BUCKET}/{prefix}/bad"
    store.write_bytes(uri, os.urandom(3 * BLOCK))
    _damage(blob_service, f"{prefix}/bad")
    with pytest.raises(CorruptCheckpointError):
        store.download_file(uri, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_verify_checksums_off_does_not_check(make_store, blob_service, prefix: str) -> None:
    store = make_store(part_size=BLOCK, verify_checksums=False)
    uri = f"az://{BUCKET}/{prefix}/unchecked"
    data = os.urandom(2 * BLOCK)
    store.write_bytes(uri, data)
    _damage(blob_service, f"{prefix}/unchecked")
    assert store.read_bytes(uri) == data


def test_blob_without_md5_reads_fine(make_store, blob_service, prefix: str) -> None:
    """Objects written by other tools may carry no MD5: nothing to check, no error."""
    blob_service.get_blob_client(BUCKET, f"{prefix}/foreign").upload_blob(b"from elsewhere")
    blob_service.get_blob_client(BUCKET, f"{prefix}/foreign").set_http_headers(ContentSettings())
    assert make_store().read_bytes(f"az://{BUCKET}/{prefix}/foreign") == b"from elsewhere"
