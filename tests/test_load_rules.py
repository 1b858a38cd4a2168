"""The load rules of issue 14: what makes a tarball, what is damage, and what a load may take.

- An object is a tarball only if it begins with a valid, non-empty tar header (after gzip
  decoding, for a gzip stream); anything else is a payload, returned whole.
- Once it is a tarball, damage is an error: bytes between or after gzip members, a tar
  stream without its end-of-archive marker, or with data after it.
- A load counts headers and members against its limits, keeps a disk reserve, keeps its
  memory bounded, restores holes, and names the URI, the workspace and the member when
  the file system refuses.
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import os
import random
import re
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import zlib
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from conftest import require
from flyte_checkpoint.errors import (
    CorruptCheckpointError,
    PathTooLongError,
    UnsafeArchiveError,
    WorkspaceError,
)
from flyte_checkpoint.format import compression
from flyte_checkpoint.format import tarstream as ts
from flyte_checkpoint.format.inspection import inspect_uri
from flyte_checkpoint.util.limits import DEFAULT_MAX_MEMBERS, LoadLimits, default_reserve

from .helpers import file_member, tar_bytes, tree

MiB = 1024 * 1024


def store(tmp_path: Path, blob: bytes, name: str = "obj") -> str:
    """Put ``blob`` where a load reads it (the local backend); returns its path."""
    obj = tmp_path / name
    obj.write_bytes(blob)
    return str(obj)


def load(tmp_path: Path, src: str) -> tuple[fc.Checkpoint, Path | None]:
    cp = fc.Checkpoint(str(tmp_path / "next"), src)
    return cp, cp.load_sync()


def assert_fails_clean(cp: fc.Checkpoint) -> None:
    """A failed load leaves an empty workspace and no staging folder."""
    assert list(cp.path.iterdir()) == []
    assert sorted(p.name for p in cp.path.parent.iterdir()) == [".fcp-lock", "workspace"]


def member(name: str, data: bytes) -> bytes:
    """One raw tar member: header and padded data."""
    return (
        ts.header(name, mode=0o644, size=len(data), mtime=0, typeflag=ts.REGTYPE)
        + data
        + bytes(-len(data) % 512)
    )


END = bytes(1024)


# --------------------------------------------------------------------------- 1: zero blocks


@pytest.mark.parametrize(
    "data",
    [
        bytes(512) + b"w",
        bytes(1024) + b"w" * 700,
        bytes(512),
        bytes(10240),
        bytes(512) + member("a", b"x") + END,
    ],
    ids=[
        "zero-block-then-w",
        "two-zero-blocks-then-data",
        "one-zero-block",
        "empty-plain-tar",
        "zeros-then-tar",
    ],
)
def test_bytes_that_begin_with_zero_blocks_load_whole(tmp_path, data):
    """Issue 14 item 1: an uncompressed object is a tarball only if it begins with a valid,
    non-empty header; ``bytes(512) + b"w"`` loaded as an empty folder."""
    dest = str(tmp_path / "obj")
    fc.Checkpoint(dest).save_sync(data)
    cp, path = load(tmp_path, dest)
    assert path == cp.path / "payload" and path.read_bytes() == data
    info = inspect_uri(dest)
    assert (info.kind, info.format, info.members) == ("payload", "raw", 0)


# --------------------------------------------------------------------------- 10: gzip payloads


def _gzip_payloads() -> dict[str, bytes]:
    rng = random.Random(14)
    text = b"".join(b"line %d of a log\n" % i for i in range(2000))
    damaged_first_header = bytearray(member("a", b"x") + END)
    damaged_first_header[0] ^= 1
    out = {f"magic-then-noise-{i}": b"\x1f\x8b" + rng.randbytes(1000) for i in range(8)}
    out |= {
        "valid-gzip-header-then-noise": b"\x1f\x8b\x08\x00" + bytes(6) + rng.randbytes(1000),
        "gz-of-text-then-newline": gzip.compress(text) + b"\n",
        "gz-of-text": gzip.compress(text),
        "gz-of-text-then-cut-member": gzip.compress(text) + gzip.compress(text)[:40],
        "gz-of-text-then-zeros": gzip.compress(text) + bytes(100),
        "gz-of-short-text": gzip.compress(b"hello"),
        "gz-of-short-zeros": gzip.compress(bytes(100)),
        "gz-of-zero-block-then-data": gzip.compress(bytes(512) + b"x" * 600),
        "gz-of-empty-archive-then-newline": gzip.compress(bytes(10240)) + b"\n",
        "gz-of-tar-with-damaged-first-header": gzip.compress(bytes(damaged_first_header)),
        "cut-gz-of-text": gzip.compress(rng.randbytes(5000))[:-100],
    }
    return out


GZIP_PAYLOADS = _gzip_payloads()


@pytest.mark.parametrize("name", sorted(GZIP_PAYLOADS))
def test_gzip_looking_payloads_load_whole(tmp_path, name):
    """Issue 14 item 10: bytes that are not a gzip stream of a tarball, however gzip-like,
    are a payload: saved as bytes, they load as the same bytes."""
    data = GZIP_PAYLOADS[name]
    dest = str(tmp_path / "obj")
    fc.Checkpoint(dest).save_sync(data)
    cp, path = load(tmp_path, dest)
    assert path == cp.path / "payload" and path.read_bytes() == data
    assert inspect_uri(dest).kind == "payload"


def test_an_empty_archive_in_gzip_is_an_empty_folder(tmp_path):
    """What saving an empty folder writes (ours, tarfile's and GNU tar's: zero blocks only) still
    loads as an empty folder; the same bytes uncompressed are a payload (item 1)."""
    for i, blob in enumerate([gzip.compress(bytes(1024)), gzip.compress(bytes(10240))]):
        cp, path = load(tmp_path, store(tmp_path, blob, f"o{i}"))
        assert path == cp.path and list(path.iterdir()) == []
        cp.close()


def _tgz(tmp_path: Path) -> bytes:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "a.bin").write_bytes(random.Random(1).randbytes(300_000))
    (src / "b.txt").write_text("b" * 1000)
    dest = str(tmp_path / "saved")
    fc.Checkpoint(dest).save_sync(src)
    return Path(dest).read_bytes()


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (lambda b: b[: len(b) // 2], "truncated"),
        (lambda b: b[:-4], "truncated"),
        (lambda b: b[:-8] + bytes([b[-8] ^ 1]) + b[-7:], "damaged"),
        (lambda b: b + b"GARBAGE", "not a gzip member"),
        (lambda b: b + bytes(512), "zero bytes follow"),
        (lambda b: b + b"\n", "not a gzip member"),
    ],
    ids=["cut-in-half", "trailer-cut", "bad-crc", "garbage-appended", "zeros-appended", "newline-appended"],
)
def test_a_damaged_tarball_is_corrupt_with_the_right_words(tmp_path, damage, match):
    """A tarball damaged after its first header still raises; the message says what is wrong
    ("truncated" only for an object that ends early)."""
    src = store(tmp_path, damage(_tgz(tmp_path)))
    cp = fc.Checkpoint(str(tmp_path / "next"), src)
    with pytest.raises(CorruptCheckpointError, match=match) as info:
        cp.load_sync()
    if match != "truncated":
        assert "truncated" not in str(info.value)
    assert_fails_clean(cp)


# --------------------------------------------------------------------------- 11: members back to back


def _members_of(*tar_parts: bytes) -> list[bytes]:
    return [gzip.compress(p, mtime=0) for p in tar_parts]


def test_a_wiped_member_is_damage_not_a_missing_file(tmp_path):
    """Issue 14 item 11: zeroing the gzip members that hold one file (same length) made load
    succeed without that file, since common gzip readers skip zeros between members."""
    parts = _members_of(member("a", b"A" * 700), member("b", b"B" * 700), member("c", b"C" * 10) + END)
    cp, path = load(tmp_path, store(tmp_path, b"".join(parts), "whole"))
    assert sorted(p.name for p in path.iterdir()) == ["a", "b", "c"]
    cp.close()
    wiped = parts[0] + bytes(len(parts[1])) + parts[2]
    cp = fc.Checkpoint(str(tmp_path / "next2"), store(tmp_path, wiped, "wiped"))
    with pytest.raises(CorruptCheckpointError, match="zero bytes follow gzip member 1"):
        cp.load_sync()
    assert_fails_clean(cp)


@pytest.mark.parametrize(
    "between",
    [bytes(1), bytes(4096), b"junk", gzip.compress(b"")[:5]],
    ids=["one-zero", "zero-run", "junk", "cut-member"],
)
def test_bytes_between_members_are_damage(tmp_path, between):
    parts = _members_of(member("a", b"A"), member("b", b"B") + END)
    cp = fc.Checkpoint(str(tmp_path / "next"), store(tmp_path, parts[0] + between + parts[1]))
    with pytest.raises(CorruptCheckpointError):
        cp.load_sync()
    assert_fails_clean(cp)


def test_an_empty_member_between_members_is_fine(tmp_path):
    """A complete member holding nothing is valid gzip (some writers flush that way)."""
    parts = _members_of(member("a", b"A"), b"", member("b", b"B") + END)
    _cp, path = load(tmp_path, store(tmp_path, b"".join(parts)))
    assert (path / "a").read_bytes() == b"A" and (path / "b").read_bytes() == b"B"


@pytest.mark.parametrize(
    ("tar", "match"),
    [
        (member("a", b"A") + bytes(512), "ends early"),
        (member("a", b"A") + END + b"x", "data follows"),
        (member("a", b"A") + END + member("b", b"B") + END, "data follows"),
        (member("a", b"A") + bytes(512) + member("b", b"B") + END, "zero block inside"),
    ],
    ids=["lone-zero-block", "byte-after-marker", "member-after-marker", "wiped-header"],
)
@pytest.mark.parametrize("gz", [True, False], ids=["gz", "plain"])
def test_the_tar_stream_ends_with_its_marker_and_nothing_else(tmp_path, tar, match, gz):
    """Every byte of the tar stream is accounted for: members, then two zero blocks, then
    only zero padding (a zeroed header made the members after it vanish)."""
    cp = fc.Checkpoint(str(tmp_path / "next"), store(tmp_path, gzip.compress(tar) if gz else tar))
    with pytest.raises(CorruptCheckpointError, match=match):
        cp.load_sync()
    assert_fails_clean(cp)


def _metadata_of_a_long_name(fmt: int) -> bytes:
    """The metadata member (PAX header, or GNU long name) written before a member named with
    120 characters, with its data block, but not the member it describes."""
    info = tarfile.TarInfo("n" * 120)
    raw = tar_bytes([(info, b"")], gz=False) if fmt == tarfile.PAX_FORMAT else _gnu_tar(info)
    return raw[:1024]


def _gnu_tar(info: tarfile.TarInfo) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        tf.addfile(info, io.BytesIO(b""))
    return buf.getvalue()


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT], ids=["pax", "gnu-long-name"])
@pytest.mark.parametrize("gz", [True, False], ids=["gz", "plain"])
def test_metadata_that_describes_no_member_is_damage(tmp_path, fmt, gz):
    """Found by the state machine: a tar whose member after its PAX header (or GNU long name)
    was zeroed, up to the end, loaded as an empty folder. The metadata names a member that is
    not there: the object is damaged (Python's tarfile refuses it too)."""
    tar = _metadata_of_a_long_name(fmt) + END + bytes(2048)
    assert tar[156:157] in (b"x", b"L")
    blob = gzip.compress(tar) if gz else tar
    cp = fc.Checkpoint(str(tmp_path / "next"), store(tmp_path, blob))
    with pytest.raises(CorruptCheckpointError, match="describes no member"):
        cp.load_sync()
    assert_fails_clean(cp)


def test_record_padding_after_the_marker_is_fine(tmp_path):
    _cp, path = load(tmp_path, store(tmp_path, gzip.compress(member("a", b"A") + END + bytes(8704))))
    assert (path / "a").read_bytes() == b"A"


def _sourcetree(root: Path) -> Path:
    rng = random.Random(11)
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "empty-dir").mkdir()
    (root / "model.bin").write_bytes(rng.randbytes(300_000))
    (root / "sub" / ("long-name-" * 15 + ".json")).write_text('{"epoch": 3}')
    (root / "sub" / "deeper" / "empty.txt").write_bytes(b"")
    (root / "sub" / "naïve.txt").write_text("ok")
    (root / "last.ckpt").symlink_to("model.bin")
    os.link(root / "sub" / "naïve.txt", root / "hard.txt")
    return root


