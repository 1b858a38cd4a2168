"""The staging folders of partial restores (``.fcp-restore-*``, beside a ``load_file``
destination, or beside ``pull --member``'s) and of pulls (``.fcp-pull-*``, beside the pulled
folder) are held while their process lives (:mod:`flyte_checkpoint.util.heldfolders`): a process
SIGKILLed while it staged leaves one, and the next operation of the same kind made in the same
place removes it; a live process's, another machine's and an older version's (no lock file)
are kept.

Each child reports (prints) its staging folder once the data is restored into it, and waits on
its stdin: the kill comes at that point, not after a delay.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.cli import main
from flyte_checkpoint.util import heldfolders, workfiles
from tests.childlines import Child
from tests.reliability.gates import HANG

ROOT = Path(__file__).resolve().parents[1]

#: A child that restores one file (argv: source object, dest) and stops, its staging folder
#: printed, once the file is restored into the staging folder and before it is moved to dest.
LOAD_FILE_SCRIPT = r"""
import os, sys
import flyte_checkpoint as fc
from flyte_checkpoint.format import partial

real = partial.restore_members

def held(store, uri, size, selection, dest, **kw):
    restored = real(store, uri, size, selection, dest, **kw)
    print(dest, flush=True)
    sys.stdin.readline()
    return restored

partial.restore_members = held
with fc.Checkpoint(sys.argv[1] + ".never", sys.argv[1]) as cp:
    cp.load_file_sync("weights.bin", sys.argv[2])
"""

#: A child that pulls (argv: the CLI's arguments) and stops, its staging folder printed, once
#: the object is restored into the staging folder and before it is moved into place.
PULL_SCRIPT = r"""
import os, sys
from flyte_checkpoint.cli import main
from flyte_checkpoint.format import partial, restore

def holding(real, at):
    def held(*args, **kw):
        result = real(*args, **kw)
        print(args[at], flush=True)
        sys.stdin.readline()
        return result
    return held

restore.restore_object = holding(restore.restore_object, 3)
partial.restore_members = holding(partial.restore_members, 4)
sys.exit(main(sys.argv[1:]))
"""


def start(script: str, beside: Path, *args: str) -> tuple[Child, Path, Path]:
    """A child running ``script`` with ``args``; the child, its staging folder in ``beside``,
    and the folder it restored into (in the staging folder), as the child reports it."""
    child = Child([sys.executable, "-c", script, *args], {**os.environ, "PYTHONPATH": str(ROOT)}, ROOT)
    line = child.next()
    if not line:
        _, out = child.end()
        pytest.fail(f"the child did not reach its staging folder: {out}")
    restored = Path(line)
    staging = next((p for p in [restored, *restored.parents] if p.parent == beside), None)
    assert staging is not None, f"the child restored into {restored}, not in {beside}"
    return child, staging, restored


def kill(child: Child) -> None:
    child.end(signal.SIGKILL)


def let_go(child: Child) -> None:
    """Let a held child go on, and see it end well."""
    child.say()
    code, out = child.end()
    assert code == 0, out


@pytest.fixture
def folder_checkpoint(tmp_path: Path) -> str:
    data = tmp_path / "data"
    data.mkdir()
    (data / "weights.bin").write_bytes(b"w" * 200_000)
    (data / "notes.txt").write_text("epoch 3")
    uri = str(tmp_path / "ckpt")
    fc.Checkpoint(uri).save_sync(data)
    return uri


def strangers(folder: Path, prefix: str) -> list[Path]:
    """Folders of ``prefix`` no sweep here may remove: another machine's (its lock file names
    another host), and an older version's (no lock file, empty or not)."""
    other = folder / f"{prefix}0therhst"
    old = folder / f"{prefix}oldversn"
    empty = folder / f"{prefix}emptyold"
    for made in (other, old, empty):
        made.mkdir()
    (other / workfiles.LOCK).write_bytes(b"another-machine\n1\n")
    (other / "tree").mkdir()
    (old / "tree").mkdir()
    return [other, old, empty]


def test_a_killed_load_files_staging_is_removed_by_the_next_load_file_there(
    folder_checkpoint: str, tmp_path: Path
):
    """Proves: a process SIGKILLed during ``load_file`` leaves its ``.fcp-restore-*`` folder
    (with the file restored in it) beside the destination; the next ``load_file`` to that
    folder removes it, keeps a live process's (held at the same point), another machine's and
    an older version's, and restores its file."""
    out = tmp_path / "out"
    out.mkdir()
    dest = str(out / "weights.bin")
    killed, theirs, restored = start(LOAD_FILE_SCRIPT, out, folder_checkpoint, dest)
    live, alive, live_restored = start(LOAD_FILE_SCRIPT, out, folder_checkpoint, dest)
    try:
        assert theirs.name.startswith(workfiles.RESTORE) and workfiles.is_working_file(theirs.name)
        assert (restored / "weights.bin").stat().st_size == 200_000
        kill(killed)
        assert theirs.is_dir()
        kept = strangers(out, workfiles.RESTORE)
        with fc.Checkpoint(str(tmp_path / "next"), folder_checkpoint) as cp:
            assert cp.load_file_sync("weights.bin", dest) == Path(dest)
        assert not theirs.exists(), "the killed load_file's staging folder was left behind"
        assert (live_restored / "weights.bin").stat().st_size == 200_000
        for folder in kept:
            assert folder.is_dir(), folder
        assert Path(dest).read_bytes() == b"w" * 200_000
    finally:
        let_go(live)
    assert not alive.exists(), "a load_file that ended left its staging folder"
    assert sorted(p.name for p in out.iterdir()) == sorted(["weights.bin", *(p.name for p in kept)])


