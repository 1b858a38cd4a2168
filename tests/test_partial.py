"""Partial restore (issue 18): ``load(members=[...])`` restores the selected files and folders,
reading only their gzip members where the object has an index, streaming it where it has none,
with the same result and the same safety rules either way."""

from __future__ import annotations

import asyncio
import os
import stat
import tarfile
import uuid
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import CorruptCheckpointError, NotFoundError, UnsafeArchiveError
from flyte_checkpoint.format import index as ix
from flyte_checkpoint.format.partial import absent, read_file
from flyte_checkpoint.storage.registry import store_for

from .helpers import dir_member, file_member, link_member, special_member, tar_bytes, tree
from .reliability.backends import backend, backend_pool  # noqa: F401
from .spystore import spying
from .uri_secrets import with_password

MiB = 1024 * 1024


def make_tree(root: Path) -> Path:
    (root / "model" / "layers").mkdir(parents=True)
    (root / "model" / "empty").mkdir()
    (root / "model" / "weights.bin").write_bytes(os.urandom(300_000))  # aligned: members of its own
    (root / "model" / "layers" / "a.bin").write_bytes(b"a" * 70_000)
    (root / "model" / "layers" / "b.txt").write_bytes(b"b")  # shares a member
    (root / "model" / "latest").symlink_to("weights.bin")
    (root / "optim.pt").write_bytes(os.urandom(2 * MiB))
    (root / "meta.json").write_bytes(b'{"epoch": 7}')
    os.link(root / "meta.json", root / "model" / "meta-link.json")
    os.chmod(root / "model" / "layers" / "b.txt", 0o751)
    os.utime(root / "meta.json", (1_600_000_000, 1_600_000_000))
    return root


