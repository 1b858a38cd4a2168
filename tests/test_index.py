"""The index inside a folder checkpoint (docs/FORMAT.md): other readers see the same tar,
``read_index`` finds it in two ranged reads, ``load_file`` restores one file from it, and a
forged index is refused."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import struct
import subprocess
import tarfile
import zlib
from pathlib import Path

import pytest
from blake3 import blake3

import flyte_checkpoint as fc
from conftest import require
from flyte_checkpoint.errors import CorruptCheckpointError, NotFoundError, UnsafeArchiveError
from flyte_checkpoint.format import index as ix
from flyte_checkpoint.storage.registry import store_for

from .helpers import older_index, stdlib_tree, tree
from .reliability.backends import backend, backend_pool  # noqa: F401
from .spystore import spying


def make_tree(root: Path) -> Path:
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "big.bin").write_bytes(os.urandom(9 * 1024 * 1024 + 5))  # several members, stored
    (root / "text.json").write_bytes(b'{"k": 1}\n' * 40000)  # aligned, compressed
    (root / "sub" / "small.txt").write_bytes(b"small")  # shares a member
    (root / "sub" / "deep" / "empty").write_bytes(b"")
    (root / "sub" / "exact").write_bytes(b"e" * ix.ALIGN_MIN)
    (root / "link").symlink_to("sub/small.txt")
    os.link(root / "sub" / "small.txt", root / "hard")
    return root


@pytest.fixture
def saved(tmp_path):
    src = make_tree(tmp_path / "src")
    obj = tmp_path / "obj.tgz"
    fc.Checkpoint(str(obj)).save_sync(str(src))
    return src, obj


def files_of(src: Path) -> dict[str, bytes]:
    return {k: v for k, v in tree(src).items() if isinstance(v, bytes) and not (src / k).is_symlink()}


def test_folder_saves_carry_an_index_of_every_file(saved):
    src, obj = saved
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None
    names = set(files_of(src))  # "sub/small.txt" is a hard link to "hard": indexed with its data
    assert set(index.files) == names
    for name in names:
        entry = index.files[name]
        data = (src / name).read_bytes()
        assert entry.digest == blake3(data).hexdigest()
        assert entry.size == len(data)
        if len(data) >= ix.ALIGN_MIN:
            assert entry.offset == 0  # starts at a member boundary
    assert index.files["big.bin"].last - index.files["big.bin"].first >= 2
    raw = obj.read_bytes()
    for m in index.members:  # each member decodes alone to what the index says
        data = zlib.decompress(raw[m.coff : m.coff + m.clen], 31)
        assert len(data) == m.ulen and zlib.crc32(data) == m.crc


def test_python_tarfile_and_gzip_read_the_same_tree_without_warning(saved, tmp_path):
    src, obj = saved
    assert stdlib_tree(obj, tmp_path / "out") == tree(src)


#: GNU tar and gzip are on every machine the suite runs on (required); pigz is tested where it
#: is installed (``apt-get install pigz``): `make setup` does not install system packages, so on
#: a machine without it the case is not collected (it neither runs nor skips).
TOOLS = ["tar", "gzip"] + (["pigz"] if shutil.which("pigz") else [])


@pytest.mark.parametrize("tool", TOOLS)
def test_command_line_tools_read_it_without_a_word(saved, tmp_path, tool):
    require(shutil.which(tool) is not None, f"{tool} is not installed (apt-get install {tool})")
    src, obj = saved
    if tool == "tar":
        out = tmp_path / "out"
        out.mkdir()
        run = subprocess.run(["tar", "xzf", str(obj), "-C", str(out)], capture_output=True)
        assert tree(out) == tree(src)
    else:
        run = subprocess.run([tool, "-t", str(obj)], capture_output=True)
    assert (run.returncode, run.stdout, run.stderr) == (0, b"", b"")


def test_flytes_checkpoint_restores_the_indexed_object(saved, tmp_path):
    try:
        import flyte
    except ImportError:
        flyte = None
    require(flyte is not None, "flyte is not installed (pip install flyte==2.12.1)")
    src, obj = saved
    theirs = flyte.Checkpoint(f"file://{tmp_path / 'next'}", f"file://{obj}")
    assert tree(Path(theirs.load_sync())) == tree(src)


def test_ours_loads_it_whole(saved, tmp_path):
    src, obj = saved
    assert tree(fc.Checkpoint(str(tmp_path / "n"), str(obj)).load_sync()) == tree(src)


def test_bytes_and_files_carry_no_index(tmp_path):
    fc.Checkpoint(str(tmp_path / "b")).save_sync(b"\x1f\x8bpayload" * 100)
    assert (tmp_path / "b").read_bytes() == b"\x1f\x8bpayload" * 100
    f = tmp_path / "f.bin"
    f.write_bytes(os.urandom(100_000))
    fc.Checkpoint(str(tmp_path / "o")).save_sync(str(f))
    assert (tmp_path / "o").read_bytes() == f.read_bytes()
    for name in ("b", "o"):
        assert ix.read_index(store_for(str(tmp_path / name)), str(tmp_path / name)) is None


def test_read_index_takes_one_read_of_the_tail_and_one_of_the_index(saved):
    _, obj = saved
    size = obj.stat().st_size
    with spying("file") as spy:
        uri = spy.uri_for(str(obj))
        assert ix.read_index(store_for(uri), uri, size) is not None
        assert spy.count("read_range") == 2
        assert sum(spy.calls.values()) == 2


def test_load_file_reads_only_that_files_members(saved, tmp_path):
    src, obj = saved
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None
    entry = index.files["text.json"]
    with spying("file") as spy:
        cp = fc.Checkpoint(str(tmp_path / "n"), spy.uri_for(str(obj)))
        got = cp.load_file_sync("text.json")
        assert got is not None and got.read_bytes() == (src / "text.json").read_bytes()
        assert spy.count("open_read") == 0  # nothing streamed
        assert spy.count("read_range") == 3  # the tail, the index, the file's members in one read
        assert entry.last >= entry.first


@pytest.mark.parametrize("name", ["big.bin", "sub/small.txt", "hard", "sub/deep/empty", "./sub/exact"])
def test_load_file_restores_each_file_and_async_too(saved, tmp_path, name):
    import asyncio

    src, obj = saved
    cp = fc.Checkpoint(str(tmp_path / "n"), str(obj))
    want = (src / name).read_bytes()
    assert cp.load_file_sync(name, tmp_path / "one").read_bytes() == want
    assert asyncio.run(cp.load_file(name, tmp_path / "two")).read_bytes() == want


def test_load_file_without_an_index_streams_flyte_style_objects(tmp_path):
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "x.bin").write_bytes(b"x" * 100_000)
    (src / "y").write_bytes(b"y")
    obj = tmp_path / "plain.tgz"
    with tarfile.open(obj, "w:gz") as tf:  # what Flyte writes: no index
        tf.add(src, arcname=".")
    assert ix.read_index(store_for(str(obj)), str(obj)) is None
    cp = fc.Checkpoint(str(tmp_path / "n"), str(obj))
    assert cp.load_file_sync("a/x.bin").read_bytes() == b"x" * 100_000
    assert cp.load_file_sync("y").read_bytes() == b"y"
    with pytest.raises(NotFoundError, match="holds no file 'nope'"):
        cp.load_file_sync("nope")
    assert tree(cp.load_sync()) == tree(src)


def test_load_file_refuses_names_outside_and_reports_absent_ones(saved, tmp_path):
    _, obj = saved
    cp = fc.Checkpoint(str(tmp_path / "n"), str(obj))
    for bad in ("../x", "/etc/passwd", "a/../../b"):
        with pytest.raises(UnsafeArchiveError, match="not a path inside a checkpoint"):
            cp.load_file_sync(bad)
    with pytest.raises(NotFoundError, match=r"holds no file 'link'.*load\(\) the whole checkpoint"):
        cp.load_file_sync("link")
    assert fc.Checkpoint(str(tmp_path / "m")).load_file_sync("x") is None
    assert fc.Checkpoint(str(tmp_path / "m"), str(tmp_path / "absent")).load_file_sync("x") is None


def test_damaged_file_data_is_never_returned(saved, tmp_path):
    _, obj = saved
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None
    m = index.members[index.files["text.json"].first]
    raw = bytearray(obj.read_bytes())
    raw[m.coff + m.clen // 2] ^= 0xFF
    obj.write_bytes(bytes(raw))
    with pytest.raises(CorruptCheckpointError, match="does not match the index"):
        fc.Checkpoint(str(tmp_path / "n"), str(obj)).load_file_sync("text.json")


# -- forged indexes ---------------------------------------------------------------------


def forge(obj: Path, edit) -> None:
    """Rewrite ``obj``'s index with ``edit(doc)`` applied, with valid checksums."""
    raw = obj.read_bytes()
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None
    doc = {
        "members": [list(m.row()) for m in index.members],
        "files": [
            [e.name, e.first, e.last, e.offset, e.size, e.mtime, e.mode, e.digest]
            for e in index.files.values()
        ],
    }
    edit(doc)
    payload = bytearray(ix.pack_payload(doc["members"], doc["files"]))
    if "file_count" in doc:
        struct.pack_into("<I", payload, 4, doc["file_count"])
    obj.write_bytes(raw[: index.data_end] + ix.encode_tail(bytes(payload), index.data_end))