def test_the_next_attempts_first_load_file_there_sweeps_and_later_ones_do_not_list_again(
    folder_checkpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Proves: a process lists a place for abandoned staging folders once (its first partial
    restore there), not at each restore (a data folder may hold 100,000 files); a process
    killed after that leaves its folder to the next process's first restore there (the next
    attempt's, in an out-of-memory loop), which removes it."""
    out = tmp_path / "out"
    out.mkdir()
    dest = str(out / "weights.bin")
    sweeps: list[str] = []
    real = heldfolders.sweep

    def counted(parent: str, match) -> int:  # type: ignore[no-untyped-def]
        sweeps.append(parent)
        return real(parent, match)

    monkeypatch.setattr(heldfolders, "sweep", counted)
    with fc.Checkpoint(str(tmp_path / "next"), folder_checkpoint) as cp:
        for _ in range(3):
            assert cp.load_file_sync("weights.bin", dest) == Path(dest)
    assert sweeps == [str(out)]
    killed, theirs, _ = start(LOAD_FILE_SCRIPT, out, folder_checkpoint, dest)
    kill(killed)
    assert theirs.is_dir()
    next_attempt = subprocess.run(
        [sys.executable, "-c", LOAD_FILE_SCRIPT, folder_checkpoint, dest],
        stdin=subprocess.DEVNULL,  # its held point passes at once
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=HANG,
    )
    assert next_attempt.returncode == 0, next_attempt.stderr
    assert not theirs.exists(), "the next attempt's first load_file left the killed one's folder"
    assert os.listdir(out) == ["weights.bin"]


@pytest.mark.parametrize("member", [False, True], ids=["pull", "pull-member"])
def test_a_killed_pulls_staging_is_removed_by_the_next_pull_there(
    member: bool, folder_checkpoint: str, tmp_path: Path
):
    """Proves: a ``flyte-checkpoint pull`` (of the whole checkpoint, or ``--member``)
    SIGKILLed once the object is restored into its staging folder leaves that folder
    (``.fcp-pull-*``, or ``.fcp-restore-*`` for members) beside the destination; the next pull
    of the same kind into that folder removes it, keeps a live pull's, another machine's and an
    older version's, and pulls."""
    place = tmp_path / "pulled"
    place.mkdir()
    extra = ["--member", "weights.bin"] if member else []
    prefix = workfiles.RESTORE if member else workfiles.PULL
    killed, theirs, restored = start(PULL_SCRIPT, place, "pull", folder_checkpoint, str(place / "a"), *extra)
    live, alive, live_restored = start(
        PULL_SCRIPT, place, "pull", folder_checkpoint, str(place / "b"), *extra
    )
    try:
        assert theirs.name.startswith(prefix) and workfiles.is_working_file(theirs.name), theirs
        assert (restored / "weights.bin").stat().st_size == 200_000
        kill(killed)
        assert theirs.is_dir()
        kept = strangers(place, prefix)
        assert main(["pull", folder_checkpoint, str(place / "c"), *extra]) == 0
        assert not theirs.exists(), "the killed pull's staging folder was left behind"
        assert (live_restored / "weights.bin").stat().st_size == 200_000
        for folder in kept:
            assert folder.is_dir(), folder
        assert (place / "c" / "weights.bin").read_bytes() == b"w" * 200_000
        assert not (place / "c" / workfiles.LOCK).exists()
    finally:
        let_go(live)
    assert not alive.exists(), "a pull that ended left its staging folder"
    assert (place / "b" / "weights.bin").read_bytes() == b"w" * 200_000
    assert sorted(os.listdir(place / "b")) == (["weights.bin"] if member else ["notes.txt", "weights.bin"])


def test_a_member_named_like_the_lock_file_is_restored_and_never_meets_it(tmp_path: Path):
    """Proves: a checkpoint holding a file named ``.fcp-lock`` (a user's file; only a held
    folder's top level holds the library's lock) is restored by ``load_file`` and by a pull,
    which stage it in a folder of their own inside their held folder."""
    data = tmp_path / "data"
    data.mkdir()
    (data / workfiles.LOCK).write_bytes(b"a user's file")
    uri = str(tmp_path / "ckpt")
    fc.Checkpoint(uri).save_sync(data)
    with fc.Checkpoint(str(tmp_path / "next"), uri) as cp:
        got = cp.load_file_sync(workfiles.LOCK, tmp_path / "out" / "lock")
        assert got is not None and got.read_bytes() == b"a user's file"
    assert main(["pull", uri, str(tmp_path / "pulled")]) == 0
    assert (tmp_path / "pulled" / workfiles.LOCK).read_bytes() == b"a user's file"
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["lock"]


def test_holding_makes_a_held_folder_and_removes_it_however_the_block_ends(tmp_path: Path):
    """Proves: ``heldfolders.holding`` gives a new folder of the prefix, held (a sweep keeps
    it), recognised as a working file, and removed when the block ends by an error too."""
    with heldfolders.holding(str(tmp_path), workfiles.PULL) as held:
        assert workfiles.named(workfiles.PULL)(os.path.basename(held))
        assert workfiles.is_working_file(os.path.basename(held))
        assert heldfolders.sweep(str(tmp_path), workfiles.named(workfiles.PULL)) == 0
        assert os.path.isdir(held)
    assert not os.path.exists(held)
    with pytest.raises(KeyError), heldfolders.holding(str(tmp_path), workfiles.RESTORE) as held:
        raise KeyError("interrupted")
    assert os.listdir(tmp_path) == []
