"""Checkpoint history on a store (issue 37, docs/history.md): manifests written with every save,
``fc.history`` from listings and manifests alone (counted: no object read), generations kept by
a server-side copy (``BlobStore.copy_object``), and ``load(fallback=True)``.

Mix :class:`HistorySuite` into a test class with a ``store_root`` fixture (a URI prefix where
nothing exists yet, on a store the registry resolves)::

    class TestMyHistory(HistorySuite):
        @pytest.fixture
        def store_root(self):
            return "mystore://test-bucket/" + uuid.uuid4().hex
"""

from __future__ import annotations

import os
import tarfile
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ..errors import CorruptCheckpointError
from ..storage.blobstore import BlobStore


class CountingStore(BlobStore):
    """Passes every call to ``inner``, counting ``(operation, uri)``; a store for
    ``history(..., store=)`` so that a test sees exactly what a history costs."""

    def __init__(self, inner: BlobStore) -> None:
        self.inner = inner
        self.calls: Counter[tuple[str, str]] = Counter()
        self.copy_limits = inner.copy_limits
        self.supports_list_details = inner.supports_list_details  # type: ignore[misc]

    def _count(self, op: str, uri: str) -> None:
        self.calls[(op, uri)] += 1

    def ops(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for (op, _), n in self.calls.items():
            out[op] += n
        return out

    def open_read(self, uri: str) -> Any:
        self._count("open_read", uri)
        return self.inner.open_read(uri)

    def open_write(self, uri: str) -> Any:
        self._count("open_write", uri)
        return self.inner.open_write(uri)

    def stat(self, uri: str) -> int | None:
        self._count("stat", uri)
        return self.inner.stat(uri)

    def delete(self, uri: str) -> None:
        self._count("delete", uri)
        self.inner.delete(uri)

    def list(self, prefix: str) -> Any:
        self._count("list", prefix)
        return self.inner.list(prefix)

    def list_details(self, prefix: str, *, recursive: bool = True) -> Any:
        self._count("list_details", prefix)
        return self.inner.list_details(prefix, recursive=recursive)

    def read_bytes(self, uri: str) -> bytes:
        self._count("read_bytes", uri)
        return self.inner.read_bytes(uri)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        self._count("read_range", uri)
        return self.inner.read_range(uri, start, length)

    def copy_source(self, uri: str) -> Any:
        self._count("copy_source", uri)
        return self.inner.copy_source(uri)

    def pin(self, uri: str) -> Any:
        self._count("pin", uri)
        return self.inner.pin(uri)


def _tree(root: Path, seed: int, files: int = 3, size: int = 40_000) -> Path:
    import random

    rnd = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        (root / f"f{i}.bin").write_bytes(rnd.randbytes(size))
    (root / "meta.txt").write_text(f"seed {seed}\n")
    return root


class HistorySuite:
    """What issue 37's wp-history promises, on the store under test."""

    @pytest.fixture
    def run_root(self, store_root: str) -> str:
        return store_root.rstrip("/") + "/run"

    def dest(self, run_root: str, attempt: int) -> str:
        return f"{run_root}/{attempt}/_flytecheckpoints"

    def store(self, uri: str) -> BlobStore:
        from ..storage.registry import store_for

        return store_for(uri)

    # -- manifests and history ---------------------------------------------------------------

    def test_history_lists_attempts_and_generations_newest_first(self, run_root: str, tmp_path: Path) -> None:
        import flyte_checkpoint as fc

        for attempt, steps in ((0, (10, 20)), (1, (30,)), (2, (40, 50, 60))):
            cp = fc.Checkpoint(self.dest(run_root, attempt), keeps_generations=True)
            for step in steps:
                cp.save_sync(f"state at {step}".encode(), step=step, metrics={"loss": 1.0 / step})
        entries = fc.history(run_root + "/")
        assert [(e.attempt, e.generation, e.step) for e in entries] == [
            (2, 2, 60),
            (2, 1, 50),
            (2, 0, 40),
            (1, 0, 30),
            (0, 1, 20),
            (0, 0, 10),
        ]
        assert all(e.has_manifest and e.metrics == {"loss": 1.0 / e.step} for e in entries)  # type: ignore[operator]
        store = self.store(run_root)
        for e in entries:  # every entry loads, and is what its manifest says
            data = store.read_bytes(e.uri)
            assert data == f"state at {e.step}".encode()
            assert e.size == len(data) and e.digest == f"crc32:{zlib.crc32(data):08x}"
        # a checkpoint's URI: itself and its kept generations only
        one = fc.history(self.dest(run_root, 0))
        assert [e.step for e in one] == [20, 10]

    def test_history_reads_no_object_one_listing_and_one_summary_per_destination(self, run_root: str) -> None:
        import dataclasses

        import flyte_checkpoint as fc
        from flyte_checkpoint.history.listing import history
        from flyte_checkpoint.history.manifest import DELETING, read_manifest, summary_uri, write_manifest

        for attempt in range(3):
            cp = fc.Checkpoint(self.dest(run_root, attempt), keeps_generations=attempt == 2)
            for step in range(3):
                cp.save_sync(os.urandom(100 + step), step=attempt * 10 + step)
        counting = CountingStore(self.store(run_root))
        entries = history(run_root + "/", store=counting)
        # attempts 0 and 1 kept one object each (3 saves replaced it), attempt 2 all three
        assert [e.step for e in entries] == [22, 21, 20, 12, 2]
        ops = counting.ops()
        assert ops["list_details"] == 1 and ops["list"] == 0
        read = [u for (op, u) in counting.calls if op == "read_bytes"]
        assert sorted(read) == sorted(summary_uri(self.dest(run_root, a)) for a in range(3)), read
        assert set(ops) <= {"list_details", "read_bytes"}  # no stat, no open_read, no range read
        # a manifest rewritten after its summary (a clean-up marking it) is read itself
        oldest = entries[2].manifest
        assert oldest is not None
        write_manifest(self.store(run_root), dataclasses.replace(oldest, state=DELETING))
        counting = CountingStore(self.store(run_root))
        assert [e.step for e in history(run_root + "/", store=counting)] == [22, 21, 12, 2]
        read = [u for (op, u) in counting.calls if op == "read_bytes"]
        assert len(read) == 4 and oldest.uri in read
        marked = read_manifest(self.store(run_root), oldest.uri)
        assert marked is not None and marked.state == DELETING

    def test_an_object_without_a_manifest_is_listed_and_a_stale_manifest_ignored(self, run_root: str) -> None:
        import flyte_checkpoint as fc

        dest = self.dest(run_root, 0)
        store = self.store(dest)
        fc.Checkpoint(dest).save_sync(b"ours", step=1)
        store.write_bytes(dest, b"somebody else's bytes")  # Flyte's own save, say
        other = self.dest(run_root, 1)
        store.write_bytes(other, b"no manifest at all")
        entries = fc.history(run_root + "/")
        assert [(e.attempt, e.step, e.has_manifest) for e in entries] == [(1, None, False), (0, None, False)]
        assert entries[1].size == len(b"somebody else's bytes")

    def test_a_damaged_manifest_is_ignored(self, run_root: str) -> None:
        import flyte_checkpoint as fc
        from flyte_checkpoint.history.manifest import manifest_uri

        dest = self.dest(run_root, 0)
        cp = fc.Checkpoint(dest, keeps_generations=True)
        cp.save_sync(b"first", step=1)
        cp.save_sync(b"second", step=2)
        self.store(dest).write_bytes(manifest_uri(dest, 1), b'{"generation": 1, "obj')
        entries = fc.history(dest)
        assert [(e.uri == dest, e.step, e.has_manifest) for e in entries] == [
            (True, None, False),
            (False, 1, True),
        ]

    # -- generations ---------------------------------------------------------------------

    def test_generations_keep_folder_checkpoints_that_flyte_and_tar_read(
        self, run_root: str, tmp_path: Path
    ) -> None:
        import flyte_checkpoint as fc

        dest = self.dest(run_root, 0)
        cp = fc.Checkpoint(dest, keeps_generations=True)
        for seed in range(3):
            cp.save_sync(str(_tree(tmp_path / f"t{seed}", seed)), step=seed)
        entries = fc.history(dest)
        assert [e.step for e in entries] == [2, 1, 0]
        store = self.store(dest)
        for e in entries:
            local = tmp_path / f"obj-{e.step}.tgz"
            store.download_file(e.uri, local)
            with tarfile.open(local, "r:gz") as tar:  # the object's bytes: a plain gzip tar
                member = tar.extractfile("meta.txt")
                assert member is not None and member.read() == f"seed {e.step}\n".encode()
            reader = fc.Checkpoint(str(tmp_path / "unused"), e.uri)  # kept: its workspace lives with it
            restored = reader.load_sync()
            assert restored is not None and (restored / "meta.txt").read_text() == f"seed {e.step}\n"

    def test_copy_object_copies_whole_objects_and_says_when_the_source_is_absent(
        self, store_root: str
    ) -> None:
        store = self.store(store_root)
        src, dst = store_root.rstrip("/") + "/src", store_root.rstrip("/") + "/dst"
        data = os.urandom(3 * 1024 * 1024 + 17)
        store.write_bytes(src, data)
        assert store.copy_object(src, dst) == len(data)
        assert store.read_bytes(dst) == data
        assert store.copy_object(store_root.rstrip("/") + "/absent", dst + "2") is None
        assert store.stat(dst + "2") is None

    # -- fallback ------------------------------------------------------------------------

    def _three(self, run_root: str, tmp_path: Path) -> str:
        import flyte_checkpoint as fc

        dest = self.dest(run_root, 0)
        cp = fc.Checkpoint(dest, keeps_generations=True)
        for seed in range(3):
            cp.save_sync(str(_tree(tmp_path / f"t{seed}", seed)), step=seed)
        return dest

    def _load(self, src: str, tmp_path: Path, **kw: Any) -> Path | None:
        import flyte_checkpoint as fc

        cp = fc.Checkpoint(str(tmp_path / "next"), src)
        self._readers.append(cp)  # its workspace lives as long as it does
        return cp.load_sync(**kw)

    @pytest.fixture(autouse=True)
    def _keep_readers(self) -> Any:
        self._readers: list[Any] = []
        yield
        for cp in self._readers:
            cp.close()

    @pytest.mark.parametrize("damage", ["truncate", "flip"])
    def test_fallback_skips_a_damaged_newest(
        self, run_root: str, tmp_path: Path, damage: str, caplog: Any
    ) -> None:
        dest = self._three(run_root, tmp_path)
        store = self.store(dest)
        data = bytearray(store.read_bytes(dest))
        if damage == "truncate":
            data = data[: len(data) // 2]
        else:
            data[len(data) // 3] ^= 0xFF
        store.write_bytes(dest, bytes(data))
        with pytest.raises(CorruptCheckpointError):
            self._load(dest, tmp_path)  # strict by default
        caplog.set_level("WARNING", logger="flyte_checkpoint")
        path = self._load(dest, tmp_path, fallback=True)
        assert path is not None and (path / "meta.txt").read_text() == "seed 1\n"
        skipped = [r.getMessage() for r in caplog.records if "skipping" in r.getMessage()]
        assert len(skipped) == 1 and "damaged" in skipped[0]

    def test_fallback_walks_past_a_missing_newest(self, run_root: str, tmp_path: Path) -> None:
        dest = self._three(run_root, tmp_path)
        self.store(dest).delete(dest)
        assert self._load(dest, tmp_path) is None  # strict: no checkpoint
        path = self._load(dest, tmp_path, fallback=True)
        assert path is not None and (path / "meta.txt").read_text() == "seed 1\n"

    def test_fallback_goes_back_to_an_earlier_attempt(self, run_root: str, tmp_path: Path) -> None:
        import flyte_checkpoint as fc

        fc.Checkpoint(self.dest(run_root, 0)).save_sync(b"attempt 0", step=5)
        store = self.store(run_root)
        one = self.dest(run_root, 1)
        fc.Checkpoint(one).save_sync(str(_tree(tmp_path / "t", 1)), step=6)
        store.write_bytes(one, store.read_bytes(one)[:-1000])  # cut short (by a copy tool, say)
        # attempt 2 loads attempt 1's, damaged: attempt 0's is the newest that loads
        with pytest.raises(CorruptCheckpointError):
            self._load(self.dest(run_root, 1), tmp_path)
        path = self._load(self.dest(run_root, 1), tmp_path, fallback=True)
        assert path is not None and path.read_bytes() == b"attempt 0"

    def test_fallback_with_nothing_anywhere_is_no_checkpoint(self, run_root: str, tmp_path: Path) -> None:
        assert self._load(self.dest(run_root, 3), tmp_path, fallback=True) is None


__all__ = ["CountingStore", "HistorySuite"]