def save_both(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    """The tree, saved by this library (indexed) and by ``tarfile`` as Flyte does (no index)."""
    src = make_tree(tmp_path / "src")
    indexed = tmp_path / "indexed.tgz"
    fc.Checkpoint(str(indexed)).save_sync(str(src))
    plain = tmp_path / "plain.tgz"
    with tarfile.open(plain, "w:gz") as tf:
        tf.add(src, arcname=".")
    assert ix.read_index(store_for(str(indexed)), str(indexed)) is not None
    assert ix.read_index(store_for(str(plain)), str(plain)) is None
    return src, {"indexed": indexed, "plain": plain}


@pytest.fixture(params=["indexed", "plain"])
def saved(request, tmp_path):
    src, objs = save_both(tmp_path)
    return src, objs[request.param]


def listing(root: Path) -> dict[str, tuple[str, int]]:
    """Each path under ``root``: its kind and (files) size."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        kind = "link" if stat.S_ISLNK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "file"
        out[str(p.relative_to(root))] = (kind, st.st_size if kind == "file" else 0)
    return out


def test_members_restore_the_selected_files_and_folders_alike_with_or_without_an_index(saved, tmp_path):
    src, obj = saved
    cp = fc.Checkpoint(str(tmp_path / "next"), str(obj))
    got = cp.load_sync(members=["model", "./meta.json"])
    assert got == cp.path  # the same kind of path as a full load of a folder
    assert listing(got) == {
        "meta.json": ("file", 12),
        "model": ("dir", 0),
        "model/layers": ("dir", 0),
        "model/layers/a.bin": ("file", 70_000),
        "model/layers/b.txt": ("file", 1),
        "model/meta-link.json": ("file", 12),
        "model/weights.bin": ("file", 300_000),
    }  # no symbolic link ("model/latest"), no empty folder ("model/empty"), nothing unselected
    for name in ("model/weights.bin", "model/layers/a.bin", "meta.json"):
        assert (got / name).read_bytes() == (src / name).read_bytes()
    assert os.stat(got / "meta.json").st_ino == os.stat(got / "model/meta-link.json").st_ino  # hard link kept
    assert stat.S_IMODE(os.stat(got / "model/layers/b.txt").st_mode) == 0o751
    assert int(os.stat(got / "meta.json").st_mtime) == 1_600_000_000
    cp.close()


def test_a_hard_link_whose_file_is_not_selected_gets_its_data(saved, tmp_path):
    _src, obj = saved
    cp = fc.Checkpoint(str(tmp_path / "next"), str(obj))
    got = cp.load_sync(members=["model/meta-link.json"])
    assert got is not None and listing(got) == {"model": ("dir", 0), "model/meta-link.json": ("file", 12)}
    assert (got / "model/meta-link.json").read_bytes() == b'{"epoch": 7}'
    got = cp.load_sync(members=["optim.pt"])  # a second selection adds to the workspace
    assert got is not None and set(listing(got)) == {"model", "model/meta-link.json", "optim.pt"}


def test_async_load_takes_members_too(saved, tmp_path):
    _src, obj = saved
    cp = fc.Checkpoint(str(tmp_path / "next"), str(obj))
    got = asyncio.run(cp.load(members=["model/layers"]))
    assert got is not None and set(listing(got)) == {
        "model",
        "model/layers",
        "model/layers/a.bin",
        "model/layers/b.txt",
    }


def test_absent_names_are_a_not_found_error_naming_them_and_the_redacted_uri(saved, tmp_path):
    _, obj = saved
    cp = fc.Checkpoint(str(tmp_path / "next"), str(obj))
    cp.load_sync(members=["meta.json"])
    before = listing(cp.path)
    with pytest.raises(NotFoundError) as caught:
        cp.load_sync(members=["model/weights.bin", "nope", "model/latest", "model/empty"])
    message = str(caught.value)
    assert f"{obj} holds no file or folder of files 'nope', 'model/latest', 'model/empty'" in message
    assert "symbolic links and empty folders are not restored by name" in message
    assert "or load() the whole checkpoint" in message
    assert listing(cp.path) == before  # nothing written, not even the names that were there
    secret = "S3cr3tPassw0rd"
    error = absent(with_password("s3://bucket/run/ckpt", secret, "me"), ["x"])
    assert str(error).startswith("s3://<redacted>@bucket/run/ckpt holds no file or folder of files 'x'")
    assert secret not in str(error)


def test_names_outside_the_tree_and_malformed_members_are_refused_before_reading(tmp_path):
    with spying("file") as spy:
        cp = fc.Checkpoint(str(tmp_path / "next"), spy.uri_for(str(tmp_path / "obj")))
        for bad in ("../x", "/etc/passwd", "a/../../b", ".", ""):
            with pytest.raises(UnsafeArchiveError, match="is not a path inside a checkpoint"):
                cp.load_sync(members=[bad])
        with pytest.raises(TypeError, match="a list of names, not one name"):
            cp.load_sync(members="model")
        with pytest.raises(ValueError, match="members is empty"):
            cp.load_sync(members=[])
        assert sum(spy.calls.values()) == 0


def test_no_checkpoint_is_none_and_a_payload_is_not_found(tmp_path):
    assert fc.Checkpoint(str(tmp_path / "n")).load_sync(members=["a"]) is None
    assert fc.Checkpoint(str(tmp_path / "n"), str(tmp_path / "absent")).load_sync(members=["a"]) is None
    fc.Checkpoint(str(tmp_path / "payload")).save_sync(b"bytes, not a folder")
    cp = fc.Checkpoint(str(tmp_path / "n"), str(tmp_path / "payload"))
    with pytest.raises(
        NotFoundError, match=r"payload \(saved bytes or a file\), not a folder: it holds no 'a'"
    ):
        cp.load_sync(members=["a"])
    assert cp.load_sync() == cp.path / "payload"


def test_a_selection_loaded_once_is_not_read_again_and_a_full_load_still_loads_all(saved, tmp_path):
    src, obj = saved
    with spying("file") as spy:
        cp = fc.Checkpoint(str(tmp_path / "next"), spy.uri_for(str(obj)))
        cp.load_sync(members=["model"])
        calls = sum(spy.calls.values())
        assert cp.load_sync(members=["model/layers/a.bin", "model"]) == cp.path
        assert sum(spy.calls.values()) == calls  # already there
        assert tree(cp.load_sync()) == tree(src)  # the whole tree, links and empty folders too
        calls = sum(spy.calls.values())
        assert cp.load_sync(members=["optim.pt"]) == cp.path
        assert sum(spy.calls.values()) == calls


def test_damaged_data_is_never_kept(saved, tmp_path):
    _, obj = saved
    raw = bytearray(obj.read_bytes())
    index = ix.read_index(store_for(str(obj)), str(obj))
    if index is not None:
        m = index.members[index.files["model/weights.bin"].first]
        raw[m.coff + m.clen // 2] ^= 0xFF
        match = "does not match the index"
    else:
        raw[-6] ^= 0xFF  # the gzip trailer's CRC-32, after every file's data
        match = "damaged"
    obj.write_bytes(bytes(raw))
    cp = fc.Checkpoint(str(tmp_path / "next"), str(obj))
    with pytest.raises(CorruptCheckpointError, match=match):
        cp.load_sync(members=["model"])
    assert listing(cp.path) == {}
    assert sorted(p.name for p in cp.path.parent.iterdir()) == [".fcp-lock", "workspace"]  # no staging left


def test_a_file_whose_data_does_not_match_its_hash_is_refused(tmp_path):
    _src, objs = save_both(tmp_path)
    obj = objs["indexed"]
    from .test_index import _set, forge

    names = list(ix.read_index(store_for(str(obj)), str(obj)).files)  # type: ignore[union-attr]
    forge(obj, _set(7, "0" * 64))  # the first file's recorded hash
    cp = fc.Checkpoint(str(tmp_path / "next"), str(obj))
    with pytest.raises(
        CorruptCheckpointError, match=f"{names[0]!r} restored from .* does not match the BLAKE3"
    ):
        cp.load_sync(members=[names[0]])
    assert listing(cp.path) == {}


@pytest.mark.parametrize(
    ("members", "match"),
    [
        ([file_member("ok.txt", b"ok"), file_member("a/../../evil", b"x")], "climbs out with '..'"),
        ([file_member("ok.txt", b"ok"), file_member("/tmp/evil-abs", b"x")], "absolute name"),
        ([file_member("ok.txt", b"ok"), special_member("dev", tarfile.CHRTYPE)], "device, FIFO"),
        ([file_member("ok.txt", b"ok"), link_member("h", "../x", hard=True)], None),
    ],
    ids=["dotdot", "absolute", "device", "hard-link-out"],
)
def test_an_archive_a_full_load_refuses_is_refused_without_an_index(tmp_path, members, match):
    obj = tmp_path / "obj"
    obj.write_bytes(tar_bytes(members))
    cp = fc.Checkpoint(str(tmp_path / "next"), str(obj))
    if match is None:  # an unselected hard link is not followed; a selected one is refused
        assert listing(cp.load_sync(members=["ok.txt"])) == {"ok.txt": ("file", 2)}  # type: ignore[arg-type]
        with pytest.raises(UnsafeArchiveError, match="climbs out"):
            fc.Checkpoint(str(tmp_path / "n2"), str(obj)).load_sync(members=["h"])
        return
    with pytest.raises(UnsafeArchiveError, match=match):
        cp.load_sync(members=["ok.txt"])
    assert listing(cp.path) == {}


def test_an_uncompressed_tar_restores_partially_too(tmp_path):
    obj = tmp_path / "obj"
    obj.write_bytes(tar_bytes([file_member("a/b.txt", b"hello"), file_member("c", b"x")], gz=False))
    cp = fc.Checkpoint(str(tmp_path / "next"), str(obj))
    got = cp.load_sync(members=["a"])
    assert got is not None and listing(got) == {"a": ("dir", 0), "a/b.txt": ("file", 5)}


def test_a_hard_link_to_no_file_is_refused_without_an_index(tmp_path):
    obj = tmp_path / "obj"
    obj.write_bytes(tar_bytes([dir_member("d"), link_member("d/h", "not-in-archive", hard=True)]))
    cp = fc.Checkpoint(str(tmp_path / "next"), str(obj))
    with pytest.raises(UnsafeArchiveError, match="point to names that are not files of the archive"):
        cp.load_sync(members=["d"])
    assert listing(cp.path) == {}


def test_the_unpacked_size_limit_applies(saved, tmp_path, monkeypatch):
    """With an index it bounds the selected files; without one the whole tar stream, which a
    partial load inflates as a full load does."""
    _, obj = saved
    monkeypatch.setenv("FLYTE_CHECKPOINT_MAX_UNPACKED_BYTES", "100000")
    cp = fc.Checkpoint(str(tmp_path / "next"), str(obj))
    with pytest.raises(
        UnsafeArchiveError,
        match=r"beyond the limit of 100000 bytes.*Raise FLYTE_CHECKPOINT_MAX_UNPACKED_BYTES",
    ):
        cp.load_sync(members=["optim.pt"])
    if obj.name == "indexed.tgz":
        assert cp.load_sync(members=["meta.json"]) == cp.path
    else:
        with pytest.raises(UnsafeArchiveError, match=r"the tarball .* inflates all of it"):
            cp.load_sync(members=["meta.json"])


def test_load_file_is_the_one_file_case(saved, tmp_path):
    _src, obj = saved
    cp = fc.Checkpoint(str(tmp_path / "next"), str(obj))
    assert cp.load_file_sync("model/meta-link.json", tmp_path / "one.json").read_bytes() == b'{"epoch": 7}'  # type: ignore[union-attr]
    written = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".fcp-history"))
    assert written == ["indexed.tgz", "one.json", "plain.tgz", "src"]
    with pytest.raises(NotFoundError, match="holds no file 'model'"):  # a folder is not a file
        cp.load_file_sync("model")


def test_load_file_reports_progress_as_a_load_of_that_member_does(saved, tmp_path):
    """Proves: ``progress`` is called while ``load_file_sync`` reads (from ``(0, None)`` to the
    bytes of the object read, reported as the total at the end), with the figures a
    ``load(members=[name])`` of that file reports. It was never called: a long restore of one
    large file showed nothing."""
    _src, obj = saved
    reports: dict[str, list[tuple[int, int | None]]] = {"members": [], "load_file": []}
    with fc.Checkpoint(
        str(tmp_path / "a"), str(obj), progress=lambda d, t: reports["members"].append((d, t))
    ) as cp:
        cp.load_sync(members=["optim.pt"])
    with fc.Checkpoint(
        str(tmp_path / "b"), str(obj), progress=lambda d, t: reports["load_file"].append((d, t))
    ) as cp:
        assert cp.load_file_sync("optim.pt", tmp_path / "optim.pt") == tmp_path / "optim.pt"
    done, total = reports["load_file"][-1]
    assert reports["load_file"][0] == (0, None) and done == total and done > 0
    assert reports["load_file"] == reports["members"]


# -- reading only what it needs -----------------------------------------------------------


def big_tree(root: Path, others: int, other_size: int) -> Path:
    """One 1 MiB file among ``others`` files of ``other_size`` random bytes (incompressible)."""
    root.mkdir(parents=True)
    for i in range(others):
        (root / f"shard-{i:03}.bin").write_bytes(os.urandom(other_size))
        if i == others // 2:
            (root / "wanted.bin").write_bytes(os.urandom(MiB))
    return root


def assert_reads_only_the_file(uri: str, src: Path, tmp_path: Path, scheme: str) -> None:
    size = store_for(uri).stat(uri)
    assert size is not None
    index = ix.read_index(store_for(uri), uri, size)
    assert index is not None
    index_bytes = size - index.data_end  # the index members and the trailer
    with spying(scheme) as spy:
        cp = fc.Checkpoint(str(tmp_path / f"next-{uuid.uuid4().hex}"), spy.uri_for(uri))
        got = cp.load_sync(members=["wanted.bin"])
        assert got is not None and (got / "wanted.bin").read_bytes() == (src / "wanted.bin").read_bytes()
        assert spy.count("open_read") == 0 and spy.count("read_range") == 3  # tail, index, the file
        assert spy.bytes_read <= MiB + index_bytes + 4096, (spy.bytes_read, size)
        cp.close()


def test_restoring_one_1mib_file_of_a_large_object_reads_that_file_and_the_index(tmp_path):
    src = big_tree(tmp_path / "src", others=24, other_size=2 * MiB)
    obj = tmp_path / "big.tgz"
    fc.Checkpoint(str(obj)).save_sync(str(src))
    assert obj.stat().st_size > 49 * MiB
    assert_reads_only_the_file(str(obj), src, tmp_path, "file")


def test_adjacent_members_of_a_folder_are_one_ranged_read(tmp_path):
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    for i in range(5):
        (src / "d" / f"f{i}.bin").write_bytes(os.urandom(200_000))  # aligned, adjacent
    (src / "z.bin").write_bytes(os.urandom(200_000))
    obj = tmp_path / "obj"
    fc.Checkpoint(str(obj)).save_sync(str(src))
    with spying("file") as spy:
        cp = fc.Checkpoint(str(tmp_path / "next"), spy.uri_for(str(obj)))
        got = cp.load_sync(members=["d"])
        assert got is not None and tree(got / "d") == tree(src / "d")
        assert spy.count("read_range") == 3  # tail, index, the five files' members
        assert spy.bytes_read < obj.stat().st_size - 200_000


def test_a_store_without_ranged_reads_streams_the_object_once(tmp_path):
    src, objs = save_both(tmp_path)
    with spying("file") as spy:
        spy.supports_ranges = False  # type: ignore[misc]
        cp = fc.Checkpoint(str(tmp_path / "next"), spy.uri_for(str(objs["indexed"])))
        got = cp.load_sync(members=["model/layers"])
        assert got is not None and tree(got / "model/layers") == tree(src / "model/layers")
        assert (spy.count("read_range"), spy.count("open_read")) == (0, 1)


def test_close_stops_a_partial_load_between_its_reads(tmp_path):
    from flyte_checkpoint.errors import OperationCancelledError

    src = tmp_path / "src"
    src.mkdir()
    for name in ("a.bin", "b.bin", "c.bin"):
        (src / name).write_bytes(os.urandom(200_000))  # b.bin keeps a.bin's and c.bin's reads apart
    obj = tmp_path / "obj"
    fc.Checkpoint(str(obj)).save_sync(str(src))
    cp: fc.Checkpoint | None = None

    def hook(op: str, uri: str) -> None:
        if op == "read_range" and spy.count("read_range") == 2:  # the tail, the index: now a.bin's
            assert cp is not None
            cp.close()  # in the loading thread: cancels the load, returns at once

    with spying("file", hook) as spy:
        cp = fc.Checkpoint(str(tmp_path / "next"), spy.uri_for(str(obj)))
        with pytest.raises(OperationCancelledError):
            cp.load_sync(members=["a.bin", "c.bin"])
        assert spy.count("read_range") == 3  # c.bin's members were never asked for
    assert not Path(tmp_path / "next").exists()


@pytest.fixture(params=["memory", "file", "s3", "gcs", "azure"])
def any_store(request, backend_pool):  # noqa: F811
    """A fresh URI on each store: the built-in memory store, and each backend's test server."""
    if request.param == "memory":
        yield f"memory://partial/{uuid.uuid4().hex}/ckpt", "memory"
        return
    b = backend_pool.get(request.param)
    with b.activated():
        uri = b.fresh("ckpt")
        yield uri, (uri.split("://", 1)[0] if "://" in uri else "file")


def test_on_every_store_a_partial_load_reads_only_its_files(any_store, tmp_path):
    uri, scheme = any_store
    src = big_tree(tmp_path / "src", others=6, other_size=MiB)
    os.mkdir(src / "sub")
    (src / "sub" / "x.txt").write_bytes(b"x" * 1000)
    fc.Checkpoint(uri).save_sync(str(src))
    assert_reads_only_the_file(uri, src, tmp_path, scheme)
    cp = fc.Checkpoint(str(tmp_path / "n"), uri)
    got = cp.load_sync(members=["sub", "shard-000.bin"])
    assert got is not None and set(listing(got)) == {"sub", "sub/x.txt", "shard-000.bin"}
    assert tree(got / "sub") == tree(src / "sub")


# -- the command line ---------------------------------------------------------------------


def test_pull_member_restores_what_load_members_restores(saved, tmp_path, capsys):
    import json

    from flyte_checkpoint.cli import main

    src, obj = saved
    with spying("file") as spy:
        uri = spy.uri_for(str(obj))
        assert (
            main(["pull", uri, str(tmp_path / "out"), "--member", "model/layers", "--member", "meta.json"])
            == 0
        )
        streamed = spy.count("open_read")
    line = capsys.readouterr().out
    indexed = obj.name == "indexed.tgz"
    assert streamed == (0 if indexed else 1)
    assert f"restored model/layers, meta.json of {uri} into {tmp_path / 'out'}: read" in line
    assert ("(by its index)" if indexed else "(streamed: no index)") in line
    cp = fc.Checkpoint(str(tmp_path / "n"), str(obj))
    assert tree(tmp_path / "out") == tree(cp.load_sync(members=["model/layers", "meta.json"]))  # type: ignore[arg-type]

    assert main(["pull", str(obj), str(tmp_path / "two"), "--member", "optim.pt", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["kind"], out["members"], out["indexed"], out["path"]) == (
        "members",
        ["optim.pt"],
        indexed,
        str(tmp_path / "two"),
    )
    assert (out["bytes_read"] < 3 * MiB) if indexed else (out["bytes_read"] == obj.stat().st_size)
    assert (tmp_path / "two" / "optim.pt").read_bytes() == (src / "optim.pt").read_bytes()

    assert main(["pull", str(obj), str(tmp_path / "three"), "--member", "nope"]) == 1
    assert "holds no file or folder of files 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "three").exists()
    assert main(["pull", str(obj), "-", "--member", "meta.json"]) == 2
    assert "pull --member restores files into a folder: give DIR, not '-'" in capsys.readouterr().err


def test_inspect_index_describes_the_files_from_the_index_alone(tmp_path, capsys):
    import json

    from flyte_checkpoint.cli import main

    _, objs = save_both(tmp_path)
    with spying("file") as spy:
        assert main(["inspect", spy.uri_for(str(objs["indexed"])), "--index", "--members"]) == 0
        assert (spy.count("pin"), spy.count("read_range"), sum(spy.calls.values())) == (1, 2, 3)
    text = capsys.readouterr().out
    assert "files:     6 in the index (folders and symbolic links: inspect without --index)" in text
    assert "index:     6 files" in text
    assert "2 MiB  optim.pt" in text and "model/  (4 members)" in text
    assert "hardlink            0  model/meta-link.json -> meta.json" in text
    assert main(["inspect", str(objs["indexed"]), "--index", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["from_index"], info["files"], info["links"], info["dirs"]) == (True, 5, 1, 0)
    assert info["unpacked_bytes"] == 300_000 + 70_000 + 1 + 2 * MiB + 12
    assert main(["inspect", str(objs["plain"]), "--index"]) == 1
    assert "plain.tgz has no index (a payload, or a tarball written by Flyte" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "absent"), "--index"]) == 3


