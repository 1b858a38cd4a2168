"""Aligned members (issue 18): on a store whose copies share blocks (the file store:
``copy_file_range`` is a reflink on XFS and btrfs, for whole blocks between offsets that are
multiples of 4096), a large file's members start at such an offset, after a padding member,
in a full save and in an incremental one, so that every copy goes from an aligned place to an
aligned place. Every reader reads the objects as before, and damage in a padding member fails
a full load as damage in any member does. No test here needs XFS: offsets are checked."""

from __future__ import annotations

import gzip
import io
import os
import random
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from conftest import require
from flyte_checkpoint.errors import CorruptCheckpointError
from flyte_checkpoint.format import index as ix
from flyte_checkpoint.format import inflate
from flyte_checkpoint.format.inspection import inspect_uri
from flyte_checkpoint.format.pipeline import ParallelGzipWriter
from flyte_checkpoint.storage.blobstore import CopyCheck, CopyLimits, CopySource
from flyte_checkpoint.storage.registry import store_for
from flyte_checkpoint.storage.stores import local
from flyte_checkpoint.storage.stores.local import LocalStore

from .helpers import stdlib_tree, tree

MiB = 1024 * 1024
BLOCK = 4096  # the block size of XFS and btrfs by default


def _blob(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def make_tree(root: Path) -> Path:
    """Large files of odd sizes (stored and compressed) with headers and small files between."""
    (root / "sub").mkdir(parents=True)
    for i in range(4):
        (root / f"w{i}.bin").write_bytes(_blob(MiB + 333 * i + 1, seed=i))
        (root / "sub" / f"note{i}.txt").write_bytes(b"n" * (100 + 7 * i))
    (root / "sub" / "log.jsonl").write_bytes(b'{"step": 1, "loss": 0.5}\n' * 9000)  # compressed
    (root / "sub" / "exact").write_bytes(b"e" * ix.ALIGN_MIN)
    (root / "small.json").write_bytes(b"{}")
    return root


def index_of(obj: str) -> ix.Index:
    index = ix.read_index(store_for(obj), obj)
    assert index is not None
    return index


def assert_aligned(index: ix.Index) -> None:
    """Each large file's first member starts at a multiple of the block, right after one
    padding member; files under ALIGN_MIN have none."""
    large = [e for e in index.files.values() if e.size >= ix.ALIGN_MIN]
    assert len(large) >= 6
    for e in large:
        first, pad = index.members[e.first], index.members[e.first - 1]
        assert first.coff % BLOCK == 0, (e.name, first.coff)
        assert (pad.ulen, pad.crc) == (0, 0) and ix.PAD_MIN <= pad.clen < BLOCK + ix.PAD_MIN, e.name
    pads = [m for m in index.members if m.ulen == 0]
    assert len(pads) == len(large)  # at most one padding member per large file


@pytest.fixture
def copies(monkeypatch):
    """Each copy the file store's writers get: (source offset, destination offset, length)."""
    seen: list[tuple[int, int, int]] = []
    real = local._LocalWriter._copy

    def spy(self, source, start, length, expect):
        seen.append((start, os.lseek(self._file.fileno(), 0, os.SEEK_CUR), length))
        return real(self, source, start, length, expect)

    monkeypatch.setattr(local._LocalWriter, "_copy", spy)
    return seen


def test_large_files_start_at_block_multiples_and_copies_go_from_and_to_them(tmp_path, copies):
    assert LocalStore.copy_limits == CopyLimits(align=BLOCK)
    src = make_tree(tmp_path / "src")
    obj = str(tmp_path / "obj.tgz")
    fc.Checkpoint(obj).save_sync(str(src))
    assert_aligned(index_of(obj))
    assert copies == []

    (src / "w2.bin").write_bytes(_blob(MiB + 667, seed=99))  # changed: written, aligned too
    (src / "sub" / "note1.txt").write_bytes(b"a longer note that moves what follows")
    fc.Checkpoint(obj).save_sync(str(src))
    index = index_of(obj)
    assert_aligned(index)
    assert len(copies) == 5, copies  # every unchanged large file
    for start, at, length in copies:
        assert (start % BLOCK, at % BLOCK) == (0, 0), (start, at, length)
    copied = {index.members[e.first].coff for e in index.files.values()}
    assert {at for _, at, _ in copies} <= copied
    with fc.Checkpoint(str(tmp_path / "n"), obj) as cp:
        assert tree(cp.load_sync()) == tree(src)


def test_a_base_saved_unaligned_is_copied_from_without_padding(tmp_path, copies, monkeypatch):
    """An object saved before alignment (or by a store without it): its members start
    anywhere, so the copies get no padding before them; the files written are aligned."""
    src = make_tree(tmp_path / "src")
    obj = str(tmp_path / "obj.tgz")
    monkeypatch.setattr(LocalStore, "copy_limits", CopyLimits())
    fc.Checkpoint(obj).save_sync(str(src))
    old = index_of(obj)
    assert not [m for m in old.members if m.ulen == 0]
    monkeypatch.setattr(LocalStore, "copy_limits", CopyLimits(align=BLOCK))
    (src / "w0.bin").write_bytes(_blob(MiB + 1, seed=42))
    fc.Checkpoint(obj).save_sync(str(src))
    index = index_of(obj)
    assert [e.name for e in index.files.values() if index.members[e.first - 1].ulen == 0] == ["w0.bin"]
    assert index.members[index.files["w0.bin"].first].coff % BLOCK == 0
    assert len(copies) == 5 and all(start % BLOCK for start, _, _ in copies), copies
    with fc.Checkpoint(str(tmp_path / "n"), obj) as cp:
        assert tree(cp.load_sync()) == tree(src)


class _Sink(io.BytesIO):
    """Records what the writer gives it: ("write", offset, length) and ("copy", start, offset, length)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []
        self.size = 0

    def write(self, data) -> int:  # type: ignore[override]
        self.calls.append(("write", self.size, len(data)))
        self.size += len(data)
        return len(data)

    def copy(self, source: CopySource, start: int, length: int, expect: CopyCheck) -> None:
        assert expect.length == length
        self.calls.append(("copy", start, self.size, length))
        self.size += length


def test_a_run_of_adjacent_copies_is_padded_once_where_it_starts():
    source = CopySource("file:///old", 10 * MiB, "v")
    sink = _Sink()
    index = ix.IndexBuilder()
    with ParallelGzipWriter(sink, index=index, align=BLOCK) as gz:  # type: ignore[arg-type]
        gz.write(b"header" * 100)
        gz.copy(source, 2 * BLOCK, 5000, [(5000, 6000, 1, 11)])
        gz.copy(source, 2 * BLOCK + 5000, 3000, [(3000, 3500, 2, 12)])  # joins the run
        gz.copy(source, 8 * BLOCK, 100, [(100, 200, 3, 13)])  # another run, from an aligned place
        gz.copy(source, 9 * BLOCK + 7, 50, [(50, 60, 4, 14)])  # from an unaligned place: no padding
        gz.align()
        gz.write(b"x" * 5000)
    copies = [c for c in sink.calls if c[0] == "copy"]
    assert [(c[1], c[3]) for c in copies] == [(2 * BLOCK, 8000), (8 * BLOCK, 100), (9 * BLOCK + 7, 50)]
    assert [c[2] % BLOCK for c in copies[:2]] == [0, 0]
    rows = [(m.ulen, m.crc) for m in index.members]
    pads = [i for i, (ulen, _) in enumerate(rows) if ulen == 0]
    assert [rows[i + 1] for i in pads] == [(6000, 1), (200, 3), (5000, zlib.crc32(b"x" * 5000))]
    assert [index.members[i + 1].coff % BLOCK for i in pads] == [0, 0, 0]


def test_without_align_nothing_is_padded():
    sink = _Sink()
    index = ix.IndexBuilder()
    with ParallelGzipWriter(sink, index=index) as gz:  # type: ignore[arg-type]
        gz.write(b"header")
        gz.copy(CopySource("file:///old", MiB, "v"), BLOCK, 100, [(100, 200, 3, 13)])
        gz.align()  # a cut, nothing more
        gz.write(b"x" * 5000)
    assert [m.ulen for m in index.members] == [6, 200, 5000]
    assert [c[0] for c in sink.calls] == ["write", "copy", "write", "write"]  # the last: the index


@pytest.fixture
def aligned_objects(tmp_path, copies):
    """A full save and an incremental one of the tree (its source folder changed in between)."""
    src = make_tree(tmp_path / "src")
    full = tmp_path / "full.tgz"
    fc.Checkpoint(str(full)).save_sync(str(src))
    (src / "w1.bin").write_bytes(_blob(MiB + 334, seed=7))
    incr = tmp_path / "incr.tgz"
    shutil.copyfile(full, incr)
    fc.Checkpoint(str(incr)).save_sync(str(src))
    assert len(copies) == 5, copies
    objects = {"full": full, "incremental": incr}
    for obj in objects.values():
        assert_aligned(index_of(str(obj)))
    return src, objects


@pytest.mark.parametrize("which", ["full", "incremental"])
def test_every_reader_reads_the_aligned_objects(aligned_objects, tmp_path, which, monkeypatch):
    """tarfile, gzip, GNU tar and gzip -t, Flyte's Checkpoint, our streamed and parallel loads,
    a partial load and inspect."""
    src, objects = aligned_objects
    if which == "full":  # the tree as it was saved first
        (src / "w1.bin").write_bytes(_blob(MiB + 333 + 1, seed=1))
    obj = objects[which]
    expected = tree(src)
    assert stdlib_tree(obj, tmp_path / "py") == expected
    require(shutil.which("tar") is not None and shutil.which("gzip") is not None, "tar and gzip are required")
    out = tmp_path / "gnu"
    out.mkdir()
    run = subprocess.run(["tar", "xzf", str(obj), "-C", str(out)], capture_output=True)
    assert (run.returncode, run.stderr) == (0, b"") and tree(out) == expected
    run = subprocess.run(["gzip", "-t", str(obj)], capture_output=True)
    assert (run.returncode, run.stdout, run.stderr) == (0, b"", b"")

    monkeypatch.setenv(inflate.THREADS_ENV, "1")
    with fc.Checkpoint(str(tmp_path / "streamed"), str(obj)) as cp:
        assert tree(cp.load_sync()) == expected
    monkeypatch.setenv(inflate.THREADS_ENV, "2")
    monkeypatch.setattr(inflate, "PARALLEL_MIN", 0)
    stats = inflate.LoadStats()
    dest = tmp_path / "parallel"
    dest.mkdir()
    size = obj.stat().st_size
    assert inflate.restore_indexed(store_for(str(obj)), str(obj), size, str(dest), stats=stats)
    assert tree(dest) == expected and stats.members == len(index_of(str(obj)).members)
    with fc.Checkpoint(str(tmp_path / "partial"), str(obj)) as cp:
        got = cp.load_sync(members=["w1.bin", "sub"])
        assert got is not None
        assert (got / "w1.bin").read_bytes() == expected["w1.bin"]
        assert (got / "sub" / "log.jsonl").read_bytes() == expected["sub/log.jsonl"]
    found = inspect_uri(str(obj))
    assert found.files == len([v for v in expected.values() if isinstance(v, bytes)])

    try:
        import flyte
    except ImportError:
        flyte = None
    require(flyte is not None, "flyte is not installed (pip install flyte==2.12.1)")
    theirs = flyte.Checkpoint(f"file://{tmp_path / 'next'}", f"file://{obj}")
    assert tree(Path(theirs.load_sync())) == expected


def _a_padding_member(obj: Path) -> ix.Member:
    index = index_of(str(obj))
    return next(m for m in index.members if m.ulen == 0)


def _fails_every_full_load(obj: Path, tmp_path: Path, monkeypatch, tag: str) -> None:
    for threads in ("1", "2"):  # streamed; parallel inflate
        monkeypatch.setenv(inflate.THREADS_ENV, threads)
        cp = fc.Checkpoint(str(tmp_path / f"n-{tag}-{threads}"), str(obj))
        with pytest.raises(CorruptCheckpointError, match="save the checkpoint again"):
            cp.load_sync()
        assert list(cp.path.iterdir()) == [], (tag, threads)
        cp.close()
    with pytest.raises(CorruptCheckpointError, match="save the checkpoint again"):
        inspect_uri(str(obj))


def test_a_flipped_bit_in_a_padding_member_fails_every_full_load(aligned_objects, tmp_path, monkeypatch):
    """Gzip readers skip extra fields, and a padding member holds nothing: only the loader's
    check that each such member is exactly padding sees a flip in its payload."""
    _, objects = aligned_objects
    obj = objects["incremental"]
    monkeypatch.setattr(inflate, "PARALLEL_MIN", 0)
    good = obj.read_bytes()
    pad = _a_padding_member(obj)
    assert pad.clen > 40
    at = [*range(16), pad.clen // 2, pad.clen - 11, *range(pad.clen - 10, pad.clen)]
    for i in at:
        for bit in (0x01, 0x04, 0x80):
            data = bytearray(good)
            data[pad.coff + i] ^= bit
            obj.write_bytes(bytes(data))
            _fails_every_full_load(obj, tmp_path, monkeypatch, f"{i}-{bit}")


@pytest.mark.parametrize("forged", ["index-member", "other-subfield"])
def test_a_padding_member_replaced_by_another_empty_member_fails_every_full_load(
    aligned_objects, tmp_path, monkeypatch, forged
):
    """The same length and an empty member still: not padding, so not accepted as padding."""
    _, objects = aligned_objects
    obj = objects["full"]
    monkeypatch.setattr(inflate, "PARALLEL_MIN", 0)
    good = obj.read_bytes()
    pad = _a_padding_member(obj)
    sub = {"index-member": b"FI", "other-subfield": b"XY"}[forged]
    other = ix._empty_member(sub, bytes(pad.clen - ix.PAD_MIN))
    assert len(other) == pad.clen and not ix.is_padding(other)
    obj.write_bytes(good[: pad.coff] + other + good[pad.coff + pad.clen :])
    gzip.decompress(obj.read_bytes())  # a gzip reader sees nothing wrong
    _fails_every_full_load(obj, tmp_path, monkeypatch, forged)
