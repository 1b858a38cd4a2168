"""What a save may store: only objects a load restores, of files that did not change meanwhile.

- Symbolic links: one that resolves inside the tree is stored as a relative link (it still
  resolves after a restore); one that leaves the tree is stored as what it points at; one
  that leads nowhere outside, or loops, is refused by name. A load never refuses our object.
- A file that changes while it is saved (alone, or in a folder) fails the save, naming the
  file, before anything is committed: the previous checkpoint stays.
- Paths the system cannot handle, and a local destination inside the folder being saved.

The changes happen for real and at a set point: a spy on the store's writer (or on the
compressor the folder's tar goes into) changes the file after the first bytes went through.
"""

from __future__ import annotations

import errno
import hashlib
import os
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import flyte_checkpoint as fc
from flyte_checkpoint.errors import (
    CheckpointError,
    PathTooLongError,
    SourceChangedError,
    StoreError,
    UnsupportedDataError,
)
from flyte_checkpoint.format.pipeline import ParallelGzipWriter
from flyte_checkpoint.storage.blobstore import BlobWriter
from flyte_checkpoint.storage.kit import PartWriter
from flyte_checkpoint.util.limits import MAX_MEMBERS_ENV, MAX_UNPACKED_ENV
from tests.reliability.backends import backend_pool, s3_open_uploads  # noqa: F401

LONG_AGO = (1_000_000_000, 1_000_000_000)  # an mtime in 2001: any write now changes it


def save(dest: str, data) -> None:
    with fc.Checkpoint(dest) as cp:
        cp.save_sync(data)


def load_bytes(dest: str) -> bytes:
    with fc.Checkpoint(dest + ".next", dest) as cp:
        path = cp.load_sync()
        assert path is not None
        return path.read_bytes()


