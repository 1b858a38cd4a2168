"""``load(fallback=True)`` (issue 37) beyond the backends' suite: a payload damaged in place (bit
rot: same size, same time) is caught by its manifest's digest; a damaged or lost manifest; a
failure that says nothing about the checkpoint (denied, network) raises at once."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import CheckpointPermissionError, CorruptCheckpointError, TransientError
from flyte_checkpoint.history.manifest import manifest_uri
from flyte_checkpoint.storage.registry import store_for
from flyte_checkpoint.storage.stores import memory
from flyte_checkpoint.util.retry import RetryPolicy


def _saves(dest: str, n: int = 3) -> fc.Checkpoint:
    cp = fc.Checkpoint(dest, keeps_generations=True)
    for step in range(n):
        cp.save_sync(f"payload {step}".encode(), step=step)
    return cp


def _rot_memory(uri: str) -> None:
    """Flip a byte of a memory object in place: its size and listed time stay."""
    with memory._lock.get():
        data = bytearray(memory._objects[uri])
        data[3] ^= 0x20
        memory._objects[uri] = bytes(data)


def _rot_file(path: str) -> None:
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(3)
        b = f.read(1)
        f.seek(3)
        f.write(bytes([b[0] ^ 0x20]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.fixture
def keep():
    kept: list[fc.Checkpoint] = []
    yield kept
    for cp in kept:
        cp.close()


def _load(keep, tmp_path: Path, src: str, **kw) -> Path | None:
    cp = fc.Checkpoint(str(tmp_path / "next"), src, retry=RetryPolicy(attempts=2, base_delay=0))
    keep.append(cp)
    return cp.load_sync(**kw)


@pytest.mark.parametrize("where", ["memory", "file"])
def test_a_payload_rotten_in_place_is_caught_by_its_digest(where, tmp_path, keep, caplog):
    dest = (
        f"memory://fallback-{os.urandom(4).hex()}/0/ckpt" if where == "memory" else str(tmp_path / "s/0/ckpt")
    )
    _saves(dest)
    (_rot_memory if where == "memory" else _rot_file)(dest)
    assert fc.history(dest)[0].has_manifest  # the listing cannot tell: same size, same time
    assert _load(keep, tmp_path, dest).read_bytes() == b"payLoad 2"  # strict: loaded as it is
    caplog.set_level(logging.WARNING, logger="flyte_checkpoint")
    assert _load(keep, tmp_path, dest, fallback=True).read_bytes() == b"payload 1"
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("skipping" in w and "digest" in w and "0/ckpt" in w for w in warned), warned


def test_every_checkpoint_damaged_raises_naming_each(tmp_path, keep):
    dest = f"memory://fallback-{os.urandom(4).hex()}/0/ckpt"
    _saves(dest, 2)
    store = store_for(dest)
    _rot_memory(dest)
    _rot_memory(dest + ".fcp-history/g00000000.obj")
    with pytest.raises(CorruptCheckpointError, match="tried 2") as caught:
        _load(keep, tmp_path, dest, fallback=True)
    assert "g00000000.obj" in str(caught.value) and store.stat(dest)


def test_a_damaged_manifest_leaves_its_object_listed_and_loadable(tmp_path, keep):
    dest = f"memory://fallback-{os.urandom(4).hex()}/0/ckpt"
    _saves(dest, 2)
    store = store_for(dest)
    store.write_bytes(manifest_uri(dest, 0), b"not json")  # the kept generation's manifest
    store.delete(dest)  # and the newest is gone
    entries = fc.history(dest)
    assert [(e.uri.endswith("g00000000.obj"), e.has_manifest) for e in entries] == [(True, False)]
    assert _load(keep, tmp_path, dest, fallback=True).read_bytes() == b"payload 0"


def test_members_and_fallback_do_not_go_together(tmp_path):
    cp = fc.Checkpoint(str(tmp_path / "d"), str(tmp_path / "s"))
    with pytest.raises(ValueError, match="no members"):
        cp.load_sync(members=["a"], fallback=True)


@pytest.mark.parametrize("error", [CheckpointPermissionError, TransientError])
def test_a_failure_that_is_not_missing_or_damaged_raises(error, tmp_path, keep, monkeypatch):
    dest = f"memory://fallback-{os.urandom(4).hex()}/0/ckpt"
    _saves(dest)
    real = memory.MemoryStore.pin

    def refuse(self, uri):
        if uri == dest:
            raise error(f"refused: {uri}")
        return real(self, uri)

    monkeypatch.setattr(memory.MemoryStore, "pin", refuse)
    with pytest.raises(error):
        _load(keep, tmp_path, dest, fallback=True)


def test_a_listing_that_fails_raises(tmp_path, keep, monkeypatch):
    dest = f"memory://fallback-{os.urandom(4).hex()}/0/ckpt"
    _saves(dest)

    def refuse(self, prefix, *, recursive=True):
        raise CheckpointPermissionError(f"no listing of {prefix}")

    monkeypatch.setattr(memory.MemoryStore, "list_details", refuse)
    with pytest.raises(CheckpointPermissionError):
        _load(keep, tmp_path, dest, fallback=True)


def test_a_save_after_a_fallback_load_records_what_it_was_made_from_with_its_digest(tmp_path, keep):
    """made_from names the object a fallback load took and made_from_digest, from its
    manifest, its digest (``crc32:<hex>``); after a plain load (no manifest read) the URI alone."""
    import zlib

    from flyte_checkpoint.history.manifest import generation_uri

    src = str(tmp_path / "s/0/ckpt")
    _saves(src)
    _rot_file(src)
    after = fc.Checkpoint(str(tmp_path / "s/1/ckpt"), src)
    keep.append(after)
    assert after.load_sync(fallback=True).read_bytes() == b"payload 1"
    after.save_sync(b"payload 3", step=3)
    made = fc.history(after.remote_destination)[0].manifest
    assert made.made_from == generation_uri(src, 1)
    assert made.made_from_digest == f"crc32:{zlib.crc32(b'payload 1'):08x}"
    plain = fc.Checkpoint(str(tmp_path / "s/2/ckpt"), after.remote_destination)
    keep.append(plain)
    assert plain.load_sync().read_bytes() == b"payload 3"
    plain.save_sync(b"payload 4", step=4)
    plain_made = fc.history(plain.remote_destination)[0].manifest
    assert (plain_made.made_from, plain_made.made_from_digest) == (after.remote_destination, None)
