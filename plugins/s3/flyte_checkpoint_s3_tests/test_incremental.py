"""Incremental folder saves on S3 (issue 18): unchanged files become ``UploadPartCopy`` parts;
the bytes that go up are counted at a proxy in front of moto's server."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import CopySourceChangedError, TransientError
from flyte_checkpoint.retry import RetryPolicy
from flyte_checkpoint.storage.registry import store_for
from flyte_checkpoint.testing import FaultProxy
from flyte_checkpoint.testing.faultproxy import HANG_GUARD

from .helpers import ACCESS_KEY, BUCKET, SECRET_KEY, key_of

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
FILES = 6
SIZE = 6 * MiB  # each file is longer than S3's 5 MiB minimum part: one copy each at least


def _blob(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def make_tree(root: Path) -> Path:
    (root / "shards").mkdir(parents=True)
    for i in range(FILES):
        (root / "shards" / f"s{i}.bin").write_bytes(_blob(SIZE + i, seed=i))
    (root / "state.json").write_text('{"step": 1}')
    return root


def tree_of(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture
def proxied(s3_env: dict[str, str], raw_s3: Any) -> Iterator[tuple[FaultProxy, str]]:
    """A fresh prefix whose URIs go through a FaultProxy in front of moto (configure_store)."""
    prefix = f"s3://{BUCKET}/{uuid.uuid4().hex}/"
    with FaultProxy(s3_env["AWS_ENDPOINT_URL_S3"]) as proxy:
        fc.configure_store(prefix, endpoint_url=proxy.url, part_size="8MiB", max_concurrency=2)
        try:
            yield proxy, prefix
        finally:
            fc.configure_store(prefix)


def sent(proxy: FaultProxy) -> int:
    return sum(r.up for r in proxy.records)


def save(proxy: FaultProxy, dest: str, src: Path, prev: str | None = None, **kw: Any) -> int:
    before = sent(proxy)
    with fc.Checkpoint(dest, prev, **kw) as cp:
        cp.save_sync(str(src))
    return sent(proxy) - before


def restored(dest: str, tmp_path: Path) -> dict[str, bytes]:
    with fc.Checkpoint(str(tmp_path / f"n-{uuid.uuid4().hex}"), dest) as cp:
        return tree_of(cp.load_sync())


def test_incremental_saves_send_only_what_changed(proxied, tmp_path):
    proxy, prefix = proxied
    src = make_tree(tmp_path / "src")
    dest = prefix + "ckpt.tgz"
    full = save(proxy, dest, src)
    assert full > FILES * SIZE
    unchanged = save(proxy, dest, src)
    assert unchanged < 256 * 1024, unchanged  # requests, headers, the index: no file data
    assert restored(dest, tmp_path) == tree_of(src)

    (src / "shards" / "s2.bin").write_bytes(_blob(SIZE + 2, seed=42))  # one file changed
    one = save(proxy, dest, src)
    assert SIZE < one < SIZE + 512 * 1024, one
    assert restored(dest, tmp_path) == tree_of(src)

    (src / "shards" / "s4.bin").rename(src / "shards" / "moved.bin")  # renamed, and one removed
    (src / "shards" / "s0.bin").unlink()
    moved = save(proxy, dest, src)
    assert moved < 2 * 5 * MiB + 512 * 1024, moved  # at most a 5 MiB piece read back per new header
    assert restored(dest, tmp_path) == tree_of(src)

    prev, nxt = dest, prefix + "attempt-1.tgz"  # an attempt's first save, from the previous attempt's
    first = save(proxy, nxt, src, prev)
    assert first < 256 * 1024, first
    assert restored(nxt, tmp_path) == tree_of(src)


def test_a_source_replaced_mid_save_fails_and_the_retry_copies_from_the_new_one(proxied, tmp_path, raw_s3):
    """The object copied from is replaced once the save has planned against it: the try fails
    with CopySourceChangedError and commits nothing (moto ignores CopySourceIfMatch: the
    writer's check before the completion catches it); with retries, the next try plans
    against the new object and the result is the tree saved."""
    proxy, prefix = proxied
    src = make_tree(tmp_path / "src")
    dest = prefix + "ckpt.tgz"
    save(proxy, dest, src)
    bodies = []
    for seed in (7, 8):
        other = make_tree(tmp_path / f"other-{seed}")
        (other / "shards" / "s1.bin").write_bytes(_blob(SIZE + 1, seed=seed))
        save(proxy, prefix + f"other-{seed}.tgz", other)
        bodies.append(
            raw_s3.get_object(Bucket=BUCKET, Key=key_of(prefix + f"other-{seed}.tgz"))["Body"].read()
        )

    store = store_for(dest)
    real_copy_source = store.copy_source
    looks: list[str] = []
    replace_with: list[bytes] = []

    def replaced_after_planning(uri: str):
        found = real_copy_source(uri)
        looks.append(uri)
        if len(looks) == 2 and replace_with:  # the planner's second look, once it read the index
            raw_s3.put_object(Bucket=BUCKET, Key=key_of(dest), Body=replace_with.pop())
        return found  # as if the replacement came a moment later

    store.copy_source = replaced_after_planning  # type: ignore[method-assign]
    try:
        replace_with.append(bodies[0])
        with pytest.raises(TransientError, match="replaced or removed while a save copied") as info:
            save(proxy, dest, src, retry=RetryPolicy(attempts=1))
        assert isinstance(info.value.__cause__, CopySourceChangedError)  # the retry layer's wrapping
        assert raw_s3.get_object(Bucket=BUCKET, Key=key_of(dest))["Body"].read() == bodies[0]
        assert raw_s3.list_multipart_uploads(Bucket=BUCKET, Prefix=key_of(dest)).get("Uploads", []) == []
        looks.clear()
        replace_with.append(bodies[1])
        save(proxy, dest, src)  # default retries: the second try copies from what is there now
        assert len(looks) >= 4, "the save was tried again, planning anew"
    finally:
        del store.copy_source
    assert restored(dest, tmp_path) == tree_of(src)


CHILD = r"""
import sys
import flyte_checkpoint as fc
endpoint, prefix, dest, src = sys.argv[1:5]
fc.configure_store(prefix, endpoint_url=endpoint, part_size="8MiB", max_concurrency=1, request_attempts=1)
fc.Checkpoint(dest).save_sync(src)
print("DONE", flush=True)
"""


def test_killed_incremental_save_leaves_the_previous_object_whole(proxied, tmp_path, raw_s3, s3_env):
    """A child saving incrementally (copies, and one changed file being uploaded) is SIGKILLed
    once the upload stalls at the proxy: the previous object stays, byte for byte."""
    proxy, prefix = proxied
    src = make_tree(tmp_path / "src")
    dest = prefix + "ckpt.tgz"
    save(proxy, dest, src)
    before = raw_s3.get_object(Bucket=BUCKET, Key=key_of(dest))["Body"].read()
    (src / "shards" / "s3.bin").write_bytes(_blob(SIZE + 3, seed=33))
    proxy.cut("up", 2 * MiB, action="stall")  # inside the changed file's part (counted from now)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
    }
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, proxy.url, prefix, dest, str(src)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        proxy.wait_for(lambda: proxy.fired > 0 or child.poll() is not None, what="the upload stalled")
        assert proxy.fired, f"the child ended first: {child.communicate()[1][-2000:]!r}"
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
        child.wait(HANG_GUARD)
        child.stdout.close()  # type: ignore[union-attr]
        child.stderr.close()  # type: ignore[union-attr]
    assert raw_s3.get_object(Bucket=BUCKET, Key=key_of(dest))["Body"].read() == before
    listed = [
        o["Key"] for o in raw_s3.list_objects_v2(Bucket=BUCKET, Prefix=key_of(prefix)).get("Contents", [])
    ]
    assert listed == [key_of(dest)]