def _write(writer: str, src: Path, obj: Path) -> None:
    entries = sorted(p.name for p in src.iterdir())
    if writer == "ours":
        fc.Checkpoint(str(obj)).save_sync(src)
    elif writer == "flyte":
        import flyte

        flyte.Checkpoint(f"file://{obj}").save_sync(src)
    elif writer == "tarfile":
        with tarfile.open(obj, "w:gz") as tf:  # what flyte.Checkpoint writes
            for name in entries:
                tf.add(src / name, arcname=name)
    else:
        flags = {"gnu-tar": "czf", "gnu-tar-plain": "cf"}[writer]
        names = entries or ["--files-from=/dev/null"]
        subprocess.run(["tar", flags, str(obj), "-C", str(src), *names], check=True)


@pytest.mark.parametrize("empty", [False, True], ids=["tree", "empty"])
@pytest.mark.parametrize("writer", ["ours", "flyte", "tarfile", "gnu-tar", "gnu-tar-plain"])
def test_objects_from_every_writer_still_load(tmp_path, writer, empty):
    """The strict rules reject nothing real writers produce: ours, Flyte's, Python's tarfile,
    GNU tar (gzip'd, and plain), each for a tree with links, long names, empty files and
    folders, and for an empty folder (GNU tar's plain empty archive is zeros: a payload)."""
    if writer == "flyte":
        require(importlib.util.find_spec("flyte") is not None, "flyte is not installed")
    src = tmp_path / "src"
    src.mkdir()
    if not empty:
        _sourcetree(src)
    obj = tmp_path / "obj"
    _write(writer, src, obj)
    cp, path = load(tmp_path, str(obj))
    if empty and writer == "gnu-tar-plain":
        assert path.name == "payload" and path.read_bytes() == obj.read_bytes()
        return
    assert path == cp.path
    assert tree(path) == tree(src)
    if not empty:
        assert os.stat(path / "hard.txt").st_ino == os.stat(path / "sub" / "naïve.txt").st_ino


