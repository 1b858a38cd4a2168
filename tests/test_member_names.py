"""Names are the bytes the tar stores (issue 32, item 4): a partial restore, ``load_file``,
``pull --member``, ``inspect`` and a sharded rank's own files select a file by its stored name,
never by a rewritten one. On POSIX ``a\\b`` is one file, beside the file ``b`` of the folder
``a``; an NFC and an NFD spelling are two names; a GNU tar may store names that are not UTF-8.
Only what a path means on POSIX is the same name (``./a//b/`` is ``a/b``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import unicodedata
from pathlib import Path, PurePosixPath, PureWindowsPath

import pytest

import flyte_checkpoint as fc
from conftest import require
from flyte_checkpoint.cli import main
from flyte_checkpoint.errors import NotFoundError
from flyte_checkpoint.format import index as ix
from flyte_checkpoint.format.partial import member_name
from flyte_checkpoint.sharded import load_sharded
from flyte_checkpoint.storage.registry import store_for

from .test_sharded import save_with_threads

BACKSLASHED = "a\\b"
NFC = unicodedata.normalize("NFC", "café.txt")
NFD = unicodedata.normalize("NFD", "café.txt")


def odd_tree(root: Path) -> Path:
    """A real ``a/b`` beside a file literally named ``a\\b``, and one name in two Unicode forms."""
    (root / "a").mkdir(parents=True)
    (root / "a" / "b").write_bytes(b"the file b in the folder a")
    (root / BACKSLASHED).write_bytes(b"the file named a-backslash-b")
    (root / NFC).write_bytes(b"precomposed")
    (root / NFD).write_bytes(b"decomposed")
    return root


@pytest.fixture(params=["indexed", "plain"])
def saved(request, tmp_path) -> tuple[Path, Path]:
    """The odd tree, saved by this library (with an index) or by ``tarfile`` (without one)."""
    src = odd_tree(tmp_path / "src")
    assert len(os.listdir(src)) == 4, "the file system folds names: this test needs one that does not"
    obj = tmp_path / f"{request.param}.tgz"
    if request.param == "indexed":
        fc.Checkpoint(str(obj)).save_sync(str(src))
        assert ix.read_index(store_for(str(obj)), str(obj)) is not None
    else:
        with tarfile.open(obj, "w:gz") as tf:
            tf.add(src, arcname=".")
    return src, obj


def test_a_backslash_is_part_of_a_name_for_load_file(saved, tmp_path):
    _, obj = saved
    cp = fc.Checkpoint(str(tmp_path / "next"), str(obj))
    assert cp.load_file_sync("a/b", tmp_path / "slash").read_bytes() == b"the file b in the folder a"  # type: ignore[union-attr]
    assert cp.load_file_sync(BACKSLASHED, tmp_path / "back").read_bytes() == b"the file named a-backslash-b"  # type: ignore[union-attr]


def test_a_backslash_is_part_of_a_name_for_members(saved, tmp_path):
    _, obj = saved
    with fc.Checkpoint(str(tmp_path / "next"), str(obj)) as cp:
        got = cp.load_sync(members=[BACKSLASHED])
        assert got is not None
        assert sorted(os.listdir(got)) == [BACKSLASHED]
        assert (got / BACKSLASHED).read_bytes() == b"the file named a-backslash-b"
    with fc.Checkpoint(str(tmp_path / "next"), str(obj)) as cp:
        got = cp.load_sync(members=["a"])  # the folder a holds b, not the file a\b
        assert got is not None
        assert (
            sorted(os.listdir(got)) == ["a"]
            and (got / "a" / "b").read_bytes() == b"the file b in the folder a"
        )


def test_unicode_forms_are_different_names_and_a_miss_says_which_it_may_mean(saved, tmp_path):
    _, obj = saved
    cp = fc.Checkpoint(str(tmp_path / "next"), str(obj))
    assert cp.load_file_sync(NFC, tmp_path / "nfc").read_bytes() == b"precomposed"  # type: ignore[union-attr]
    assert cp.load_file_sync(NFD, tmp_path / "nfd").read_bytes() == b"decomposed"  # type: ignore[union-attr]
    (tmp_path / "only").mkdir()
    (tmp_path / "only" / NFD).write_bytes(b"decomposed")
    fc.Checkpoint(str(tmp_path / "one")).save_sync(str(tmp_path / "only"))
    with pytest.raises(NotFoundError) as caught:
        fc.Checkpoint(str(tmp_path / "n2"), str(tmp_path / "one")).load_file_sync(NFC)
    message = str(caught.value)
    assert f"{NFC!r} is not {NFD!r}, which it holds" in message
    assert "a backslash is part of a name, and Unicode NFC and NFD spellings are different names" in message


def test_a_miss_by_a_slash_for_a_backslash_names_the_stored_file(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "w\\x.bin").write_bytes(b"w")
    fc.Checkpoint(str(tmp_path / "obj")).save_sync(str(tmp_path / "src"))
    cp = fc.Checkpoint(str(tmp_path / "next"), str(tmp_path / "obj"))
    with pytest.raises(NotFoundError) as caught:
        cp.load_sync(members=["w/x.bin"])
    assert f"{'w/x.bin'!r} is not {'w' + chr(92) + 'x.bin'!r}, which it holds" in str(caught.value)


def test_what_a_path_means_on_posix_is_the_same_name(saved, tmp_path):
    _, obj = saved
    assert member_name("./a//b/") == "a/b"
    assert member_name(b"a/./b") == "a/b"
    assert member_name(PurePosixPath("a\\b")) == "a\\b"
    assert member_name(PureWindowsPath("a\\b")) == "a/b"  # a Windows path's separators are its own
    with fc.Checkpoint(str(tmp_path / "next"), str(obj)) as cp:
        got = cp.load_sync(members=["./a//"])
        assert got is not None and sorted(os.listdir(got)) == ["a"]


def test_pull_member_and_inspect_take_the_stored_name(saved, tmp_path, capsys):
    _, obj = saved
    assert main(["pull", str(obj), str(tmp_path / "out"), "--member", BACKSLASHED]) == 0
    assert sorted(os.listdir(tmp_path / "out")) == [BACKSLASHED]
    assert (tmp_path / "out" / BACKSLASHED).read_bytes() == b"the file named a-backslash-b"
    capsys.readouterr()
    assert main(["inspect", str(obj), "--members", "--json"]) == 0
    names = {m["name"].removeprefix("./") for m in json.loads(capsys.readouterr().out)["member_list"]}
    assert {BACKSLASHED, "a/b", NFC, NFD} <= names


def gnu_tar_with_a_latin1_name(tmp_path: Path) -> tuple[Path, bytes]:
    """An object made by GNU tar whose one file's name is not UTF-8 (``café`` in Latin-1)."""
    require(shutil.which("tar") is not None, "GNU tar is needed")
    raw = b"caf\xe9.bin"
    src = tmp_path / "latin1"
    src.mkdir()
    with open(os.path.join(os.fsencode(src), raw), "wb") as f:
        f.write(b"latin-1 named")
    obj = tmp_path / "gnu.tgz"
    run = subprocess.run(["tar", "czf", str(obj), "--format=gnu", "-C", str(src), "."], capture_output=True)
    assert run.returncode == 0, run.stderr
    return obj, raw