def test_without_a_readable_trailer_the_streamed_path_still_checks_the_index(tmp_path):
    """A damaged trailer magic hides the index from read_index, so the archive is streamed:
    what follows the tar (index members of ours) must still verify, as in a full load."""
    _, objs = save_both(tmp_path)
    obj = objs["indexed"]
    raw = bytearray(obj.read_bytes())
    raw[len(raw) - ix.TRAILER_SIZE + 16] ^= 0x01  # the trailer's magic
    obj.write_bytes(bytes(raw))
    assert ix.read_index(store_for(str(obj)), str(obj)) is None
    cp = fc.Checkpoint(str(tmp_path / "next"), str(obj))
    with pytest.raises(CorruptCheckpointError, match=r"the index of .*indexed.tgz is damaged"):
        cp.load_sync(members=["meta.json"])
    assert listing(cp.path) == {}


def test_index_read_file_reads_one_files_members_the_same_way(tmp_path):
    import io

    _, objs = save_both(tmp_path)
    obj = objs["indexed"]
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None
    with spying("file") as spy:
        out = io.BytesIO()
        assert (
            read_file(store_for(spy.uri_for(str(obj))), spy.uri_for(str(obj)), index, "optim.pt", out)
            == 2 * MiB
        )
        assert spy.count("read_range") == 1  # its members, adjacent: one read
    assert out.getvalue() == (tmp_path / "src" / "optim.pt").read_bytes()
