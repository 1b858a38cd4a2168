"""Manifests never change what Flyte, tarfile and tar read (issue 37): the object's bytes are as
before, and an object Flyte wrote over ours is listed by fc.history as one without a manifest."""

from __future__ import annotations

import shutil
import subprocess
import tarfile

import pytest

import flyte_checkpoint as fc
from conftest import require

from .helpers import tree
from .test_flyte_interop import make_tree, members, uri

try:
    import flyte
except ImportError:
    flyte = None


@pytest.fixture(autouse=True)
def _need_flyte():
    require(flyte is not None, "flyte is not installed (pip install flyte==2.12.1)")


def test_flyte_tarfile_and_tar_read_objects_saved_with_manifests(tmp_path):
    src = make_tree(tmp_path / "src")
    dest = tmp_path / "run" / "0" / "_flytecheckpoints"
    cp = fc.Checkpoint(uri(dest), keeps_generations=True)
    cp.save_sync(src, step=1, metrics={"loss": 1.0})
    (src / "sub" / "state.json").write_text('{"epoch": 4}')
    cp.save_sync(src, step=2, metrics={"loss": 0.5})
    entries = fc.history(str(dest))
    assert [(e.step, e.has_manifest) for e in entries] == [(2, True), (1, True)]
    require(shutil.which("tar") is not None, "GNU tar is needed")
    for e in entries:
        obj = e.uri
        theirs = flyte.Checkpoint(uri(tmp_path / f"flyte-{e.step}"), uri(obj))
        got = theirs.load_sync()
        assert (got / "sub" / "state.json").read_text() == ('{"epoch": 4}' if e.step == 2 else '{"epoch": 3}')
        if e.step == 2:
            assert tree(got) == tree(src)
        with open(obj, "rb") as f:
            assert set(members(f.read())) >= {"model.bin", "sub/state.json"}
        with tarfile.open(obj, "r:gz") as tar:
            assert "sub/state.json" in tar.getnames()
        listed = subprocess.run(["tar", "tzf", obj], capture_output=True, text=True)
        assert listed.returncode == 0 and "sub/state.json" in listed.stdout.split()
    # the object holds the tree only: nothing of the sidecar went into it
    with tarfile.open(dest, "r:gz") as tar:
        assert not [n for n in tar.getnames() if "fcp" in n]


def test_bytes_saved_with_a_manifest_are_the_bytes_flyte_writes(tmp_path):
    data = b"\x00step=41\xff" * 1000
    fc.Checkpoint(uri(tmp_path / "ours")).save_sync(data, step=41, metrics={"acc": 0.9})
    flyte.Checkpoint(uri(tmp_path / "theirs")).save_sync(data)
    assert (tmp_path / "ours").read_bytes() == (tmp_path / "theirs").read_bytes() == data
    theirs = flyte.Checkpoint(uri(tmp_path / "next"), uri(tmp_path / "ours"))  # keeps its workspace
    assert theirs.load_sync().read_bytes() == data


def test_flyte_saving_over_ours_is_listed_without_a_manifest(tmp_path):
    dest = tmp_path / "run" / "1" / "_flytecheckpoints"
    ours = fc.Checkpoint(uri(dest), keeps_generations=True)
    ours.save_sync(b"ours, step 1", step=1)
    ours.save_sync(b"ours, step 2", step=2)
    flyte.Checkpoint(uri(dest)).save_sync(b"flyte's own save")
    entries = fc.history(str(tmp_path / "run") + "/")
    assert [(e.step, e.has_manifest, e.size) for e in entries] == [
        (None, False, len(b"flyte's own save")),
        (1, True, len(b"ours, step 1")),
    ]
    # our next save does not keep Flyte's object as a generation of ours, and records itself
    ours.save_sync(b"ours, step 3", step=3)
    assert [(e.step, e.has_manifest) for e in fc.history(str(dest))] == [(3, True), (1, True)]
    # and a history of a folder Flyte alone wrote lists its object
    flyte.Checkpoint(uri(tmp_path / "flyte-only" / "0" / "ckpt")).save_sync(b"only flyte")
    only = fc.history(str(tmp_path / "flyte-only") + "/")
    assert [(e.attempt, e.has_manifest, e.size) for e in only] == [(0, False, len(b"only flyte"))]