def _set(field: int, value):
    def edit(doc):
        doc["files"][0][field] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "error", "match"),
    [
        (_set(0, "../evil"), UnsafeArchiveError, "outside the checkpoint"),
        (_set(0, "/etc/passwd"), UnsafeArchiveError, "outside the checkpoint"),
        (_set(2, 10**6), CorruptCheckpointError, "outside the object's members"),
        (_set(3, 10**9), CorruptCheckpointError, "outside its members"),
        (_set(4, 10**12), CorruptCheckpointError, "outside its members"),
        (lambda d: d["members"].append([100, 1, 0, 0]), CorruptCheckpointError, "do not end where the index"),
        (lambda d: d["members"][0].__setitem__(0, 2**32 - 1), CorruptCheckpointError, "impossible length"),
        (lambda d: d["members"][0].__setitem__(1, 10**9), CorruptCheckpointError, "impossible length"),
        (lambda d: d.__setitem__("file_count", 2_000_000), CorruptCheckpointError, "more than"),
        (lambda d: d.__setitem__("file_count", 3), CorruptCheckpointError, "bytes follow its last"),
        (lambda d: d.__setitem__("file_count", 9), CorruptCheckpointError, "shorter than its counts"),
    ],
    ids=[
        "dotdot",
        "absolute",
        "member-range",
        "offset",
        "size",
        "extra-member",
        "member-length",
        "member-size",
        "count",
        "fewer-files",
        "more-files",
    ],
)
def test_a_forged_index_is_refused(saved, edit, error, match):
    _, obj = saved
    forge(obj, edit)
    with pytest.raises(error, match=match):
        ix.read_index(store_for(str(obj)), str(obj))