# --------------------------------------------------------------------------- 9: limits


def _empty_files(n: int, *, prefix: str = "f") -> bytes:
    return gzip.compress(b"".join(member(f"{prefix}{i:06d}", b"") for i in range(n)) + END, 1)


def test_empty_members_count_towards_the_byte_limit(tmp_path, monkeypatch):
    """Issue 14 item 9: with the limit at 1 byte, an object of empty files restored them all
    (only file data counted). Each header now counts its 512 bytes."""
    monkeypatch.setenv("FLYTE_CHECKPOINT_MAX_UNPACKED_BYTES", "1")
    cp = fc.Checkpoint(str(tmp_path / "next"), store(tmp_path, _empty_files(3000)))
    with pytest.raises(UnsafeArchiveError, match=r"limit of 1 bytes .*FLYTE_CHECKPOINT_MAX_UNPACKED_BYTES"):
        cp.load_sync()
    assert_fails_clean(cp)


def test_the_byte_limit_is_the_tar_stream_headers_and_data(tmp_path, monkeypatch):
    """One 100-byte file is 512 bytes of header and 100 of data: a limit of 612 holds it, 611 not."""
    blob = tar_bytes([file_member("a", b"x" * 100)])
    monkeypatch.setenv("FLYTE_CHECKPOINT_MAX_UNPACKED_BYTES", "612")
    cp, path = load(tmp_path, store(tmp_path, blob))
    assert (path / "a").read_bytes() == b"x" * 100
    cp.close()
    monkeypatch.setenv("FLYTE_CHECKPOINT_MAX_UNPACKED_BYTES", "611")
    with pytest.raises(UnsafeArchiveError, match="beyond the limit of 611 bytes"):
        load(tmp_path, store(tmp_path, blob))


