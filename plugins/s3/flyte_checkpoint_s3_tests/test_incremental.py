"""Incremental folder saves on S3 (issue 18): unchanged files become ``UploadPartCopy`` parts;
the bytes that go up are counted at a proxy in front of moto's server (the core's
``IncrementalSuite``)."""

from __future__ import annotations

import base64
import logging
import random
import re
import uuid
import zlib
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.format import index as ix
from flyte_checkpoint.storage.registry import store_for
from flyte_checkpoint.testing import IncrementalSuite, StoreRecipe

from .helpers import BUCKET, fault_store, key_of
from .server import S3Server

pytestmark = pytest.mark.integration

MiB = 1024 * 1024


class TestS3Incremental(IncrementalSuite):
    """Parts of 8 MiB, files of 6 MiB (above S3's 5 MiB minimum part: one copy each at least).
    moto ignores ``CopySourceIfMatch``: a replaced source is caught by the writer's check of
    every source's ETag before ``CompleteMultipartUpload`` (so no server detail in the error)."""

    file_size = 6 * MiB
    part_size = "8MiB"

    @pytest.fixture
    def store_recipe(self, s3_server: S3Server, raw_s3: Any) -> StoreRecipe:
        return StoreRecipe(s3_server.endpoint, fault_store)

    @pytest.fixture
    def store_root(self, s3_env: dict[str, str], raw_s3: Any) -> str:
        return f"s3://{BUCKET}/{uuid.uuid4().hex}"

    def pieces_left(self, server: Any, uri: str) -> list[Any]:
        return (
            server.client.get().list_multipart_uploads(Bucket=BUCKET, Prefix=key_of(uri)).get("Uploads", [])
        )


# -- copies checked by S3's checksum of each copied part (issue 32, item 5) ------------------


