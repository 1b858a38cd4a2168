"""Incremental folder saves on Azure (issue 18): unchanged files become Put Block From URL
blocks; the bytes that go up are counted at a proxy in front of Azurite."""

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
from flyte_checkpoint_azure.uris import parse

import flyte_checkpoint as fc
from flyte_checkpoint.errors import CopySourceChangedError, TransientError
from flyte_checkpoint.retry import RetryPolicy
from flyte_checkpoint.storage.registry import store_for
from flyte_checkpoint.testing import FaultProxy
from flyte_checkpoint.testing.faultproxy import HANG_GUARD

from .helpers import CONTAINER
from .server import AzuriteServer

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
FILES = 5
SIZE = 3 * MiB  # several blocks of the test's 1 MiB part size each
#: Request lines and headers, the index and the small files: no file's data.
OVERHEAD = 256 * 1024


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
def proxied(azure_env: AzuriteServer) -> Iterator[tuple[FaultProxy, str]]:
    """A fresh prefix whose URIs go through a FaultProxy in front of Azurite (configure_store;
    the connection string of ``azure_env`` gives the account and its key)."""
    prefix = f"az://{CONTAINER}/{uuid.uuid4().hex}/"
    with FaultProxy(azure_env.blob_endpoint) as proxy:
        fc.configure_store(prefix, endpoint_url=proxy.url, part_size="1MiB", max_concurrency=2)
        try:
            yield proxy, prefix
        finally:
            fc.configure_store(prefix)


def blob_of(blob_service: Any, uri: str) -> Any:
    return blob_service.get_blob_client(CONTAINER, parse(uri).key)


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


def test_incremental_saves_send_only_what_changed(proxied, tmp_path, blob_service):
    proxy, prefix = proxied
    src = make_tree(tmp_path / "src")
    dest = prefix + "ckpt.tgz"
    full = save(proxy, dest, src)
    assert full > FILES * SIZE
    unchanged = save(proxy, dest, src)
    assert unchanged < OVERHEAD, unchanged
    assert restored(dest, tmp_path) == tree_of(src)
    # Copied blocks: the object is stored without an MD5 (it cannot be combined from blocks).
    assert blob_of(blob_service, dest).get_blob_properties().content_settings.content_md5 is None

    (src / "shards" / "s2.bin").write_bytes(_blob(SIZE + 2, seed=42))  # one file changed
    one = save(proxy, dest, src)
    assert SIZE < one < SIZE + OVERHEAD, one
    assert restored(dest, tmp_path) == tree_of(src)

    (src / "shards" / "s4.bin").rename(src / "shards" / "moved.bin")  # renamed, and one removed
    (src / "shards" / "s0.bin").unlink()
    moved = save(proxy, dest, src)
    assert moved < OVERHEAD, moved  # no minimum block on Azure: nothing is read back and sent
    assert restored(dest, tmp_path) == tree_of(src)

    prev, nxt = dest, prefix + "attempt-1.tgz"  # an attempt's first save, from the previous attempt's
    first = save(proxy, nxt, src, prev)
    assert first < OVERHEAD, first
    assert restored(nxt, tmp_path) == tree_of(src)
    assert blob_of(blob_service, dest).get_block_list("uncommitted")[1] == []


def test_a_source_replaced_mid_save_fails_and_the_retry_copies_from_the_new_one(
    proxied, tmp_path, blob_service
):
    """The object copied from is replaced once the save has planned against it: Azure refuses
    the copy (x-ms-source-if-match, 412), the try fails with CopySourceChangedError and commits
    nothing; with retries, the next try plans against the new object."""
    proxy, prefix = proxied
    src = make_tree(tmp_path / "src")
    dest = prefix + "ckpt.tgz"
    save(proxy, dest, src)
    bodies = []
    for seed in (7, 8):
        other = make_tree(tmp_path / f"other-{seed}")
        (other / "shards" / "s1.bin").write_bytes(_blob(SIZE + 1, seed=seed))
        save(proxy, prefix + f"other-{seed}.tgz", other)
        bodies.append(blob_of(blob_service, prefix + f"other-{seed}.tgz").download_blob().readall())

    store = store_for(dest)
    real_copy_source = store.copy_source
    looks: list[str] = []
    replace_with: list[bytes] = []

    def replaced_after_planning(uri: str):
        found = real_copy_source(uri)
        looks.append(uri)
        if len(looks) == 2 and replace_with:  # the planner's second look, once it read the index
            blob_of(blob_service, dest).upload_blob(replace_with.pop(), overwrite=True)
        return found  # as if the replacement came a moment later

    store.copy_source = replaced_after_planning  # type: ignore[method-assign]
    try:
        replace_with.append(bodies[0])
        with pytest.raises(TransientError, match="replaced or removed while a save copied") as info:
            save(proxy, dest, src, retry=RetryPolicy(attempts=1))
        assert isinstance(info.value.__cause__, CopySourceChangedError)  # the retry layer's wrapping
        assert "Azure answered 412" in str(info.value.__cause__)  # the service refused, not a check of ours
        assert blob_of(blob_service, dest).download_blob().readall() == bodies[0]
        looks.clear()
        replace_with.append(bodies[1])
        save(proxy, dest, src)  # default retries: the second try copies from what is there now
        assert len(looks) >= 4, "the save was tried again, planning anew"
    finally:
        del store.copy_source
    assert restored(dest, tmp_path) == tree_of(src)
    assert blob_of(blob_service, dest).get_block_list("uncommitted")[1] == []  # the commit dropped them


CHILD = r"""
import sys
import flyte_checkpoint as fc
endpoint, prefix, dest, src = sys.argv[1:5]
fc.configure_store(prefix, endpoint_url=endpoint, part_size="8MiB", max_concurrency=1, request_attempts=1)
fc.Checkpoint(dest).save_sync(src)
print("DONE", flush=True)
"""


def test_killed_incremental_save_leaves_the_previous_object_whole(proxied, tmp_path, blob_service):
    """A child saving incrementally (blocks copied, and one changed file being staged) is
    SIGKILLed once the upload stalls at the proxy: the previous object stays, byte for byte,
    and nothing else is listed. The blocks it staged stay uncommitted (invisible; Azure cannot
    delete them alone) until the blob's next commit discards them (as the test above shows)."""
    proxy, prefix = proxied
    src = make_tree(tmp_path / "src")
    dest = prefix + "ckpt.tgz"
    save(proxy, dest, src)
    before = blob_of(blob_service, dest).download_blob().readall()
    (src / "shards" / "s3.bin").write_bytes(_blob(SIZE + 3, seed=33))
    proxy.cut("up", SIZE // 2, action="stall")  # inside the changed file's block (counted from now)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, proxy.url, prefix, dest, str(src)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
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
    assert blob_of(blob_service, dest).download_blob().readall() == before
    listed = blob_service.get_container_client(CONTAINER).list_blobs(parse(prefix, want_key=False).key)
    assert [b.name for b in listed] == [parse(dest).key]