def test_the_member_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYTE_CHECKPOINT_MAX_MEMBERS", "50")
    cp, path = load(tmp_path, store(tmp_path, _empty_files(50), "fifty"))
    assert len(list(path.iterdir())) == 50
    cp.close()
    cp = fc.Checkpoint(str(tmp_path / "next2"), store(tmp_path, _empty_files(51), "fifty-one"))
    with pytest.raises(UnsafeArchiveError, match=r"more than 50 members .*FLYTE_CHECKPOINT_MAX_MEMBERS"):
        cp.load_sync()
    assert_fails_clean(cp)


def test_the_default_member_limit_is_generous_and_documented():
    assert LoadLimits().max_members == DEFAULT_MAX_MEMBERS == 1_000_000
    readme = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()
    for name in ("FLYTE_CHECKPOINT_MAX_MEMBERS", "FLYTE_CHECKPOINT_DISK_RESERVE"):
        assert name in readme


@pytest.mark.parametrize(
    "name",
    ["FLYTE_CHECKPOINT_MAX_UNPACKED_BYTES", "FLYTE_CHECKPOINT_MAX_MEMBERS", "FLYTE_CHECKPOINT_DISK_RESERVE"],
)
@pytest.mark.parametrize("value", ["lots", "-1", "1.5", "1e6"])
def test_an_invalid_limit_is_an_error_naming_its_variable(tmp_path, monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    cp = fc.Checkpoint(str(tmp_path / "next"), store(tmp_path, tar_bytes([file_member("a", b"x")])))
    with pytest.raises(ValueError, match=re.escape(f"{name}='{value}'")):
        cp.load_sync()


def test_memory_stays_bounded_whatever_the_members_and_their_names(tmp_path):
    """Issue 14 item 9: 100,000 members with 4,000-character paths took 406 MiB (sets and
    dicts of every path). Here 25,000 such members (about 95 MiB before the fix) are loaded
    in a child process, whose peak RSS may grow by the read-ahead buffers only."""
    prefix = "/".join(["d" * 240] * 15)  # 3,615 characters of folders
    obj = tmp_path / "obj"
    from flyte_checkpoint.format.pipeline import ParallelGzipWriter

    with open(obj, "wb") as f, ParallelGzipWriter(f) as gz:
        for i in range(25_000):
            name = f"{prefix}/{i:08d}" + "f" * 200  # 3,824 characters
            gz.write(ts.header(name, mode=0o644, size=0, mtime=0, typeflag=ts.REGTYPE))
        gz.write(ts.end_of_archive())
    # VmHWM (peak RSS of this process image): ru_maxrss would start at the parent's size
    code = textwrap.dedent(
        """
        import sys, tempfile
        import flyte_checkpoint as fc
        def peak_kib():
            with open("/proc/self/status") as f:
                return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
        tempfile.tempdir = sys.argv[2]
        before = peak_kib()
        with fc.Checkpoint(sys.argv[2] + "/next", sys.argv[1]) as cp:
            path = cp.load_sync()
            files = sum(1 for _ in path.joinpath(*[("d" * 240)] * 15).iterdir())
        print(files, (peak_kib() - before) // 1024)
        """
    )
    child = [sys.executable, "-c", code, str(obj), str(tmp_path)]
    out = subprocess.run(child, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    files, grew_mib = map(int, out.stdout.split())
    assert files == 25_000
    assert grew_mib < 48, f"peak RSS grew by {grew_mib} MiB restoring 25,000 long-named members"


def test_the_default_disk_reserve():
    assert default_reserve(200 * 2**30) == 2 * 2**30  # 1%
    assert default_reserve(2 * 2**30) == 64 * MiB  # at least 64 MiB
    assert default_reserve(10 * 2**40) == 4 * 2**30  # at most 4 GiB
    assert default_reserve(100 * MiB) == 10 * MiB  # never more than 10%


@pytest.mark.parametrize("kind", ["tarball", "payload"])
def test_the_disk_reserve_stops_a_load_before_the_disk_fills(tmp_path, monkeypatch, kind):
    """Issue 14 item 9: with no limit set, a bomb filled the disk before failing. A load now
    stops before the workspace's file system goes below the reserve, saying what to do; the
    reserve is set far above the free space so the check triggers without filling anything."""
    monkeypatch.setenv("FLYTE_CHECKPOINT_DISK_RESERVE", str(2**60))
    blob = tar_bytes([file_member("a", b"x" * 5000)]) if kind == "tarball" else b"p" * 5000
    src = store(tmp_path, blob)
    cp = fc.Checkpoint(str(tmp_path / "next"), src)
    with pytest.raises(WorkspaceError) as info:
        cp.load_sync()
    message = str(info.value)
    assert src in message and str(cp.path.parent) in message
    assert "FLYTE_CHECKPOINT_DISK_RESERVE" in message and "Free space" in message
    assert_fails_clean(cp)
    monkeypatch.setenv("FLYTE_CHECKPOINT_DISK_RESERVE", "0")  # the check off: it loads
    _cp2, path = load(tmp_path, src)
    assert path is not None


# --------------------------------------------------------------------------- 13: the file system refuses


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir()
    if os.geteuid() != 0:
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
    )
    return done.returncode == 0


@pytest.mark.parametrize("kind", ["payload", "tarball"])
def test_a_full_disk_is_an_error_naming_the_uri_the_workspace_and_what_to_do(tmp_path, monkeypatch, kind):
    """Issue 14 item 13: disk full while restoring raised a bare ``[Errno 28]``. A real
    ENOSPC, on a 1 MiB tmpfs holding the workspace (mounting needs root, as CI runs)."""
    small = tmp_path / "small"
    require(_mount_tmpfs(small, "1m"), "mounting a 1 MiB tmpfs needs root (CAP_SYS_ADMIN)")
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(small))
        monkeypatch.setenv("FLYTE_CHECKPOINT_DISK_RESERVE", "0")  # let it fill
        data = random.Random(3).randbytes(2 * MiB)
        blob = tar_bytes([file_member("big.bin", data)]) if kind == "tarball" else data
        src = store(tmp_path, blob)
        cp = fc.Checkpoint(str(tmp_path / "next"), src)
        with pytest.raises(WorkspaceError, match="no space left") as info:
            cp.load_sync()
        message = str(info.value)
        assert src in message and str(small) in message and "free space" in message
        if kind == "tarball":
            assert "'big.bin'" in message
        assert_fails_clean(cp)
        cp.close()
    finally:
        subprocess.run(["umount", str(small)], check=True)