def test_a_trailer_pointing_outside_or_a_damaged_index_is_refused(saved):
    _, obj = saved
    raw = obj.read_bytes()
    size = len(raw)
    # a flipped byte inside the index payload: its SHA-256 no longer matches
    flipped = bytearray(raw)
    flipped[size - ix.TRAILER_SIZE - 30] ^= 0x01
    obj.write_bytes(bytes(flipped))
    with pytest.raises(CorruptCheckpointError, match=r"index of .*obj.tgz is damaged .*SHA-256"):
        ix.read_index(store_for(str(obj)), str(obj))
    # a trailer that places the index beyond the object (checksum made valid)
    index_at = size - ix.TRAILER_SIZE
    body = bytearray(raw[index_at + 16 : index_at + 16 + ix._TRAILER_BODY.size])
    struct.pack_into("<Q", body, 6, 10**15)
    struct.pack_into("<I", body, len(body) - 4, zlib.crc32(bytes(body[:-4])))
    obj.write_bytes(raw[: index_at + 16] + bytes(body) + raw[index_at + 16 + len(body) :])
    with pytest.raises(CorruptCheckpointError, match="outside the object"):
        ix.read_index(store_for(str(obj)), str(obj))
    # a trailer whose own checksum fails
    obj.write_bytes(raw[: index_at + 20] + b"\x00" + raw[index_at + 21 :])
    with pytest.raises(CorruptCheckpointError, match="trailer's checksum"):
        ix.read_index(store_for(str(obj)), str(obj))


def test_the_index_splits_across_members_when_larger_than_one_extra_field():
    builder = ix.IndexBuilder()
    builder.add_member(20, 10**6, 0, 0)
    for i in range(20000):
        builder.add_file(
            f"f{i:05}-{os.urandom(8).hex()}", i * 10, 10, 0, 0o644, hashlib.sha256(os.urandom(4)).hexdigest()
        )
    tail = builder.encode()
    assert tail.count(b"\x1f\x8b\x08\x04") >= 3  # at least two index members and the trailer
    assert gzip.decompress(tail) == b""


