"""Names as long as a file system takes (255 bytes, ASCII and multi-byte UTF-8) on the file store:
every working file the library makes from a user's name (a writer's temporary file, a local
sharded save's folder, a download's temporary file: :mod:`flyte_checkpoint.util.workfiles`) fits
wherever that name fits, and a path the system refuses as too long is explained by the limit
it is over (a name's NAME_MAX, or the whole path's PATH_MAX), not by one it is under.
"""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import PathTooLongError
from flyte_checkpoint.sharded import load_sharded, save_sharded
from flyte_checkpoint.storage.kit.files import download_to_file
from flyte_checkpoint.util import workfiles
from tests.reliability.gates import HANG

#: Names of exactly 255 bytes (Linux's NAME_MAX): ASCII, two- and four-byte UTF-8, and bytes
#: that are not UTF-8.
NAMES = {
    "ascii": "a" * 255,
    "utf8-2": "\u00e9" * 127 + "a",
    "utf8-4": "\U0001f600" * 63 + "abc",
    "not-utf8": os.fsdecode(b"\xff\xfe" * 127 + b"z"),  # POSIX names are bytes
}


@pytest.fixture(params=list(NAMES), ids=list(NAMES))
def name(request) -> str:
    value = NAMES[request.param]
    assert len(os.fsencode(value)) == 255
    return value


def no_working_files(folder: Path) -> list[str]:
    """The working files left anywhere under ``folder`` (none, after every operation returned)."""
    return sorted(
        os.path.join(root, n)
        for root, dirs, files in os.walk(folder)
        for n in dirs + files
        if workfiles.is_working_file(n)
    )


def data_folder(root: Path, name: str, content: bytes = b"weights") -> Path:
    """A folder holding one file of the long name."""
    root.mkdir(parents=True)
    (root / name).write_bytes(content)
    return root


def loaded(dest: Path, tmp: Path) -> dict[str, bytes]:
    with fc.Checkpoint(str(tmp / "reader"), str(dest)) as cp:
        path = cp.load_sync()
        assert path is not None
        if path.is_file():
            return {"": path.read_bytes()}
        return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def test_the_briefs_destination_of_240_bytes_saves(tmp_path: Path):
    """Proves: the report's repro, a destination named with 240 bytes, saves and loads."""
    dest = tmp_path / ("a" * 240)
    fc.Checkpoint(str(dest)).save_sync(b"x")
    assert loaded(dest, tmp_path) == {"": b"x"}


@pytest.mark.parametrize("what", ["bytes", "file", "folder"])
def test_a_destination_of_255_bytes_saves_and_loads(what: str, name: str, tmp_path: Path):
    """Proves: save_sync to a destination whose name has 255 bytes commits (the writer's
    temporary file beside it is named to fit), twice (the second incremental for a folder),
    and leaves no working file."""
    out = tmp_path / "out"
    out.mkdir()
    dest = out / name
    src = data_folder(tmp_path / "data", name)
    data = {"bytes": b"payload", "file": src / name, "folder": src}[what]
    want = {"bytes": {"": b"payload"}, "file": {"": b"weights"}, "folder": {name: b"weights"}}[what]
    for _ in range(2):
        fc.Checkpoint(str(dest)).save_sync(data)
        assert loaded(dest, tmp_path) == want
    assert os.listdir(out) == [name]
    assert no_working_files(tmp_path) == []


@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_background_save_to_and_of_names_of_255_bytes_commits(what: str, name: str, tmp_path: Path):
    """Proves: save_background of a file (or folder holding a file) of a 255-byte name, to a
    destination of a 255-byte name, stages, commits, and leaves no working file."""
    out = tmp_path / "out"
    out.mkdir()
    dest = out / name
    src = data_folder(tmp_path / "data", name)
    with fc.Checkpoint(str(dest)) as cp:
        cp.save_background(src / name if what == "file" else src).result(timeout=HANG)
    assert loaded(dest, tmp_path) == ({"": b"weights"} if what == "file" else {name: b"weights"})
    assert os.listdir(out) == [name]
    assert no_working_files(tmp_path) == []


def test_load_and_load_file_of_names_of_255_bytes(name: str, tmp_path: Path):
    """Proves: a checkpoint whose object and member have 255-byte names loads whole, by member,
    and by load_file into its workspace, into a folder, and to a path of a 255-byte name
    (replacing the file there), with no working file left beside the restored file."""
    src = data_folder(tmp_path / "data", name)
    dest = tmp_path / name
    fc.Checkpoint(str(dest)).save_sync(src)
    target = tmp_path / "restored"
    target.mkdir()
    (target / name).write_bytes(b"old")
    with fc.Checkpoint(str(tmp_path / "next"), str(dest)) as cp:
        whole = cp.load_sync()
        assert whole is not None and (whole / name).read_bytes() == b"weights"
        part = cp.load_sync(members=[name])
        assert part is not None and (part / name).read_bytes() == b"weights"
        default = cp.load_file_sync(name)
        assert default is not None and default.read_bytes() == b"weights"
        into = cp.load_file_sync(name, target)
        assert into == target / name and into.read_bytes() == b"weights"
        other = cp.load_file_sync(name, tmp_path / "elsewhere" / name)
        assert other is not None and other.read_bytes() == b"weights"
    assert os.listdir(target) == [name]
    assert no_working_files(tmp_path) == []


