"""Property-based fuzzing of the reader: any bytes either restore inside the workspace or raise
one of the project's errors; nothing is written outside, nothing hangs."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flyte_checkpoint.errors import CheckpointError
from flyte_checkpoint.format.restore import restore

from .helpers import dir_member, file_member, link_member, tar_bytes

NAMES = st.sampled_from(["a", "b/c", "../x", "/abs", "d/../../e", "./f", "g/", "é", "A", "a/b/c/d", ".."])


def _member(kind: str, name: str, other: str, data: bytes):
    if kind == "file":
        return file_member(name, data)
    if kind == "dir":
        return dir_member(name)
    return link_member(name, other, hard=kind == "hard")


MEMBERS = st.lists(
    st.builds(
        _member, st.sampled_from(["file", "dir", "sym", "hard"]), NAMES, NAMES, st.binary(max_size=600)
    ),
    max_size=6,
)


def _restore_in_sandbox(blob: bytes) -> None:
    with tempfile.TemporaryDirectory() as sandbox:
        dest = Path(sandbox, "inner", "dest")
        dest.mkdir(parents=True)
        before = sorted(os.listdir(sandbox))
        try:
            restore(io.BytesIO(blob), str(dest), len(blob))
        except CheckpointError:
            pass
        assert sorted(os.listdir(sandbox)) == before
        assert sorted(os.listdir(Path(sandbox, "inner"))) == ["dest"]
        for root, dirs, files in os.walk(dest):
            for name in dirs + files:
                p = os.path.join(root, name)
                if os.path.islink(p):
                    real = os.path.realpath(p)
                    assert real == str(dest) or real.startswith(str(dest) + "/"), (p, real)


FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(MEMBERS, st.booleans())
def test_generated_archives_stay_inside(members, gz):
    _restore_in_sandbox(tar_bytes(members, gz=gz))


@FUZZ
@given(MEMBERS, st.data())
def test_mutated_archives_raise_only_our_errors(members, data):
    blob = bytearray(tar_bytes(members, gz=data.draw(st.booleans())))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(blob) - 1))
        blob[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(blob)))
    _restore_in_sandbox(bytes(blob[:cut]) if data.draw(st.booleans()) else bytes(blob))


@FUZZ
@given(st.binary(min_size=1, max_size=4096))
def test_random_bytes_raise_only_our_errors(blob):
    _restore_in_sandbox(blob)
    _restore_in_sandbox(gzip.compress(blob))


def test_reference_written_archive_with_every_feature_restores(tmp_path):
    src = tmp_path / "src"
    (src / "deep" / "er").mkdir(parents=True)
    (src / "deep" / "er" / "f.bin").write_bytes(os.urandom(3000))
    (src / ("long" * 40)).write_text("long name")
    os.symlink("deep/er/f.bin", src / "link")
    blob = io.BytesIO()
    with tarfile.open(fileobj=blob, mode="w:gz") as tf:  # what flyte.Checkpoint writes
        for child in sorted(src.iterdir()):
            tf.add(child, arcname=child.name)
    dest = tmp_path / "dest"
    dest.mkdir()
    assert restore(io.BytesIO(blob.getvalue()), str(dest), len(blob.getvalue())) is True
    assert (dest / "link").read_bytes() == (src / "deep" / "er" / "f.bin").read_bytes()
    assert (dest / ("long" * 40)).read_text() == "long name"
