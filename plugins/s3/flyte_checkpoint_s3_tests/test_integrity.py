"""Integrity: S3 stores a full-object CRC of every object written; reads verify it."""

from __future__ import annotations

import base64
import zlib
from pathlib import Path
from typing import Any

import pytest
from flyte_checkpoint_s3.store import S3Store

from flyte_checkpoint.errors import ConfigurationError, CorruptCheckpointError
from flyte_checkpoint.storage.kit import checksums

from .conftest import require
from .helpers import BUCKET, data, key_of

PART = 64 * 1024


def _crc32_b64(payload: bytes) -> str:
    return base64.b64encode(zlib.crc32(payload).to_bytes(4, "big")).decode()


def _stored_checksum(raw_s3: Any, uri: str) -> tuple[str | None, str | None]:
    resp = raw_s3.get_object(Bucket=BUCKET, Key=key_of(uri), ChecksumMode="ENABLED")
    resp["Body"].read()
    return resp.get("ChecksumCRC32"), resp.get("ChecksumType")


# -- what is stored ---------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("size", [0, 1000, PART, 9 * PART + 17])
def test_writer_stores_the_whole_objects_crc32(
    make_s3_store: Any, raw_s3: Any, s3_root: str, size: int
) -> None:
    store = make_s3_store(part_size=PART)
    uri = f"{s3_root}/obj"
    payload = data(size)
    with store.open_write(uri) as w:
        w.write(payload)
    value, kind = _stored_checksum(raw_s3, uri)
    assert value == _crc32_b64(payload)
    assert kind in (None, "FULL_OBJECT")  # moto omits the type of a single PUT


@pytest.mark.integration
def test_upload_file_stores_the_whole_objects_crc32(
    make_s3_store: Any, raw_s3: Any, s3_root: str, tmp_path: Path
) -> None:
    store = make_s3_store(part_size=PART)
    src = tmp_path / "f.bin"
    payload = data(7 * PART + 3)
    src.write_bytes(payload)
    store.upload_file(src, f"{s3_root}/f")
    assert _stored_checksum(raw_s3, f"{s3_root}/f") == (_crc32_b64(payload), "FULL_OBJECT")


@pytest.mark.integration
@pytest.mark.parametrize("size", [1000, 9 * PART + 17])
def test_composite_type_stores_the_parts_checksums(
    make_s3_store: Any, raw_s3: Any, s3_root: str, size: int
) -> None:
    store = make_s3_store(part_size=PART, checksum_type="composite")
    uri = f"{s3_root}/composite"
    payload = data(size)
    with store.open_write(uri) as w:
        w.write(payload)
    value, kind = _stored_checksum(raw_s3, uri)
    if size <= PART:  # one PUT: its checksum is the whole object's
        assert value == _crc32_b64(payload)
        return
    assert kind == "COMPOSITE"
    parts = [payload[i : i + PART] for i in range(0, size, PART)]
    of_parts = b"".join(zlib.crc32(p).to_bytes(4, "big") for p in parts)
    assert value == f"{_crc32_b64(of_parts)}-{len(parts)}"
    assert store.read_bytes(uri) == payload


@pytest.mark.integration
def test_checksum_none_stores_none(make_s3_store: Any, raw_s3: Any, s3_root: str) -> None:
    store = make_s3_store(part_size=PART, checksum="NONE")
    store.write_bytes(f"{s3_root}/a", data(3 * PART))
    assert _stored_checksum(raw_s3, f"{s3_root}/a")[0] is None
    assert store.read_bytes(f"{s3_root}/a") == data(3 * PART)


# -- what is verified -------------------------------------------------------------------


@pytest.fixture
def corrupt_uri(raw_s3: Any, s3_root: str) -> str:
    """An object whose stored CRC32 does not match its bytes (moto stores what it is told)."""
    uri = f"{s3_root}/corrupt"
    payload = data(6 * PART)
    wrong = _crc32_b64(payload[:-1] + b"\x00")
    raw_s3.put_object(
        Bucket=BUCKET, Key=key_of(uri), Body=payload, ChecksumAlgorithm="CRC32", ChecksumCRC32=wrong
    )
    return uri


@pytest.mark.integration
@pytest.mark.parametrize("read_range_size", [PART, 64 * 1024 * 1024], ids=["ranged", "single-get"])
def test_checksum_mismatch_is_corrupt(make_s3_store: Any, corrupt_uri: str, read_range_size: int) -> None:
    store = make_s3_store(read_range_size=read_range_size)
    with pytest.raises(
        CorruptCheckpointError, match=r"is damaged: it is stored with the CRC32 .* Load it again"
    ):
        store.read_bytes(corrupt_uri)