@pytest.mark.parametrize("kind", ["payload", "tarball"])
def test_a_file_over_the_size_limit_is_a_typed_error(tmp_path, kind):
    """The same on a real EFBIG (a 1 MiB RLIMIT_FSIZE in a child process), where no mount is
    needed: the error names the URI and says what to raise."""
    data = random.Random(4).randbytes(2 * MiB)
    blob = tar_bytes([file_member("big.bin", data)]) if kind == "tarball" else data
    src = store(tmp_path, blob)
    code = textwrap.dedent(
        """
        import os, resource, signal, sys, tempfile
        import flyte_checkpoint as fc
        tempfile.tempdir = sys.argv[2]
        os.environ["FLYTE_CHECKPOINT_DISK_RESERVE"] = "0"
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        cp = fc.Checkpoint(sys.argv[2] + "/next", sys.argv[1])
        try:
            cp.load_sync()
        except Exception as exc:
            print(type(exc).__name__, list(cp.path.iterdir()), exc)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code, src, str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith("WorkspaceError [] "), out
    assert src in out and "ulimit -f" in out
    if kind == "tarball":
        assert "'big.bin'" in out


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as f:
        for offset in (0, size // 2, size - 3):
            f.seek(offset)
            f.write(b"abc")
        f.truncate(size)
    return path


@pytest.mark.parametrize("kind", ["tarball", "payload"])
def test_sparse_files_are_restored_with_their_holes(tmp_path, kind):
    """Issue 14 item 13: a sparse file was restored fully allocated (2 GiB for a 2 GiB file of
    a few bytes). Zero runs are now written as holes, and the content is the same."""
    size = 64 * MiB
    src = tmp_path / "src"
    src.mkdir()
    sparse = _sparse(src / "sparse.bin", size)
    (src / "dense.bin").write_bytes(b"\1" * 100_000)
    dest = str(tmp_path / "obj")
    fc.Checkpoint(dest).save_sync(src if kind == "tarball" else sparse)
    _cp, path = load(tmp_path, dest)
    restored = path / "sparse.bin" if kind == "tarball" else path
    st = restored.stat()
    assert st.st_size == size
    assert st.st_blocks * 512 < MiB, f"{st.st_blocks * 512} bytes allocated for 9 bytes of data"
    assert restored.read_bytes() == sparse.read_bytes()
    if kind == "tarball":
        assert (path / "dense.bin").read_bytes() == b"\1" * 100_000


def test_a_file_ending_in_a_hole_keeps_its_length(tmp_path):
    data = b"head" + bytes(3 * MiB)
    _cp, path = load(tmp_path, store(tmp_path, tar_bytes([file_member("f", data)])))
    assert (path / "f").read_bytes() == data


@pytest.mark.parametrize(
    "name",
    ["n" * 300, "/".join(["d" * 250] * 20) + "/file"],
    ids=["name-over-NAME_MAX", "path-over-PATH_MAX"],
)
def test_a_name_too_long_for_the_file_system_names_the_member(tmp_path, name):
    src = store(tmp_path, tar_bytes([file_member(name, b"x")]))
    cp = fc.Checkpoint(str(tmp_path / "next"), src)
    with pytest.raises(PathTooLongError, match="too long") as info:
        cp.load_sync()
    message = str(info.value)
    assert name[:100] in message and src in message and "shorter" in message
    assert len(message) < 1000  # the member is shown shortened
    assert_fails_clean(cp)


# --------------------------------------------------------------------------- the strict gzip reader


@pytest.fixture(params=["isal", "zlib"])
def decoder(request, monkeypatch):
    """Run a test with ISA-L's member decoder and with the standard library's."""
    if request.param == "zlib":
        monkeypatch.setattr(compression, "_isal_zlib", None)
    else:
        require(compression._isal_zlib is not None, "isal is not installed")
    return request.param


def _read_all(blob: bytes, n: int = 1000) -> bytes:
    reader = compression.GzipMembers(io.BytesIO(blob))
    parts = []
    while part := reader.read(n):
        parts.append(part)
    return b"".join(parts)


def test_members_decode_back_to_back(decoder):
    rng = random.Random(5)
    pieces = [rng.randbytes(rng.randrange(0, 300_000)) for _ in range(6)] + [b"", b"a" * 500_000]
    blob = b"".join(zlib.compress(p, 6, wbits=31) for p in pieces)
    assert _read_all(blob) == b"".join(pieces)
    assert _read_all(blob, 1 << 20) == b"".join(pieces)


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (lambda a, b: a + bytes(10) + b, "zero bytes follow gzip member 1"),
        (lambda a, b: a + b + bytes(1), "zero bytes follow gzip member 2"),
        (lambda a, b: a + b"x" + b, "not a gzip member"),
        (lambda a, b: a + b[:-3], "ends inside member 2"),
        (lambda a, b: a + b[:5], "ends inside member 2"),
        (lambda a, b: a[:30] + bytes([a[30] ^ 0xFF]) + a[31:] + b, "member 1 .* is damaged"),
    ],
    ids=["zeros-between", "zero-after", "junk-between", "cut-trailer", "cut-header", "flipped"],
)
def test_the_reader_refuses_anything_between_after_or_missing(decoder, damage, match):
    rng = random.Random(6)
    a, b = (zlib.compress(rng.randbytes(2000) + bytes(3000), 6, wbits=31) for _ in range(2))
    with pytest.raises(CorruptCheckpointError, match=match):
        _read_all(damage(a, b))
