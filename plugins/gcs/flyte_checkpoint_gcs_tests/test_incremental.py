"""Incremental folder saves on GCS (issue 18).

GCS copies only whole objects on the server (``compose``'s sources and ``rewrite``'s source have
no byte range), so a range of the previous checkpoint could become a piece of the new one only
after a download of it: the store declares no ``copy_limits`` and a save over an indexed object
sends every file, correctly (see the README's "Incremental saves"). The bytes that go up are
counted at a proxy in front of the emulator.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from flyte_checkpoint_gcs.store import GCSStore

import flyte_checkpoint as fc
from flyte_checkpoint.storage.registry import store_for
from flyte_checkpoint.testing import FaultProxy

from .helpers import BUCKET
from .server import GCSServer

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
FILES = 4
SIZE = MiB  # above the planner's smallest copyable file (64 KiB): each would be a copy


def make_tree(root: Path) -> Path:
    root.mkdir(parents=True)
    for i in range(FILES):
        (root / f"s{i}.bin").write_bytes(random.Random(i).randbytes(SIZE + i))
    (root / "state.json").write_text('{"step": 1}')
    return root


def tree_of(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture
def proxied(gcs_server: GCSServer) -> Iterator[tuple[FaultProxy, str]]:
    """A fresh prefix whose URIs go through a FaultProxy in front of the emulator."""
    prefix = f"gs://{BUCKET}/{uuid.uuid4().hex}/"
    with FaultProxy(gcs_server.endpoint) as proxy:
        fc.configure_store(prefix, endpoint_url=proxy.url)
        try:
            yield proxy, prefix
        finally:
            fc.configure_store(prefix)


def sent(proxy: FaultProxy) -> int:
    return sum(r.up for r in proxy.records)


def save(proxy: FaultProxy, dest: str, src: Path, prev: str | None = None) -> int:
    before = sent(proxy)
    with fc.Checkpoint(dest, prev) as cp:
        cp.save_sync(str(src))
    return sent(proxy) - before


def test_the_store_declares_no_server_side_range_copy(gcs_server):
    store = store_for(f"gs://{BUCKET}/any")
    assert isinstance(store, GCSStore)
    assert store.copy_limits is None, "GCS copies whole objects only: a range copy would download"


@pytest.mark.parametrize("base", ["destination", "previous attempt"])
def test_a_save_over_an_indexed_object_sends_every_file(proxied, tmp_path, caplog, base):
    proxy, prefix = proxied
    src = make_tree(tmp_path / "src")
    total = sum(p.stat().st_size for p in src.iterdir())
    first = f"{prefix}attempt-0/ckpt"
    dest = first if base == "destination" else f"{prefix}attempt-1/ckpt"
    assert save(proxy, first, src) >= total
    (src / "s2.bin").write_bytes(random.Random(99).randbytes(SIZE + 2))

    with caplog.at_level(logging.DEBUG, logger="flyte_checkpoint"):
        again = save(proxy, dest, src, prev=first if base != "destination" else None)

    assert again >= total, f"every file goes up again ({again} of {total} bytes sent)"
    assert "cannot copy ranges on the server: the save sends every file" in caplog.text
    with fc.Checkpoint(str(tmp_path / "restore"), dest) as cp:
        assert tree_of(cp.load_sync()) == tree_of(src)
    expected = sorted({first, dest})
    left = [u for u in store_for(prefix).list(prefix) if ".fcp-history/" not in u]  # docs/history.md
    assert left == expected, "no temporary object is left"


def test_a_save_over_a_damaged_object_sends_every_file_and_loads(proxied, tmp_path):
    """Issue 32, item 5, on GCS: a byte flipped in the members of an unchanged file of the
    previous object cannot reach the next object, which copies nothing on GCS: the save sends
    every file (a full save) and the object loads whole."""
    from flyte_checkpoint.format import index as ix

    proxy, prefix = proxied
    src = make_tree(tmp_path / "src")
    dest = f"{prefix}ckpt"
    save(proxy, dest, src)
    store = store_for(dest)
    index = ix.read_index(store, dest)
    assert index is not None and index.checked
    member = index.members[index.files["s1.bin"].first]
    raw = bytearray(store.read_bytes(dest))
    raw[member.coff + member.clen // 2] ^= 0x10
    store.write_bytes(dest, bytes(raw))
    (src / "state.json").write_text('{"step": 2}')
    total = sum(p.stat().st_size for p in src.iterdir())
    assert save(proxy, dest, src) >= total
    with fc.Checkpoint(str(tmp_path / "restore"), dest) as cp:
        assert tree_of(cp.load_sync()) == tree_of(src)