@pytest.mark.parametrize("world", [1, 2])
def test_a_sharded_save_to_a_name_of_255_bytes_commits(world: int, name: str, tmp_path: Path):
    """Proves: save_sharded to a destination of a 255-byte name (its markers and pieces in the
    folder named from it, which fits), with one rank and with two (threads), commits the union
    of the ranks' folders; each rank restores its own files."""
    out = tmp_path / "out"
    out.mkdir()
    dest = str(out / name)
    folders = [data_folder(tmp_path / f"rank{r}", f"{name[:-1]}{r}", b"rank %d" % r) for r in range(world)]
    errors: list[BaseException] = []

    def rank(r: int) -> None:
        try:
            save_sharded(dest, folders[r], rank=r, world_size=world, timeout=HANG)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG)
    assert errors == []
    assert loaded(Path(dest), tmp_path) == {f"{name[:-1]}{r}": f"rank {r}".encode() for r in range(world)}
    with fc.Checkpoint(str(tmp_path / "own"), dest) as cp:
        mine = load_sharded(cp, rank=world - 1, own=True)
        assert mine is not None
        assert (mine / f"{name[:-1]}{world - 1}").read_bytes() == f"rank {world - 1}".encode()


def test_a_download_to_a_name_of_255_bytes_lands(name: str, tmp_path: Path):
    """Proves: the kit's download_to_file (the cloud stores' download_file) writes a file of a
    255-byte name through a temporary file named to fit beside it."""
    target = tmp_path / name
    assert download_to_file(io.BytesIO(b"object"), target) == 6
    assert target.read_bytes() == b"object" and os.listdir(tmp_path) == [name]


# --------------------------------------------------------------------------- the names