@pytest.mark.integration
def test_corrupt_download_leaves_no_file(make_s3_store: Any, corrupt_uri: str, tmp_path: Path) -> None:
    with pytest.raises(CorruptCheckpointError):
        make_s3_store(read_range_size=PART).download_file(corrupt_uri, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration
def test_corrupt_checkpoint_load_raises(s3_env: dict[str, str], corrupt_uri: str, s3_root: str) -> None:
    from flyte_checkpoint.checkpoint import Checkpoint

    with Checkpoint(f"{s3_root}/next", corrupt_uri) as cp, pytest.raises(CorruptCheckpointError):
        cp.load_sync()


@pytest.mark.integration
def test_verification_can_be_turned_off(make_s3_store: Any, corrupt_uri: str) -> None:
    assert len(make_s3_store(verify_checksums=False).read_bytes(corrupt_uri)) == 6 * PART


@pytest.mark.integration
def test_composite_checksums_of_other_tools_load(
    s3_env: dict[str, str], make_s3_store: Any, raw_s3: Any, s3_root: str, tmp_path: Path
) -> None:
    from boto3.s3.transfer import TransferConfig

    src = tmp_path / "f.bin"
    payload = data(12 * PART + 5)
    src.write_bytes(payload)
    cfg = TransferConfig(multipart_threshold=4 * PART, multipart_chunksize=4 * PART)
    uri = f"{s3_root}/by-boto3"
    raw_s3.upload_file(str(src), BUCKET, key_of(uri), Config=cfg, ExtraArgs={"ChecksumAlgorithm": "CRC32"})
    assert _stored_checksum(raw_s3, uri)[1] == "COMPOSITE"
    assert make_s3_store(read_range_size=PART).read_bytes(uri) == payload


# -- the setting ------------------------------------------------------------------------


def test_a_checksum_that_cannot_be_computed_here_is_refused_naming_what_to_install(
    s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(checksums._cache, "CRC64NVME", None)  # as without awscrt
    with pytest.raises(ConfigurationError) as caught:
        S3Store(checksum="CRC64NVME")
    message = str(caught.value)
    assert "the CRC64NVME checksum needs awscrt" in message
    assert (
        "pip install 'flyte-checkpoint-s3[crt]', or set checksum=CRC32 (FLYTE_CHECKPOINT_S3_CHECKSUM)"
        in message
    )


def test_the_store_sends_the_kits_crc_of_its_setting(s3_env: dict[str, str]) -> None:
    assert S3Store().crc is checksums.crc("CRC32")
    assert S3Store(checksum="NONE").crc is None


@pytest.mark.integration
def test_crc32c_is_sent_stored_and_verified_with_the_kits_library(
    make_s3_store: Any, raw_s3: Any, s3_root: str
) -> None:
    """CRC32C comes from the kit (awscrt or google-crc32c), not from awscrt alone: a PUT stores
    it, a read verifies it, and a multipart upload completes with the parts' CRC32Cs combined
    (moto computes its own CRC32C of a multipart object, wrong without the crc32c package, so
    there the value sent is what is checked)."""
    algorithm = checksums.crc("CRC32C")
    require(algorithm is not None, "neither awscrt nor google-crc32c is installed")
    assert algorithm is not None
    store = make_s3_store(part_size=PART, checksum="CRC32C")
    small, large = data(1000), data(5 * PART + 3)
    store.write_bytes(f"{s3_root}/small", small)
    resp = raw_s3.get_object(Bucket=BUCKET, Key=key_of(f"{s3_root}/small"), ChecksumMode="ENABLED")
    resp["Body"].read()
    assert resp.get("ChecksumCRC32C") == algorithm.encode(algorithm.compute(small))
    assert store.read_bytes(f"{s3_root}/small") == small
    sent: list[dict[str, Any]] = []
    store.client.get().meta.events.register(
        "provide-client-params.s3.CompleteMultipartUpload", lambda params, **_: sent.append(dict(params))
    )
    store.write_bytes(f"{s3_root}/large", large)
    assert [(p["ChecksumType"], p["ChecksumCRC32C"]) for p in sent] == [
        ("FULL_OBJECT", algorithm.encode(algorithm.compute(large)))
    ]
