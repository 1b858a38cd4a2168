"""Incremental saves of small files on a store whose pieces have a minimum (issue 36, points
4-6): runs of adjacent unchanged files are one copy however short each file is; the written
run before a copy absorbs its own short end (nothing read back); long runs go to the store in
copy parts as they are found. On the kit's ``PartWriter`` over memory with S3's rules at a
smaller scale (``tests/test_kit_copies.py``), counting the bytes sent and read back."""

from __future__ import annotations

import io
import logging
import random
import subprocess
import tarfile
import threading
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.format import incremental
from flyte_checkpoint.format import index as ix
from flyte_checkpoint.storage.blobstore import BlobWriter, CopyLimits, CopySource
from flyte_checkpoint.storage.registry import store_for

from .helpers import tree
from .test_kit_copies import MIN_PART, PartedStore, PartedWriter

FILE = MIN_PART // 2  # each file alone is too short to copy


class _Counting(PartedWriter):
    """Copied parts answered with their CRC-32 (as S3 answers), so that nothing is read back
    to check them; the bytes of copies read back and sent are counted at the commit."""

    def _copied_crc32(self, result: Any) -> int | None:
        return zlib.crc32(result[1])

    def _commit(self) -> None:
        try:
            super()._commit()
        finally:  # every part has ended
            self.store.read_back += self.bytes_read_back  # type: ignore[attr-defined]


class CountingStore(PartedStore):
    """S3's rules with ``MIN_PART`` parts (copies up to 64 of them): counts the bytes sent
    (parts, whole objects) and the bytes of copy sources read back by the writer."""

    copy_limits = CopyLimits(min_part=MIN_PART, max_copy=64 * MIN_PART, max_pieces=10_000)

    def __init__(self) -> None:
        super().__init__()
        self.read_back = 0

    def open_write(self, uri: str) -> BlobWriter:
        return _Counting(self, uri)


@pytest.fixture
def counting() -> Iterator[tuple[CountingStore, str]]:
    store = CountingStore()
    scheme = "fcpruns"
    fc.register_store("fcpruns-store", (scheme,), lambda: store, "a PartWriter on memory, counting (tests)")
    try:
        yield store, f"{scheme}://t/{uuid.uuid4().hex}/ckpt.tgz"
    finally:
        fc.unregister_store("fcpruns-store")
        store.pool.close()