@pytest.mark.parametrize(
    "made",
    [
        lambda n: workfiles.temp_prefix(n) + "0a" * 6,
        lambda n: workfiles.shard_folder(n),
        lambda n: workfiles.download_temp(n, "0a" * 6),
    ],
    ids=["writer", "shard", "download"],
)
@pytest.mark.parametrize("size", [1, 100, 114, 128, 140, 200, 254, 255])
def test_a_working_name_fits_where_its_name_fits_and_is_recognised(made, size: int):
    """Proves: for names of every length up to 255 bytes, ASCII or not, a working file's name
    is no longer than its user's name or 128 bytes (so it fits on any file system that holds
    that name: 255 bytes, eCryptfs's 143); it is recognised as a working file, is the same for
    the same name, and differs for names that differ only past where they are cut."""
    for char in ("x", "\u00e9", "\u6a21", "\U0001f600"):
        width = len(char.encode())
        base = char * (size // width) + "z" * (size % width)
        assert len(os.fsencode(base)) == size
        first = made(base)
        assert len(os.fsencode(first)) <= max(size, 128), (size, char, first)
        assert workfiles.is_working_file(first), first
        assert not workfiles.is_working_file(base)
        assert made(base) == first
        assert made(base[:-1] + "y") != first
        first.encode()  # whole characters kept: still text where the name was


def test_a_name_short_enough_keeps_its_working_names_as_they_were():
    """Proves: an ordinary name's working files are named as before (``.fcp-tmp-NAME.``...), so
    folders written by earlier versions are recognised and their stale files swept alike."""
    assert workfiles.temp_prefix("ckpt") == ".fcp-tmp-ckpt."
    assert workfiles.shard_folder("model.tar.gz") == ".fcp-tmp-model.tar.gz.shard"
    assert workfiles.download_temp("payload", "0a" * 6) == ".payload.fcp-tmp-0a0a0a0a0a0a"


# --------------------------------------------------------------------------- the messages


def test_a_name_over_name_max_is_named_as_the_name_too_long(tmp_path: Path):
    """Proves: a destination whose own name has 256 bytes is refused by naming that name and
    the 255 bytes a name may have, not the path's length (which is far under PATH_MAX)."""
    dest = tmp_path / ("\u00e9" * 128)
    with pytest.raises(PathTooLongError) as info:
        fc.Checkpoint(str(dest)).save_sync(b"x")
    message = str(info.value)
    assert "has 256 bytes, more than the 255 a name may have" in message
    assert "a path may have at most" not in message
    assert "choose a shorter path" in message


def test_a_path_over_path_max_only_through_a_working_file_says_so(tmp_path: Path):
    """Proves: a destination whose path fits but whose writer's temporary file beside it is
    over PATH_MAX (a name of 9 bytes ending a path of 4,090) is refused naming the destination,
    the working file's path and PATH_MAX, and no name as too long."""
    fd = os.open(tmp_path, os.O_RDONLY)
    path = str(tmp_path)
    try:
        while len(path) < 3800:  # made through folder descriptors: the full path is too long for mkdir
            os.mkdir("d" * 200, dir_fd=fd)
            inner = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd, path = inner, path + "/" + "d" * 200
        last = "e" * (4080 - len(path) - 1)
        os.mkdir(last, dir_fd=fd)
    finally:
        os.close(fd)
    dest = f"{path}/{last}/ckpt12345"
    assert len(os.fsencode(dest)) == 4090
    with pytest.raises(PathTooLongError) as info:
        fc.Checkpoint(dest).save_sync(b"x")
    message = str(info.value)
    assert "the path of a working file beside it" in message and ".fcp-tmp-" in message
    assert "and a path may have at most 4095" in message
    assert "a name may have" not in message


def test_a_member_name_too_long_on_restore_names_the_limit(tmp_path: Path):
    """Proves: a member whose name is over NAME_MAX is refused on load naming the name's limit."""
    from tests.helpers import file_member, tar_bytes

    src = tmp_path / "obj"
    src.write_bytes(tar_bytes([file_member("n" * 300, b"x")]))
    with fc.Checkpoint(str(tmp_path / "next"), str(src)) as cp, pytest.raises(PathTooLongError) as info:
        cp.load_sync()
    assert "has 300 bytes, more than the 255 a name may have" in str(info.value)


@pytest.mark.parametrize("inside", [False, True], ids=["dest", "dest-in-new-folder"])
def test_load_file_to_a_dest_whose_name_is_over_name_max_names_the_limit(inside: bool, tmp_path: Path):
    """Proves: load_file to a ``dest`` whose own name has 256 bytes (or a new folder of such a
    name that would hold it) raises PathTooLongError naming that name and the 255 bytes a name
    may have (it raised a bare OSError), and leaves no working file or file behind."""
    src = data_folder(tmp_path / "data", "w.bin")
    fc.Checkpoint(str(tmp_path / "ck")).save_sync(src)
    out = tmp_path / "out"
    out.mkdir()
    dest = out / ("\u00e9" * 128) / "w.bin" if inside else out / ("\u00e9" * 128)
    reader = fc.Checkpoint(str(tmp_path / "next"), str(tmp_path / "ck"))
    with reader as cp, pytest.raises(PathTooLongError) as info:
        cp.load_file_sync("w.bin", dest)
    message = str(info.value)
    assert "has 256 bytes, more than the 255 a name may have" in message, message
    assert "pass a shorter dest" in message
    assert os.listdir(out) == []


@pytest.mark.parametrize("where", ["dir", "dir-in-new-folder", "parent"])
def test_pull_to_a_dir_whose_name_is_over_name_max_names_the_limit(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """Proves: ``flyte-checkpoint pull URI DIR`` with a name of 300 bytes in DIR (DIR itself, a
    folder inside it, or its parent) exits 1 with PathTooLongError's message naming that name and
    the 255 bytes a name may have (it printed a bare ``[Errno 36] File name too long``), and
    writes nothing."""
    from flyte_checkpoint.cli import main

    src = data_folder(tmp_path / "data", "w.bin")
    fc.Checkpoint(str(tmp_path / "ck")).save_sync(src)
    out = tmp_path / "out"
    out.mkdir()
    long = "d" * 300
    dest = {"dir": out / long, "dir-in-new-folder": out / long / "x", "parent": out / "x" / long}[where]
    assert main(["pull", str(tmp_path / "ck"), str(dest)]) == 1
    message = capsys.readouterr().err
    assert "has 300 bytes, more than the 255 a name may have" in message, message
    assert "pull into a shorter path" in message
    assert "Errno" not in message
    assert no_working_files(out) == []
    assert not [p for p in out.rglob("*") if p.is_file()]


def test_a_destination_with_no_room_for_its_sidecar_saves_and_keeps_quiet_clean_ups(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    """Proves: a destination of 250 bytes (its ``.fcp-history`` sidecar would be 262) saves with
    retention: each save commits and warns once that its manifest could not be written, the
    retention clean-up finds nothing to clean (no sidecar can exist: the listing of a name over
    the file system's limit is empty, not an error), history lists the object without a manifest
    and it loads. Before: every save's clean-up failed with a warning saying the next one retries."""
    dest = str(tmp_path / ("a" * 250))
    for i in range(3):
        with (
            caplog.at_level("WARNING", logger="flyte_checkpoint"),
            fc.Checkpoint(dest, retention=fc.Retention(keep_last=2)) as cp,
        ):
            cp.save_sync(b"state %d" % i, step=i)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 3 and all("its manifest could not be written" in w for w in warned), warned
    (entry,) = fc.history(dest)
    assert entry.manifest is None and entry.uri == dest
    with fc.Checkpoint(str(tmp_path / "next"), dest) as cp:
        assert cp.load_sync().read_bytes() == b"state 2"