def test_inspect_tells_whether_the_object_is_indexed(saved, tmp_path, capsys):
    from flyte_checkpoint.cli import main

    src, obj = saved
    plain = tmp_path / "plain.tgz"
    with tarfile.open(plain, "w:gz") as tf:
        tf.add(src, arcname=".")
    assert main(["inspect", str(obj)]) == 0
    assert "index:     6 files (one file loads by ranged reads)" in capsys.readouterr().out
    assert main(["inspect", str(plain)]) == 0
    assert "index:     none (written by Flyte" in capsys.readouterr().out
    forge(obj, _set(0, "../evil"))  # refused as a load refuses it: never described as whole
    assert main(["inspect", str(obj), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["type"] == "UnsafeArchiveError" and "'../evil', outside the checkpoint" in out["error"]


def test_on_every_backend_one_file_loads_by_ranged_reads(backend, tmp_path):  # noqa: F811
    src = make_tree(tmp_path / "src")
    uri = backend.fresh("ckpt")
    fc.Checkpoint(uri).save_sync(str(src))
    with spying(uri.split("://", 1)[0] if "://" in uri else "file") as spy:
        cp = fc.Checkpoint(str(tmp_path / "n"), spy.uri_for(uri))
        got = cp.load_file_sync("big.bin")
        assert got is not None and got.read_bytes() == (src / "big.bin").read_bytes()
        assert spy.count("open_read") == 0
        index = ix.read_index(store_for(uri), uri)
        assert index is not None
        entry = index.files["big.bin"]
        assert entry.last - entry.first >= 2  # several members, adjacent: one ranged read
        assert spy.count("read_range") == 2 + 1
    assert tree(fc.Checkpoint(str(tmp_path / "w"), uri).load_sync()) == tree(src)


def test_streaming_fallback_checks_the_whole_stream_before_keeping_the_file(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_bytes(b"a" * 1000)
    (src / "b").write_bytes(os.urandom(50_000))
    obj = tmp_path / "plain.tgz"
    with tarfile.open(obj, "w:gz") as tf:
        tf.add(src, arcname=".")
    raw = bytearray(obj.read_bytes())
    raw[-6] ^= 0xFF  # the gzip trailer's CRC-32, after the data of "a"
    obj.write_bytes(bytes(raw))
    cp = fc.Checkpoint(str(tmp_path / "n"), str(obj))
    with pytest.raises(CorruptCheckpointError, match="damaged"):
        cp.load_file_sync("a", tmp_path / "a.out")
    assert not (tmp_path / "a.out").exists()


# -- what follows the tar, on a full load --------------------------------------------------


def _small_indexed(tmp_path: Path) -> tuple[Path, bytes, int]:
    """A small folder object (two files, one aligned), its bytes and where its index begins."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_bytes(b"a" * 100)
    (src / "b.bin").write_bytes(os.urandom(ix.ALIGN_MIN))
    obj = tmp_path / "obj.tgz"
    fc.Checkpoint(str(obj)).save_sync(str(src))
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None and len(index.members) > 1
    return obj, obj.read_bytes(), index.data_end


def test_every_flipped_byte_of_the_index_or_trailer_fails_a_full_load(tmp_path):
    """The index members and trailer are empty gzip members whose extra fields gzip readers
    skip: only the loader's check of what follows the tar sees a flip there."""
    obj, good, data_end = _small_indexed(tmp_path)
    assert len(good) - data_end > ix.TRAILER_SIZE
    for i in range(data_end, len(good)):
        for bit in (0x01, 0x80):
            data = bytearray(good)
            data[i] ^= bit
            obj.write_bytes(bytes(data))
            cp = fc.Checkpoint(str(tmp_path / f"n{i}-{bit}"), str(obj))
            with pytest.raises(CorruptCheckpointError, match=r"obj\.tgz|gzip member|save the checkpoint"):
                cp.load_sync()
            assert list(cp.path.iterdir()) == [], i
            cp.close()


@pytest.mark.parametrize("where", ["index", "trailer-magic", "trailer-crc"])
def test_a_damaged_index_fails_load_pull_and_load_file_naming_the_object(tmp_path, capsys, where):
    from flyte_checkpoint.cli import main

    obj, good, data_end = _small_indexed(tmp_path)
    trailer = len(good) - ix.TRAILER_SIZE
    at = {"index": data_end + 20, "trailer-magic": trailer + 16, "trailer-crc": len(good) - 12}
    data = bytearray(good)
    data[at[where]] ^= 0x04
    obj.write_bytes(bytes(data))
    cp = fc.Checkpoint(str(tmp_path / "n"), str(obj))
    with pytest.raises(
        CorruptCheckpointError, match=rf"index of {obj} is damaged .*save the checkpoint again"
    ):
        cp.load_sync()
    with pytest.raises(CorruptCheckpointError, match=rf"index of {obj} is damaged"):
        cp.load_file_sync("b.bin")  # by ranged reads, or streamed where the trailer is not found
    assert main(["pull", str(obj), str(tmp_path / "pulled")]) == 1
    assert f"index of {obj} is damaged" in capsys.readouterr().err


def test_objects_without_an_index_still_load_whatever_empty_members_end_them(tmp_path):
    """Flyte's objects (one gzip member) and writers that end with an empty member (plain, or
    BGZF's end marker, whose extra field is not ours) have no index: they load as before."""
    tar = tmp_path / "t.tar"
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_bytes(b"data")
    with tarfile.open(tar, "w") as t:
        t.add(src / "f", arcname="f")
    body = gzip.compress(tar.read_bytes(), mtime=0)
    bgzf_eof = bytes.fromhex("1f8b08040000000000ff0600424302001b0003000000000000000000")
    for name, data in {"flyte": body, "empty": body + gzip.compress(b""), "bgzf": body + bgzf_eof}.items():
        obj = tmp_path / f"{name}.tgz"
        obj.write_bytes(data)
        with fc.Checkpoint(str(tmp_path / f"n-{name}"), str(obj)) as cp:
            path = cp.load_sync()
            assert path is not None and (path / "f").read_bytes() == b"data", name


def test_an_index_that_does_not_describe_the_members_before_it_fails_a_full_load(tmp_path):
    obj, good, data_end = _small_indexed(tmp_path)
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None
    # one member fewer, the first one's length made to keep the sum: valid index, wrong object
    members = [m.row() for m in index.members]
    merged = [(members[0][0] + members[1][0], members[0][1] + members[1][1], 0, 0), *members[2:]]
    payload = ix.pack_payload(merged, [])
    obj.write_bytes(good[:data_end] + ix.encode_tail(payload, data_end))
    with pytest.raises(CorruptCheckpointError, match="gzip members where the object has"):
        fc.Checkpoint(str(tmp_path / "n"), str(obj)).load_sync()


def test_the_index_costs_little_more_than_each_files_hash(tmp_path):
    """Issue 18: objects at most 1.02x today's. Stored as fixed-width fields, the index cost
    about 95 bytes per file here (3.6% more for the 20,000-file set); deflated (version 2) it
    costs about the SHA-256 that nothing compresses, plus a few bytes (the names, offsets and
    times compress well)."""
    src = tmp_path / "src"
    for d in range(20):
        (src / f"shard-{d:02d}").mkdir(parents=True)
        for i in range(100):
            (src / f"shard-{d:02d}" / f"record-{i:05d}.json").write_bytes(
                b'{"shard": %d, "v": %d}\n' % (d, i) * 20
            )
    obj = tmp_path / "o.tgz"
    fc.Checkpoint(str(obj)).save_sync(str(src))
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None and len(index.files) == 2000
    per_file = (obj.stat().st_size - index.data_end) / len(index.files)
    assert 32 <= per_file <= 48, per_file
    assert fc.Checkpoint(str(tmp_path / "n"), str(obj)).load_sync() is not None


@pytest.mark.parametrize("version", [1, 2])
def test_indexes_of_older_versions_are_still_read(tmp_path, version):
    """Objects written before the index was deflated (version 1: the payload as it is) or
    before it recorded BLAKE3 (versions 1 and 2: SHA-256) load, fully and by partial restore,
    and their index is used with the hash it records."""
    obj, good, data_end = _small_indexed(tmp_path)
    old = older_index(good, version)
    assert old != good and old[:data_end] == good[:data_end]
    obj.write_bytes(old)
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None and index.algorithm == "sha256"
    assert (
        index.files["b.bin"].digest == hashlib.sha256((tmp_path / "src" / "b.bin").read_bytes()).hexdigest()
    )
    cp, cp_part = fc.Checkpoint(str(tmp_path / "n"), str(obj)), fc.Checkpoint(str(tmp_path / "p"), str(obj))
    restored = cp.load_sync()
    assert restored is not None and tree(restored) == tree(tmp_path / "src")
    part = cp_part.load_sync(members=["b.bin"])
    assert part is not None and (part / "b.bin").read_bytes() == (tmp_path / "src" / "b.bin").read_bytes()


def test_an_index_of_a_later_version_is_refused_saying_to_upgrade(tmp_path):
    obj, good, data_end = _small_indexed(tmp_path)
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None
    files = [
        (e.name, e.first, e.last, e.offset, e.size, e.mtime, e.mode, e.digest) for e in index.files.values()
    ]
    payload = ix.pack_payload([m.row() for m in index.members], files)
    obj.write_bytes(good[:data_end] + ix.encode_tail(payload, data_end, version=5))
    message = r"index of .*obj.tgz is damaged \(index version 5, this library reads versions 1 to 4: upgrade"
    with pytest.raises(CorruptCheckpointError, match=message):
        ix.read_index(store_for(str(obj)), str(obj))
    with pytest.raises(CorruptCheckpointError, match=message):
        fc.Checkpoint(str(tmp_path / "n"), str(obj)).load_sync()


def test_new_objects_record_blake3_and_each_members_stored_crc_in_an_index_of_version_4(tmp_path):
    """Version 4: BLAKE3 content hashes, and each member's record with the CRC-32 of its bytes
    as stored (what a server computes of a copy of them: issue 32, item 5)."""
    obj, good, _ = _small_indexed(tmp_path)
    tail = good[-ix.TRAILER_SIZE :]
    assert struct.unpack_from("<H", tail, 20)[0] == 4  # the trailer's version, after the magic
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None and index.algorithm == "blake3" and index.checked
    for name in ("a.txt", "b.bin"):
        assert index.files[name].digest == blake3((tmp_path / "src" / name).read_bytes()).hexdigest()
    assert [m.ccrc for m in index.members] == [
        zlib.crc32(good[m.coff : m.coff + m.clen]) for m in index.members
    ]


def test_an_index_of_version_3_still_loads_and_records_no_stored_crc(tmp_path):
    obj, good, _ = _small_indexed(tmp_path)
    obj.write_bytes(older_index(good, 3))
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None and index.algorithm == "blake3" and not index.checked
    assert {m.ccrc for m in index.members} == {None}
    cp, cp_part = fc.Checkpoint(str(tmp_path / "n"), str(obj)), fc.Checkpoint(str(tmp_path / "p"), str(obj))
    restored = cp.load_sync()
    assert restored is not None and tree(restored) == tree(tmp_path / "src")
    part = cp_part.load_sync(members=["b.bin"])
    assert part is not None and (part / "b.bin").read_bytes() == (tmp_path / "src" / "b.bin").read_bytes()


def test_file_data_is_hashed_off_the_thread_that_reads_the_files(tmp_path, monkeypatch):
    """Hashing on the packer's thread made it the slowest stage of small-file saves."""
    import threading

    from flyte_checkpoint.format import digests

    real = digests.new
    threads: set[str] = set()

    class Recording:
        def __init__(self, *args) -> None:
            self._h = real(*args)

        def update(self, data) -> None:
            threads.add(threading.current_thread().name)
            self._h.update(data)

        def hexdigest(self) -> str:
            return self._h.hexdigest()

        def digest(self) -> bytes:
            return self._h.digest()

    monkeypatch.setattr(digests, "new", Recording)
    src = make_tree(tmp_path / "src")
    obj = tmp_path / "obj.tgz"
    fc.Checkpoint(str(obj)).save_sync(str(src))
    monkeypatch.setattr(digests, "new", real)
    assert threads and threading.current_thread().name not in threads, threads
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None
    assert index.files["big.bin"].digest == blake3((src / "big.bin").read_bytes()).hexdigest()


def test_a_failed_folder_save_leaves_no_hashing_thread(tmp_path):
    import threading

    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_bytes(b"a" * 100)
    (src / "fifo").mkdir()
    os.mkfifo(src / "fifo" / "pipe")  # refused: the save fails after hashing "a"
    with pytest.raises(fc.errors.CheckpointError):
        fc.Checkpoint(str(tmp_path / "obj.tgz")).save_sync(str(src))
    assert not [t for t in threading.enumerate() if t.name == "fcp-hash"]