def _blob(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def make_tree(root: Path, files: int, size: int = FILE) -> Path:
    root.mkdir(parents=True)
    for i in range(files):
        (root / f"t{i:03}.bin").write_bytes(_blob(size, seed=i))
    return root


def saved(store: CountingStore, dest: str, src: Path) -> tuple[int, int]:
    """Save ``src`` to ``dest``: the bytes sent and the bytes read back."""
    sent, read = store.sent, store.read_back
    fc.Checkpoint(dest).save_sync(str(src))
    return store.sent - sent, store.read_back - read


def check_object(dest: str, src: Path, tmp_path: Path) -> None:
    """A load of the object is the tree byte for byte; ``tarfile`` and ``tar xzf`` read it too."""
    with fc.Checkpoint(str(tmp_path / f"load-{uuid.uuid4().hex}"), dest) as cp:
        assert tree(cp.load_sync()) == tree(src)
    raw = store_for(dest).read_bytes(dest)
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as tf:
        got = {m.name: tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()}  # type: ignore[union-attr]
    assert got == {p.name: p.read_bytes() for p in src.iterdir()}
    out = tmp_path / f"tar-{uuid.uuid4().hex}"
    out.mkdir()
    (out / "obj.tgz").write_bytes(raw)
    (out / "x").mkdir()
    subprocess.run(["tar", "xzf", str(out / "obj.tgz"), "-C", str(out / "x")], check=True)
    assert tree(out / "x") == tree(src)


def test_a_run_of_unchanged_files_each_too_short_to_copy_is_one_copy(counting, tmp_path):
    """64 files of half the minimum part, one changed: the unchanged neighbours on either side
    are copied as two ranges, and what is sent is the changed file, its headers, the index and
    at most one minimum part more: well under 10% of a full save."""
    store, dest = counting
    src = make_tree(tmp_path / "src", 64)
    full, _ = saved(store, dest, src)
    (src / "t020.bin").write_bytes(_blob(FILE, seed=1000))
    store.requests.clear()
    sent, read = saved(store, dest, src)
    assert sent <= 0.10 * full, f"one of 64 changed: {sent} of {full} bytes sent"
    assert sent + read <= FILE + 2 * MIN_PART, (sent, read)
    assert store.requests.count("copy") == 2, store.requests
    check_object(dest, src, tmp_path)
    unchanged, read = saved(store, dest, src)
    assert unchanged <= 0.05 * full and read == 0, (unchanged, read)
    check_object(dest, src, tmp_path)


def test_a_short_unchanged_file_between_changed_ones_is_sent_not_read_back(counting, tmp_path):
    """A file too short to copy alone, between two changed files: copying it would mean reading
    it back and sending it; it is sent from the folder instead, and nothing is read back."""
    store, dest = counting
    src = make_tree(tmp_path / "src", 12, size=3 * MIN_PART)
    (src / "t005.bin").write_bytes(_blob(FILE, seed=5))
    saved(store, dest, src)
    for name in ("t004.bin", "t006.bin"):
        (src / name).write_bytes(_blob(3 * MIN_PART, seed=hash(name) & 0xFFFF))
    store.requests.clear()
    sent, read = saved(store, dest, src)
    assert read == 0, f"{read} bytes read back"
    assert 6 * MIN_PART + FILE <= sent <= 7 * MIN_PART + FILE, sent
    assert store.requests.count("copy") == 2, store.requests
    check_object(dest, src, tmp_path)


def test_files_rewritten_with_the_same_bytes_are_sent_not_read_back(counting, tmp_path):
    """Every file written again with the same bytes (a new mtime, so a new tar header before
    each): no two copies join, each file is too short alone, and the plan sees that from the
    headers the base recorded: they are sent from the folder, nothing is read back."""
    import os

    store, dest = counting
    src = make_tree(tmp_path / "src", 16)
    saved(store, dest, src)
    for i, p in enumerate(sorted(src.iterdir())):
        os.utime(p, (1_700_000_000 + i, 1_700_000_000 + i))
    sent, read = saved(store, dest, src)
    assert read == 0, f"{read} bytes read back"
    assert sent >= 16 * FILE, sent
    check_object(dest, src, tmp_path)


@pytest.mark.parametrize("changed", [5 * MIN_PART // 2, 3 * MIN_PART // 4])
def test_a_written_run_absorbs_its_short_end_and_only_a_short_run_reads_the_copy(counting, tmp_path, changed):
    """A changed file between long runs of copies, with parts of ``MIN_PART``: one of 2.5 parts
    ends in a short piece that the part before it absorbs (nothing read back); one shorter than
    a part takes the rest of its part from the next copy, read back (at most ``MIN_PART``)."""
    store, dest = counting
    src = make_tree(tmp_path / "src", 24)
    (src / "t010.bin").write_bytes(_blob(changed, seed=10))
    saved(store, dest, src)
    (src / "t010.bin").write_bytes(_blob(changed, seed=11))
    sent, read = saved(store, dest, src)
    if changed > MIN_PART:
        assert read == 0, f"{read} bytes of the next copy read back"
    else:
        assert 0 < read <= MIN_PART - changed, read
    assert sent <= changed + read + MIN_PART, (sent, read)  # and the headers and the index
    check_object(dest, src, tmp_path)


def test_a_damaged_member_inside_a_run_is_sent_from_the_folder(counting, tmp_path, caplog):
    """A byte flipped in the member of one file inside a run of short files: the copy of the run
    is refused by its check, the save warns naming that file and sends it from the folder (the
    rest of the run still copied), and the object is the tree."""
    store, dest = counting
    src = make_tree(tmp_path / "src", 32)
    saved(store, dest, src)
    index = ix.read_index(store, dest)
    assert index is not None
    member = index.members[index.files["t017.bin"].first]
    raw = bytearray(store.read_bytes(dest))
    raw[member.coff + member.clen // 2] ^= 0x10
    store.write_bytes(dest, bytes(raw))
    store.requests.clear()
    with caplog.at_level(logging.WARNING, logger="flyte_checkpoint"):
        sent, _ = saved(store, dest, src)
    assert "the stored bytes of t017.bin are not what its index records" in caplog.text, caplog.text
    assert store.requests.count("copy") >= 2, "the rest of the run was copied on the try that committed"
    assert FILE <= sent < 32 * FILE // 4, sent
    check_object(dest, src, tmp_path)


def test_a_long_run_is_copied_in_parts_in_order(counting, tmp_path, monkeypatch):
    """A run of ~6.4 minimum parts, all unchanged, with copy parts of 2: three copy requests
    (the first ones given while the run grows, each leaving at least a minimum part in it), and
    the object holds the files in their order."""
    store, dest = counting
    monkeypatch.setattr(incremental, "_COPY_RUN", 2 * MIN_PART)
    src = make_tree(tmp_path / "src", 12)
    saved(store, dest, src)
    store.requests.clear()
    sent, read = saved(store, dest, src)
    assert store.requests.count("copy") == 3, store.requests
    assert read == 0 and sent < MIN_PART // 4, (sent, read)
    raw = store_for(dest).read_bytes(dest)
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as tf:
        assert tf.getnames() == sorted(p.name for p in src.iterdir())
    check_object(dest, src, tmp_path)


def test_copy_parts_reach_the_store_while_the_run_still_grows():
    """``copy_run`` with ``copy_keep``: the first members of a run are given to the store once
    they hold ``copy_run`` and at least ``copy_keep`` stay behind, before the writer is closed;
    the pieces' checks follow the members; the end of the run is one copy of at least ``copy_keep``."""
    from flyte_checkpoint.format.pipeline import ParallelGzipWriter
    from flyte_checkpoint.storage.blobstore import CopyCheck

    MiB = 1024 * 1024

    class Sink(io.BytesIO):
        def __init__(self) -> None:
            super().__init__()
            self.copies: list[tuple[int, int]] = []
            self.first = threading.Event()

        def copy(self, source: CopySource, start: int, length: int, expect: CopyCheck) -> None:
            assert expect.length == length and all(n == MiB for n, _ in expect.pieces)
            self.copies.append((start, length))
            self.first.set()

    source = CopySource("memory://x/old", 10**9, "1")
    sink = Sink()
    with ParallelGzipWriter(sink, copy_run=4 * MiB, copy_keep=3 * MiB) as gz:  # type: ignore[arg-type]
        for i in range(15):
            gz.copy(source, i * MiB, MiB, [(MiB, MiB, 0, i)])
            if i == 7:
                assert sink.first.wait(60), "no copy reached the store while the run grew"
    expected = [(0, 4 * MiB), (4 * MiB, 4 * MiB), (8 * MiB, 4 * MiB), (12 * MiB, 3 * MiB)]
    assert sink.copies == expected, sink.copies


def test_a_damaged_piece_read_to_fill_a_part_is_found(counting):
    """The bytes of a copy read (in a pool thread) to fill the short written part before it are
    checked as the copied ones are: a byte flipped there is named, alone, and nothing commits."""
    from flyte_checkpoint.errors import CopyDamagedError
    from flyte_checkpoint.testing.incremental import checks_of

    store, dest = counting
    data = _blob(4 * MIN_PART, seed=77)
    src_uri = dest + ".src"
    stored = bytearray(data)
    stored[1000] ^= 0x10  # inside the first piece, which fills the written part
    store.write_bytes(src_uri, bytes(stored))
    source = store.copy_source(src_uri)
    assert source is not None
    piece = MIN_PART // 4
    with pytest.raises(CopyDamagedError) as info, store.open_write(dest) as w:
        w.write(b"head" * 100)
        w.copy(source, 0, 3 * MIN_PART, checks_of(data, 0, 3 * MIN_PART, piece))
    assert [(s.uri, a, n) for s, a, n in info.value.damaged] == [(src_uri, 0, piece)]
    assert store.read_back == MIN_PART - 400 and store.stat(dest) is None