class PartChecksums:
    """Makes a store's client see ``UploadPartCopy`` answered as S3 answers it for an upload
    created with ``ChecksumAlgorithm=CRC32`` (the store's default): with the CRC-32 of the
    copied part in ``CopyPartResult`` (AWS's API reference, CopyPartResult). moto 5.2 gives none,
    so this computes it from the source's range, read by another client (not the store's).
    Also records the ranges the store copied and the ranges it read with GetObject."""

    def __init__(self, client: Any, raw_s3: Any, answer: bool = True) -> None:
        self.client, self.raw_s3, self.answer = client, raw_s3, answer
        self.copied: list[tuple[str, int, int]] = []  # (key, first byte, last byte)
        self.read: list[tuple[str, int, int]] = []
        self.answered = 0

    def __enter__(self) -> PartChecksums:
        events = self.client.meta.events
        events.register("before-call.s3.UploadPartCopy", self._before_copy)
        events.register("after-call.s3.UploadPartCopy", self._after_copy)
        events.register("before-call.s3.GetObject", self._before_get)
        return self

    def __exit__(self, *exc: object) -> None:
        events = self.client.meta.events
        events.unregister("before-call.s3.UploadPartCopy", self._before_copy)
        events.unregister("after-call.s3.UploadPartCopy", self._after_copy)
        events.unregister("before-call.s3.GetObject", self._before_get)

    def _before_copy(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        headers = params["headers"]
        bucket, key = unquote(headers["x-amz-copy-source"]).lstrip("/").split("/", 1)
        first, last = (int(x) for x in headers["x-amz-copy-source-range"].split("=")[1].split("-"))
        context["fcp-copied"] = (bucket, key, first, last)
        self.copied.append((key, first, last))

    def _after_copy(self, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        result = parsed.get("CopyPartResult")
        if not self.answer or result is None or "ChecksumCRC32" in result:
            return
        bucket, key, first, last = context["fcp-copied"]
        body = self.raw_s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={first}-{last}")["Body"].read()
        result["ChecksumCRC32"] = base64.b64encode(zlib.crc32(body).to_bytes(4, "big")).decode()
        self.answered += 1

    def _before_get(self, params: dict[str, Any], **_: Any) -> None:
        found = re.match(r"bytes=(\d+)-(\d+)", params["headers"].get("Range", ""))
        key = params["context"]["input_params"]["Key"]
        if found:
            self.read.append((key, int(found.group(1)), int(found.group(2))))

    def copied_ranges_read(self) -> list[tuple[str, int, int]]:
        """Ranges read with GetObject that lie inside a range the server copied."""
        return [
            (key, a, b)
            for key, a, b in self.read
            if any(key == k and first <= a and b <= last for k, first, last in self.copied)
        ]


def _tree(root: Path) -> Path:
    root.mkdir()
    for i in range(3):
        (root / f"s{i}.bin").write_bytes(random.Random(i).randbytes(6 * MiB + i))
    (root / "state.json").write_text('{"step": 1}')
    return root


def _restored(dest: str, tmp_path: Path) -> dict[str, bytes]:
    with fc.Checkpoint(str(tmp_path / uuid.uuid4().hex), dest) as cp:
        path = cp.load_sync()
        assert path is not None
        return {p.name: p.read_bytes() for p in path.iterdir()}


@pytest.mark.parametrize("answer", [True, False], ids=["S3's checksum", "none (moto)"])
def test_copies_are_checked_by_s3s_checksum_of_each_copied_part_with_nothing_read(
    s3_env, raw_s3, tmp_path, answer
):
    """Where S3 answers each UploadPartCopy with the part's CRC-32 (an upload that names CRC32,
    the default), that is what checks the copy against the base's index: no range the server
    copied is read back (nothing more on the wire). A server that gives none (moto) has each
    copied part read back from the source instead."""
    dest = f"s3://{BUCKET}/{uuid.uuid4().hex}/ckpt.tgz"
    src = _tree(tmp_path / "src")
    fc.Checkpoint(dest).save_sync(str(src))
    (src / "state.json").write_text('{"step": 2}')
    with PartChecksums(store_for(dest).client.get(), raw_s3, answer) as seen:
        fc.Checkpoint(dest).save_sync(str(src))
    assert len(seen.copied) >= 1 and (seen.answered == len(seen.copied)) == answer
    assert any(key == key_of(dest) for key, _, _ in seen.read), "reads are seen (the index's at least)"
    if answer:
        assert seen.copied_ranges_read() == [], "a range S3 copied and checked was read back"
    else:
        assert seen.copied_ranges_read(), "nothing checked the copied parts"
    assert _restored(dest, tmp_path) == {p.name: p.read_bytes() for p in src.iterdir()}


def test_a_damaged_base_is_caught_by_s3s_checksum_of_the_copied_part(s3_env, raw_s3, tmp_path, caplog):
    """One byte flipped in the base's members of an unchanged file: S3's CRC-32 of the copied part
    differs from the one the index records; the writer reads that copy's members to find the
    damaged one, the save warns and sends that file, and the object loads."""
    dest = f"s3://{BUCKET}/{uuid.uuid4().hex}/ckpt.tgz"
    src = _tree(tmp_path / "src")
    fc.Checkpoint(dest).save_sync(str(src))
    store = store_for(dest)
    index = ix.read_index(store, dest)
    assert index is not None
    member = index.members[index.files["s1.bin"].first]
    raw = bytearray(store.read_bytes(dest))
    raw[member.coff + member.clen // 2] ^= 0x10
    store.write_bytes(dest, bytes(raw))
    with (
        PartChecksums(store.client.get(), raw_s3) as seen,
        caplog.at_level(logging.WARNING, "flyte_checkpoint"),
    ):
        fc.Checkpoint(dest).save_sync(str(src))
    assert seen.answered >= 1
    assert f"the previous checkpoint {dest} is damaged: the stored bytes of s1.bin are not" in caplog.text
    assert _restored(dest, tmp_path) == {p.name: p.read_bytes() for p in src.iterdir()}
    uploads = raw_s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
    assert key_of(dest) not in {u["Key"] for u in uploads}, "the refused try's upload was aborted"