def test_names_that_are_not_utf8_are_selected_by_their_bytes_or_their_escaped_text(tmp_path):
    obj, raw = gnu_tar_with_a_latin1_name(tmp_path)
    text = os.fsdecode(raw)  # 'caf\udce9.bin': how Python spells those bytes in a str
    for i, name in enumerate((raw, text)):
        with fc.Checkpoint(str(tmp_path / f"n{i}"), str(obj)) as cp:
            got = cp.load_sync(members=[name])
            assert got is not None and os.listdir(os.fsencode(got)) == [raw]
            assert Path(got, text).read_bytes() == b"latin-1 named"
    # the command line, as a shell runs it: the name's bytes in, the same bytes printed
    for command in (
        [b"pull", os.fsencode(obj), os.fsencode(tmp_path / "out"), b"--member", raw],
        [b"inspect", os.fsencode(obj), b"--members"],
    ):
        run = subprocess.run([sys.executable, "-m", "flyte_checkpoint.cli", *command], capture_output=True)
        assert (run.returncode, run.stderr) == (0, b""), run.stderr
        assert raw in run.stdout
    assert os.listdir(os.fsencode(tmp_path / "out")) == [raw]


def test_a_ranks_own_files_with_a_backslash_come_back(tmp_path):
    folders = []
    for rank in range(2):
        folder = tmp_path / f"rank{rank}"
        folder.mkdir()
        (folder / f"r{rank}\\shard.bin").write_bytes(f"rank {rank}, named with a backslash".encode())
        (folder / f"r{rank}").mkdir()
        (folder / f"r{rank}" / "shard.bin").write_bytes(f"rank {rank}, in a folder".encode())
        folders.append(folder)
    dest = str(tmp_path / "ckpt")
    assert save_with_threads(dest, folders) == []
    for rank in range(2):
        with fc.Checkpoint(str(tmp_path / "next"), dest) as cp:
            got = load_sharded(cp, own=True, rank=rank)
            assert got is not None
            assert (
                got / f"r{rank}\\shard.bin"
            ).read_bytes() == f"rank {rank}, named with a backslash".encode()
            assert (got / f"r{rank}" / "shard.bin").read_bytes() == f"rank {rank}, in a folder".encode()
            assert sorted(os.listdir(got)) == sorted([f"r{rank}", f"r{rank}\\shard.bin"])


def test_a_file_and_the_folder_above_it_may_both_be_asked_for(saved, tmp_path):
    """Found by the readers state machine: ``members=["a/b", "a"]`` said the checkpoint holds no
    ``'a'``, because the file matched its own name first and the folder was never noted."""
    _, obj = saved
    for names in (["a/b", "a"], ["a", "a/b"], ["a/b", "./a/"]):
        with fc.Checkpoint(str(tmp_path / "next"), str(obj)) as cp:
            got = cp.load_sync(members=names)
            assert got is not None and sorted(os.listdir(got / "a")) == ["b"], names
