"""Every save writes a manifest after its commit (docs/history.md): step, metrics, size, digest."""

from __future__ import annotations

import asyncio
import os
import zlib

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.history.manifest import read_manifests, sidecar
from flyte_checkpoint.storage.registry import store_for


def _dest() -> str:
    return f"memory://history-save-{os.urandom(4).hex()}/run/2/_flytecheckpoints"


def _crc(data: bytes) -> str:
    return f"crc32:{zlib.crc32(data):08x}"


def test_every_save_form_records_step_and_metrics(tmp_path):
    dest = _dest()
    store = store_for(dest)
    folder = tmp_path / "tree"
    folder.mkdir()
    (folder / "w.bin").write_bytes(os.urandom(50_000))
    file = tmp_path / "one.bin"
    file.write_bytes(b"file bytes")
    with fc.Checkpoint(dest, keeps_generations=True) as cp:  # every save's manifest stays
        cp.save_sync(b"a", step=1, metrics={"loss": 2})
        asyncio.run(cp.save(str(file), step=2, metrics={"loss": float("nan")}))
        cp.save_background(str(folder), step=3).result()
        cp.save_sync(b"no step")

        async def background() -> None:
            handle = await cp.save_background_async(b"bg", step=5, metrics={"acc": 1.0})
            handle.result()

        asyncio.run(background())
    found = read_manifests(store, dest)
    assert [(m.generation, m.step) for m in found] == [(0, 1), (1, 2), (2, 3), (3, None), (4, 5)]
    assert found[0].metrics == {"loss": 2.0} and found[3].metrics == {}
    assert found[1].metrics["loss"] != found[1].metrics["loss"]  # NaN kept
    assert all(m.attempt == 2 and m.dest == dest for m in found)
    assert [m.object == dest for m in found] == [False] * 4 + [True]
    assert found[-1].size == 2 and found[-1].digest == _crc(b"bg")
    assert found[1].digest == _crc(b"file bytes")


def test_the_digest_is_that_of_the_object_incremental_copies_included(tmp_path):
    dest = str(tmp_path / "out" / "ckpt")
    folder = tmp_path / "tree"
    folder.mkdir()
    for i in range(4):
        (folder / f"f{i}").write_bytes(os.urandom(2_000_000))
    cp = fc.Checkpoint(dest)
    cp.save_sync(str(folder), step=1)
    (folder / "f1").write_bytes(os.urandom(2_000_000))
    cp.save_sync(str(folder), step=2)
    figures = cp._last_save[0]
    assert figures.files_copied == 3  # the case that matters: most bytes copied, not sent
    newest = read_manifests(store_for(dest), dest)[-1]
    with open(dest, "rb") as f:
        data = f.read()
    assert newest.step == 2 and newest.size == len(data) and newest.digest == _crc(data)


def test_bad_step_or_metrics_raise_before_anything_is_saved():
    dest = _dest()
    cp = fc.Checkpoint(dest)
    with pytest.raises(TypeError):
        cp.save_sync(b"x", step="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        cp.save_background(b"x", metrics={"loss": "low"})  # type: ignore[dict-item]
    assert store_for(dest).stat(dest) is None


def test_a_manifest_that_cannot_be_written_leaves_the_save_committed(caplog):
    dest = _dest()
    store = store_for(dest)
    kind = type(store)
    real, real_create = kind.write_bytes, kind.write_bytes_if_absent  # a manifest is created by the second

    def refusing(method):
        def refuse(self, uri, data):
            if uri.startswith(sidecar(dest)):
                raise fc.errors.CheckpointPermissionError(f"denied: {uri}")
            return method(self, uri, data)

        return refuse

    caplog.set_level("WARNING", logger="flyte_checkpoint")
    kind.write_bytes, kind.write_bytes_if_absent = refusing(real), refusing(real_create)
    try:
        fc.Checkpoint(dest).save_sync(b"data", step=1)
    finally:
        kind.write_bytes, kind.write_bytes_if_absent = real, real_create
    assert store.read_bytes(dest) == b"data"
    assert read_manifests(store, dest) == []
    assert any("manifest could not be written" in r.getMessage() for r in caplog.records)


def test_a_sharded_save_has_its_manifest_written_by_rank_0(tmp_path):
    from tests import shardranks as sr

    folders = sr.make_folders(tmp_path, 2)
    dest = str(tmp_path / "run" / "4" / "ckpt")
    assert sr.save_threads(dest, folders, step=7, metrics={"loss": 0.25}) == []
    found = read_manifests(store_for(dest), dest)
    assert [(m.generation, m.step, m.metrics, m.attempt) for m in found] == [(0, 7, {"loss": 0.25}, 4)]
    assert found[0].size == os.path.getsize(dest) and found[0].digest is None
    entries = fc.history(dest)
    assert [(e.step, e.has_manifest) for e in entries] == [(7, True)]


def test_without_generations_the_sidecar_holds_one_manifest_however_many_saves():
    dest = _dest()
    store = store_for(dest)
    cp = fc.Checkpoint(dest)
    for step in range(20):
        cp.save_sync(f"state {step}".encode(), step=step)
    left = [u.rsplit("/", 1)[1] for u in store.list(sidecar(dest))]
    assert left == ["g00000019.json", "summary.json"]  # older manifests named bytes since replaced
    assert [(e.step, e.generation) for e in fc.history(dest)] == [(19, 19)]