def members(obj: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(obj) as tf:
        return {m.name: m for m in tf.getmembers()}


@pytest.fixture(params=["file", "s3"])
def on_backend(request, backend_pool):  # noqa: F811
    """The local backend and S3 (moto's server on 127.0.0.1), with small parts."""
    b = backend_pool.get(request.param)
    with b.activated():
        yield b


# -- links -------------------------------------------------------------------------------------


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A training run's folder: two checkpoints in ckpts/, and a sub-folder."""
    root = tmp_path / "run"
    (root / "ckpts").mkdir(parents=True)
    (root / "ckpts" / "epoch2.ckpt").write_bytes(b"two")
    (root / "ckpts" / "epoch3.ckpt").write_bytes(b"three")
    (root / "logs" / "deep").mkdir(parents=True)
    return root


def restored(tmp_path: Path, obj: str) -> tuple[fc.Checkpoint, Path]:
    cp = fc.Checkpoint(str(tmp_path / "unused"), obj)
    path = cp.load_sync()
    assert path is not None
    return cp, path


INSIDE_LINKS = {
    # name: (where the link is, what it says, where it must lead, relative to the run)
    "absolute, as frameworks write last.ckpt": (
        "ckpts/last.ckpt",
        "{root}/ckpts/epoch3.ckpt",
        "ckpts/epoch3.ckpt",
    ),
    "absolute, from a sub-folder": ("logs/deep/best", "{root}/ckpts/epoch2.ckpt", "ckpts/epoch2.ckpt"),
    "absolute, to a folder": ("latest", "{root}/ckpts", "ckpts"),
    "absolute, to the tree's root": ("logs/root", "{root}", "."),
    "relative, out of the tree and back in": (
        "ckpts/back",
        "../../run/ckpts/epoch2.ckpt",
        "ckpts/epoch2.ckpt",
    ),
    "through the absolute path of a link": (
        "viafolder",
        "{root}/latest_rel/epoch3.ckpt",
        "ckpts/epoch3.ckpt",
    ),
}


@pytest.mark.parametrize("case", list(INSIDE_LINKS), ids=list(INSIDE_LINKS))
def test_a_link_that_resolves_inside_is_stored_relative_and_resolves_after_restore(case, run, tmp_path):
    where, says, leads = INSIDE_LINKS[case]
    (run / "latest_rel").symlink_to("ckpts")
    (run / where).symlink_to(says.format(root=run))
    obj = str(tmp_path / "obj")
    save(obj, run)
    stored = members(Path(obj))[where]
    assert stored.issym() and not stored.linkname.startswith("/")
    cp, path = restored(tmp_path, obj)
    with cp:
        link = path / where
        assert link.is_symlink()
        assert link.resolve() == (path / leads).resolve()
        if (run / leads).is_file():
            assert link.read_bytes() == (run / leads).read_bytes()


def test_links_already_relative_are_stored_as_written_chains_and_loops_included(run, tmp_path):
    links = {
        "ckpts/last.ckpt": "epoch3.ckpt",
        "chain": "ckpts/last.ckpt",  # a link to a link
        "folder": "ckpts",  # a link to a folder
        "logs/deep/up": "../../ckpts/epoch2.ckpt",  # in a sub-folder
        "self": ".",  # the tree's root
        "loop_a": "loop_b",  # a loop that stays inside
        "loop_b": "loop_a",
        "gone": "ckpts/epoch9.ckpt",  # leads nowhere, inside
    }
    for where, says in links.items():
        (run / where).symlink_to(says)
    obj = str(tmp_path / "obj")
    save(obj, run)
    assert {name: members(Path(obj))[name].linkname for name in links} == links
    cp, path = restored(tmp_path, obj)
    with cp:
        assert {name: os.readlink(path / name) for name in links} == links
        assert (path / "chain").read_bytes() == b"three"
        assert (path / "folder" / "epoch2.ckpt").read_bytes() == b"two"


def test_a_link_that_leaves_the_tree_is_stored_as_its_content(run, tmp_path):
    outside = tmp_path / "shared"
    (outside / "tokenizer").mkdir(parents=True)
    (outside / "weights.bin").write_bytes(b"w" * 5000)
    (outside / "tokenizer" / "vocab.txt").write_bytes(b"a b c")
    (outside / "tokenizer" / "inner").symlink_to("vocab.txt")
    (run / "weights.bin").symlink_to(outside / "weights.bin")
    (run / "tokenizer").symlink_to("../shared/tokenizer")
    obj = str(tmp_path / "obj")
    save(obj, run)
    cp, path = restored(tmp_path, obj)
    with cp:
        assert not (path / "weights.bin").is_symlink()
        assert (path / "weights.bin").read_bytes() == b"w" * 5000
        assert (path / "tokenizer").is_dir() and not (path / "tokenizer").is_symlink()
        assert (path / "tokenizer" / "vocab.txt").read_bytes() == b"a b c"
        assert (path / "tokenizer" / "inner").read_bytes() == b"a b c"


REFUSED = {
    "leads nowhere, outside": (
        lambda run, out: (run / "l").symlink_to("/nonexistent/fcp/x"),
        "l",
        "to nothing",
    ),
    "a loop of absolute links": (
        lambda run, out: ((run / "a").symlink_to(run / "b"), (run / "b").symlink_to(run / "a")),
        "a",
        "loop",
    ),
    "to a folder holding the tree": (lambda run, out: (run / "up").symlink_to(".."), "up", "holds"),
    "to a FIFO": (
        lambda run, out: (os.mkfifo(out / "fifo"), (run / "f").symlink_to(out / "fifo")),
        "f",
        "FIFO",
    ),
    "in a folder stored as content, leading nowhere": (
        lambda run, out: ((out / "bad").symlink_to("/nonexistent/fcp"), (run / "o").symlink_to(out)),
        "o/bad",
        "nowhere",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
def test_a_link_that_cannot_be_stored_is_refused_by_name_and_the_previous_checkpoint_stays(
    case, run, tmp_path
):
    make, name, says = REFUSED[case]
    outside = tmp_path / "outside"
    outside.mkdir()
    obj = str(tmp_path / "obj")
    save(obj, b"previous")
    make(run, outside)
    with pytest.raises(UnsupportedDataError, match=says) as info:
        save(obj, run)
    assert str(run / name) in str(info.value)
    assert "remove" in str(info.value).lower()
    assert load_bytes(obj) == b"previous"


# -- the property: whatever the links, a save stores what a load restores, or refuses by name ----

LINK_SPOTS = ["l1", "l2", "d1/l3", "d1/d2/l4"]
TARGET_KINDS = ["rel", "abs", "up_and_back", "out_file", "out_dir", "out_missing", "parent", "root"]
TREE_NAMES = ["f1", "d1", "d1/f2", "d1/d2", "d1/d2/f3", "missing", "l1/f2", "l2/x", *LINK_SPOTS]

LINKS = st.dictionaries(
    st.sampled_from(LINK_SPOTS),
    st.tuples(st.sampled_from(TARGET_KINDS), st.sampled_from(TREE_NAMES)),
    max_size=4,
)


def _build(base: Path, links: dict[str, tuple[str, str]]) -> Path:
    root = base / "run"
    (root / "d1" / "d2").mkdir(parents=True)
    for name, data in (("f1", b"one"), ("d1/f2", b"two"), ("d1/d2/f3", b"three")):
        (root / name).write_bytes(data)
    out = base / "outside"
    (out / "dir").mkdir(parents=True)
    (out / "file").write_bytes(b"outside")
    (out / "dir" / "x").write_bytes(b"x")
    for spot, (kind, name) in links.items():
        here = (root / spot).parent
        target = {
            "rel": os.path.relpath(root / name, here),
            "abs": str(root / name),
            "up_and_back": os.path.relpath(base, here) + "/run/" + name,
            "out_file": str(out / "file"),
            "out_dir": str(out / "dir"),
            "out_missing": str(out / "missing"),
            "parent": os.path.relpath(base, here),
            "root": str(root),
        }[kind]
        (root / spot).symlink_to(target)
    return root


def _view(root: Path) -> dict[str, tuple]:
    """What reading the tree shows, following links (each folder listed, link folders not walked)."""
    seen: dict[str, tuple] = {}

    def walk(folder: Path, rel: str) -> None:
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            name = f"{rel}{entry.name}"
            p = Path(entry.path)
            try:
                if p.is_file():
                    seen[name] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
                elif p.is_dir():
                    seen[name] = ("dir", tuple(sorted(os.listdir(p))))
                    if not p.is_symlink():
                        walk(p, name + "/")
                else:
                    seen[name] = ("nothing",)
            except OSError as exc:  # a loop of links
                assert exc.errno == errno.ELOOP, exc
                seen[name] = ("nothing",)

    walk(root, "")
    return seen


def _where(path: Path, root: Path) -> str:
    return os.path.relpath(os.path.realpath(path), os.path.realpath(root))


@settings(
    max_examples=int(os.environ.get("FCP_LINK_EXAMPLES", "80")),  # more: FCP_LINK_EXAMPLES=3000
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(links=LINKS)
def test_property_any_links_save_into_what_load_restores_or_are_refused_by_name(links):
    with tempfile.TemporaryDirectory() as sandbox:
        base = Path(sandbox)
        root = _build(base, links)
        obj = str(base / "store" / "obj")
        try:
            save(obj, root)
        except UnsupportedDataError as exc:  # typed, naming one of the links
            event("refused")
            assert any(str(root / spot) in str(exc) for spot in links), exc
            assert not Path(obj).exists()
            return
        with fc.Checkpoint(str(base / "unused"), obj) as cp:
            path = cp.load_sync()  # never an UnsafeArchiveError, nor anything else
            event("restored")
            assert path is not None
            before, after = _view(root), _view(path)
            for name, seen in before.items():
                assert after.get(name) == seen, (name, links)
            for spot in links:
                source_lands = _where(root / spot, root)
                if not source_lands.startswith(".."):  # resolves inside: a link, landing on the same name
                    assert (path / spot).is_symlink()
                    assert _where(path / spot, path) == source_lands, (spot, links)


# -- files that change while they are saved ---------------------------------------------------


def _change(path: Path, how: str) -> None:
    if how == "truncated":
        os.truncate(path, 1000)
    elif how == "rewritten in place":
        with open(path, "r+b") as f:
            f.write(b"\xee" * path.stat().st_size)
    else:
        with open(path, "ab") as f:
            f.write(b"more")


HOW = ["truncated", "rewritten in place", "appended to"]


def _once(action: Callable[[], object]) -> Callable[[], None]:
    done: list[bool] = []

    def fire() -> None:
        if not done:
            done.append(True)
            action()

    fire.done = done  # type: ignore[attr-defined]
    return fire


def _then(monkeypatch, cls: type, name: str, action: Callable[[], None], when=lambda *args: True) -> None:
    """Make ``cls.name`` run ``action`` right after each call whose arguments satisfy ``when``."""
    original = getattr(cls, name)

    def wrapper(self, *args):
        result = original(self, *args)
        if when(*args):
            action()
        return result

    monkeypatch.setattr(cls, name, wrapper)


def _a_piece_of_data(data) -> bool:
    return len(data) >= 1024 * 1024  # file data, not a tar header


@pytest.mark.parametrize("with_progress", [False, True], ids=["plain", "progress"])
@pytest.mark.parametrize("how", HOW)
def test_a_file_that_changes_during_its_save_fails_it_and_the_previous_checkpoint_stays(
    how, with_progress, on_backend, tmp_path, monkeypatch
):
    big = tmp_path / "model.pt"
    big.write_bytes(os.urandom(20 * 1024 * 1024))  # read in several pieces
    os.utime(big, LONG_AGO)
    dest = on_backend.fresh()
    save(dest, b"previous")
    change = _once(lambda: _change(big, how))
    # after the first piece reached the store (a writer, or the parts upload_file reads):
    _then(monkeypatch, BlobWriter, "write", change)
    _then(monkeypatch, PartWriter, "_submit", change)
    progress = (lambda done, total: None) if with_progress else None
    with pytest.raises(SourceChangedError) as info, fc.Checkpoint(dest, progress=progress) as cp:
        cp.save_sync(big)
    assert change.done  # type: ignore[attr-defined]
    assert str(big) in str(info.value) and "save again" in str(info.value).lower()
    monkeypatch.undo()
    assert load_bytes(dest) == b"previous"
    if on_backend.name == "s3":
        assert s3_open_uploads(on_backend, dest) == []


@pytest.mark.parametrize("how", HOW)
def test_a_file_rewritten_during_a_folder_save_fails_it_and_nothing_is_committed(
    how, on_backend, tmp_path, monkeypatch
):
    tree = tmp_path / "state"
    tree.mkdir()
    (tree / "a.json").write_text("{}")
    big = tree / "b.bin"
    big.write_bytes(os.urandom(12 * 1024 * 1024))
    os.utime(big, LONG_AGO)
    dest = on_backend.fresh()
    save(dest, b"previous")
    change = _once(lambda: _change(big, how))
    _then(monkeypatch, ParallelGzipWriter, "write", change, when=_a_piece_of_data)  # of b.bin
    with pytest.raises(SourceChangedError) as info:
        save(dest, tree)
    assert change.done  # type: ignore[attr-defined]
    assert str(big) in str(info.value)
    monkeypatch.undo()
    assert load_bytes(dest) == b"previous"
    if on_backend.name == "s3":
        assert s3_open_uploads(on_backend, dest) == []


def test_a_file_removed_during_a_folder_save_fails_it_by_name(tmp_path, monkeypatch):
    """Lightning's top-k rotation deletes old checkpoints: one listed, then gone, fails the save."""
    tree = tmp_path / "state"
    tree.mkdir()
    (tree / "a.bin").write_bytes(os.urandom(6 * 1024 * 1024))
    (tree / "b.ckpt").write_bytes(b"old checkpoint")
    dest = str(tmp_path / "obj")
    save(dest, b"previous")
    remove = _once(lambda: (tree / "b.ckpt").unlink())
    # once a piece of a.bin went into the tar: b.ckpt is listed, not yet read
    _then(monkeypatch, ParallelGzipWriter, "write", remove, when=_a_piece_of_data)
    with pytest.raises(SourceChangedError, match="removed before") as info:
        save(dest, tree)
    assert remove.done  # type: ignore[attr-defined]
    assert str(tree / "b.ckpt") in str(info.value)
    monkeypatch.undo()
    assert load_bytes(dest) == b"previous"


def test_an_unchanged_file_is_not_reported_changed(tmp_path):
    """The check reads the times of the open file: a file left alone saves, bit for bit."""
    big = tmp_path / "model.pt"
    big.write_bytes(os.urandom(9 * 1024 * 1024))
    save(str(tmp_path / "obj"), big)
    assert (tmp_path / "obj").read_bytes() == big.read_bytes()


# -- paths --------------------------------------------------------------------------------------


def _deep_tree(root: Path) -> str:
    """A tree whose one file has a path of over 6,000 characters (made through folder descriptors)."""
    root.mkdir()
    fd = os.open(root, os.O_RDONLY)
    for _ in range(30):
        os.mkdir("n" * 200, dir_fd=fd)
        inner = os.open("n" * 200, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    os.close(fd)
    return str(root) + ("/" + "n" * 200) * 30


def test_a_tree_with_a_path_too_long_fails_with_a_typed_error_naming_it(tmp_path):
    deep = _deep_tree(tmp_path / "tree")
    obj = str(tmp_path / "obj")
    save(obj, b"previous")
    with pytest.raises(PathTooLongError) as info:
        save(obj, tmp_path / "tree")
    message = str(info.value)
    assert deep[:100] in message and "too long" in message and "shorter names" in message
    assert isinstance(info.value, StoreError) and isinstance(info.value, OSError)
    assert load_bytes(obj) == b"previous"


@pytest.mark.parametrize("where", ["source", "destination", "name of the destination"])
def test_a_path_over_the_system_limit_is_a_typed_error_naming_it(where, tmp_path):
    long_path = str(tmp_path) + "/x" * 2100
    long_name = str(tmp_path / ("y" * 300))
    with pytest.raises(PathTooLongError) as info:
        if where == "source":
            save(str(tmp_path / "obj"), long_path)
        else:
            save(long_path if where == "destination" else long_name, b"data")
    message = str(info.value)
    assert "too long" in message and "shorter" in message
    assert (long_name if where == "name of the destination" else long_path)[:100] in message
    if where == "name of the destination":
        assert "255" in message


def test_a_destination_inside_the_folder_being_saved_is_left_out(tmp_path):
    folder = tmp_path / "F"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    (folder / "notes.txt").write_text("epoch 3")
    dest = folder / "ckpt"
    stale = folder / ".fcp-tmp-ckpt.dead0001"  # a writer that died long ago
    stale.write_bytes(os.urandom(1024 * 1024))
    sizes = []
    for _ in range(3):
        save(str(dest), folder)
        sizes.append(dest.stat().st_size)
    assert sizes[0] == sizes[1] == sizes[2] and sizes[0] < 3.5 * 1024 * 1024
    assert sorted(members(dest)) == ["notes.txt", "weights.bin"]
    cp, path = restored(tmp_path, str(dest))
    with cp:
        assert sorted(os.listdir(path)) == ["notes.txt", "weights.bin"]


def test_the_destination_is_left_out_however_the_folder_is_named(tmp_path):
    """Through a link to the folder, and from a relative destination: same folder, left out."""
    folder = tmp_path / "F"
    folder.mkdir()
    (folder / "a.txt").write_text("a")
    (tmp_path / "alias").symlink_to(folder)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for _ in range(2):
            save("F/ckpt", tmp_path / "alias")
    finally:
        os.chdir(cwd)
    assert sorted(members(folder / "ckpt")) == ["a.txt"]


# -- the limits a load applies -------------------------------------------------------------------


def _folder_of(root: Path, files: int) -> Path:
    """``files`` files, half of them in a sub-folder, and a link: ``files + 2`` members."""
    (root / "sub").mkdir(parents=True)
    for i in range(files):
        (root / ("sub" if i % 2 else ".") / f"f{i:03}").write_bytes(b"x" * (i * 37 % 700))
    (root / "last").symlink_to("f000")
    return root


def _load_outcome(obj: str) -> str:
    """``"restored"``, or the class name of the error a load raises."""
    try:
        with fc.Checkpoint(obj + ".next", obj) as cp:
            assert cp.load_sync() is not None
        return "restored"
    except CheckpointError as exc:
        return type(exc).__name__


def test_a_folder_with_more_members_than_a_load_accepts_is_refused_by_the_save(tmp_path, monkeypatch):
    """Issue 14's rule, a save never stores what a load refuses, for FLYTE_CHECKPOINT_MAX_MEMBERS:
    the save counts members as the load does (files, folders, links; not PAX headers)."""
    tree = _folder_of(tmp_path / "tree", 40)
    obj = str(tmp_path / "obj")
    save(obj, b"previous")
    monkeypatch.setenv(MAX_MEMBERS_ENV, "41")
    with pytest.raises(UnsupportedDataError) as info:
        save(obj, tree)
    message = str(info.value)
    assert MAX_MEMBERS_ENV in message and "41" in message and str(tree) in message
    assert "previous checkpoint is unchanged" in message
    assert load_bytes(obj) == b"previous"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".fcp-tmp-")] == []
    monkeypatch.setenv(MAX_MEMBERS_ENV, "42")  # exactly its members: saved, and loads
    save(obj, tree)
    assert len(members(Path(obj))) == 42
    assert _load_outcome(obj) == "restored"


def test_a_save_refuses_exactly_the_byte_limits_a_load_refuses(tmp_path, monkeypatch):
    """FLYTE_CHECKPOINT_MAX_UNPACKED_BYTES at every value around the tree's size (headers, PAX
    headers for long names, data, padding): the save succeeds exactly when a load of the same
    tree under that limit restores it, and what it saved loads."""
    tree = _folder_of(tmp_path / "tree", 6)
    (tree / ("n" * 150)).write_bytes(b"long name: a PAX header before it")
    unlimited = str(tmp_path / "unlimited")
    save(unlimited, tree)
    with tarfile.open(unlimited) as tf:
        last = tf.getmembers()[-1]
        needed = last.offset_data + last.size  # where the load checks the last member
    outcomes = {}
    for limit in range(needed - 600, needed + 2):
        monkeypatch.setenv(MAX_UNPACKED_ENV, str(limit))
        obj = str(tmp_path / f"obj{limit}")
        try:
            save(obj, tree)
        except UnsupportedDataError as exc:
            assert MAX_UNPACKED_ENV in str(exc) and f"{limit:,}" in str(exc)
            saved = False
        else:
            saved = True
            assert _load_outcome(obj) == "restored"
        outcomes[limit] = (saved, _load_outcome(unlimited))
    assert all(saved == (load == "restored") for saved, load in outcomes.values()), outcomes
    assert outcomes[needed] == (True, "restored") and outcomes[needed - 1] == (False, "UnsafeArchiveError")
