"""Extraction never leaves the workspace; damaged streams are corruption errors."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import CheckpointError, CorruptCheckpointError, UnsafeArchiveError
from flyte_checkpoint.format.archive import pack_directory, unpack

from .helpers import dir_member, file_member, link_member, special_member, tar_bytes


def load_object(tmp_path: Path, blob: bytes) -> tuple[fc.Checkpoint, Path]:
    obj = tmp_path / "obj"
    obj.write_bytes(blob)
    cp = fc.Checkpoint(str(tmp_path / "out"), str(obj))
    return cp, obj


def assert_refused(tmp_path: Path, blob: bytes, match: str) -> None:
    outside_before = {p.name for p in tmp_path.iterdir()} | {"obj"}
    cp, _ = load_object(tmp_path, blob)
    with pytest.raises(UnsafeArchiveError, match=match):
        cp.load_sync()
    assert list(cp.path.iterdir()) == [], "a failed load left files in the workspace"
    assert {p.name for p in tmp_path.iterdir()} == outside_before
    cp.close()


def test_absolute_member_name_is_refused(tmp_path):
    assert_refused(tmp_path, tar_bytes([file_member("/tmp/evil-abs", b"x")]), "absolute name")


def test_dotdot_member_is_refused(tmp_path):
    blob = tar_bytes([file_member("ok.txt", b"ok"), file_member("a/../../evil", b"x")])
    assert_refused(tmp_path, blob, "climbs out with '..'")


def test_symlink_to_absolute_path_is_refused(tmp_path):
    assert_refused(tmp_path, tar_bytes([link_member("etc", "/etc")]), "absolute path '/etc'")


def test_symlink_leaving_the_tree_is_refused(tmp_path):
    assert_refused(tmp_path, tar_bytes([link_member("up", "../../..")]), "resolves outside")


def test_member_written_through_a_symlink_is_refused(tmp_path):
    blob = tar_bytes([link_member("d", "."), file_member("d/x", b"x")])
    assert_refused(tmp_path, blob, "under the symbolic link 'd'")


def test_links_chained_through_other_links_are_refused(tmp_path):
    # each link alone looks inside; followed together they climb out
    blob = tar_bytes([dir_member("a"), link_member("a/here", "."), link_member("esc", "a/here/../..")])
    assert_refused(tmp_path, blob, "resolves outside")


def test_hard_link_to_outside_is_refused(tmp_path):
    assert_refused(tmp_path, tar_bytes([link_member("h", "/etc/passwd", hard=True)]), "absolute name")
    assert_refused(tmp_path, tar_bytes([link_member("h", "../x", hard=True)]), "climbs out")


def test_hard_link_to_unknown_member_is_refused(tmp_path):
    blob = tar_bytes([link_member("h", "not-in-archive", hard=True)])
    assert_refused(tmp_path, blob, "not an earlier file")


@pytest.mark.parametrize(
    ("kind", "word"), [(tarfile.FIFOTYPE, "FIFO"), (tarfile.CHRTYPE, "device"), (tarfile.BLKTYPE, "device")]
)
def test_devices_and_fifos_are_refused(tmp_path, kind, word):
    assert_refused(tmp_path, tar_bytes([special_member("dev", kind)]), word)


def test_unpacked_size_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYTE_CHECKPOINT_MAX_UNPACKED_BYTES", "1000")
    blob = tar_bytes([file_member("big", bytes(5000))])
    assert_refused(tmp_path, blob, "beyond the limit of 1000 bytes")


def test_safe_links_inside_the_tree_are_kept(tmp_path):
    blob = tar_bytes(
        [
            dir_member("epochs"),
            file_member("epochs/3.ckpt", b"three"),
            link_member("last.ckpt", "epochs/3.ckpt"),
            link_member("epochs/same", "epochs/3.ckpt", hard=True),
        ]
    )
    cp, _ = load_object(tmp_path, blob)
    path = cp.load_sync()
    assert (path / "last.ckpt").read_bytes() == b"three"
    assert os.readlink(path / "last.ckpt") == "epochs/3.ckpt"
    assert (path / "epochs" / "same").read_bytes() == b"three"


def test_member_bigger_than_its_header_says_is_corrupt(tmp_path):
    raw = bytearray(tar_bytes([file_member("a", b"A" * 600), file_member("b", b"B" * 10)], gz=False))
    # shrink the first member's declared size: its extra data is then read as a header
    block = raw[:512]
    block[124:136] = b"%011o\0" % 100
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    raw[:512] = block
    cp, _ = load_object(tmp_path, bytes(raw))
    with pytest.raises(CorruptCheckpointError, match="damaged tar header"):
        cp.load_sync()


def test_tar_without_end_marker_is_truncated(tmp_path):
    raw = tar_bytes([file_member("a", b"A" * 600)], gz=False)
    cp, _ = load_object(tmp_path, raw[:1536])
    with pytest.raises(CorruptCheckpointError, match="ends early"):
        cp.load_sync()


def test_bytes_whose_first_header_is_damaged_are_a_payload(tmp_path):
    """Only a valid first header makes a tarball (issue 14): anything else is bytes that
    someone saved, returned as they are."""
    raw = bytearray(tar_bytes([file_member("a", b"A")], gz=False))
    raw[0] ^= 0xFF
    cp, _ = load_object(tmp_path, bytes(raw))
    assert cp.load_sync().read_bytes() == bytes(raw)


def test_errors_are_checkpoint_errors(tmp_path):
    cut = tar_bytes([file_member("a", os.urandom(5000))])[:-100]
    for blob in (tar_bytes([file_member("/abs", b"")]), cut):
        cp, _ = load_object(tmp_path, blob)
        with pytest.raises(CheckpointError):
            cp.load_sync()
        cp.close()


def test_pack_then_unpack_matches_tarfile(tmp_path):
    src = tmp_path / "src"
    (src / "n").mkdir(parents=True)
    (src / "n" / ("é" * 80 + ".bin")).write_bytes(b"unicode long name")
    (src / "plain").write_bytes(b"p" * 513)
    os.link(src / "plain", src / "hard")
    buf = io.BytesIO()
    pack_directory(src, buf)
    with tarfile.open(fileobj=io.BytesIO(buf.getvalue())) as tf:
        names = {m.name: m for m in tf.getmembers()}
        assert names["hard"].isfile() and names["plain"].islnk()  # the first one met is the file
        assert tf.extractfile("n/" + "é" * 80 + ".bin").read() == b"unicode long name"
    out = tmp_path / "out"
    out.mkdir()
    unpack(io.BytesIO(buf.getvalue()), out)
    assert (out / "n" / ("é" * 80 + ".bin")).read_bytes() == b"unicode long name"
    assert (out / "hard").read_bytes() == b"p" * 513
