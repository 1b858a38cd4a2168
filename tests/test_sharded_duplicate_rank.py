"""A late second process for a rank whose save rank 0 already committed (issue 36, item 6): it
is told that the save was committed without it, and why that happens (two processes ran as the
rank, or a repeated call), as save_sharded's docstring promises; not "rank 0 did not open"."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from flyte_checkpoint.errors import ShardedSaveError
from flyte_checkpoint.sharded import save_sharded
from tests import shardranks as sr


def _folder(root: Path, name: str, files: dict[str, bytes]) -> Path:
    d = root / name
    d.mkdir()
    for k, v in files.items():
        (d / k).write_bytes(v)
    return d


def _told(message: str, rank: int = 1) -> None:
    assert "did not open" not in message, message
    assert f"rank {rank}: rank 0 committed" in message and "without this call" in message, message
    assert f"two processes ran as rank {rank}" in message and "not in the checkpoint" in message, message


@pytest.mark.timeout(120)
@pytest.mark.parametrize("scheme", ["file", "memory"])
def test_a_repeated_call_for_a_committed_save_is_told_it_was_committed_without_it(
    tmp_path: Path, scheme: str
) -> None:
    """Proves: a second call as rank 1 for the same job and step, after rank 0 committed that
    save with the first one, raises ShardedSaveError saying so (this process took part already)."""
    uri = str(tmp_path / "store" / "ckpt") if scheme == "file" else f"memory://dup-{tmp_path.name}/ckpt"
    folders = [
        _folder(tmp_path, "r0", {"a.bin": b"A" * 1000}),
        _folder(tmp_path, "r1", {"b.bin": b"B" * 1000}),
    ]
    assert sr.save_threads(uri, folders, job="dup", step=5) == []
    late = _folder(tmp_path, "r1x", {"x.bin": b"X" * 1000})
    with pytest.raises(ShardedSaveError) as info:
        save_sharded(uri, late, rank=1, world_size=2, job="dup", step=5, timeout=1)
    _told(str(info.value))


@pytest.mark.timeout(120)
def test_a_second_process_as_a_rank_after_the_commit_is_told_two_processes_ran_as_it(tmp_path: Path) -> None:
    """Proves: another process started as rank 1 of the same job after the commit (its first
    save, as the one committed) is told the save was committed without it, naming the session."""
    dest = tmp_path / "ckpt"
    env = {"FLYTE_CHECKPOINT_JOB": "dup"}
    folders = sr.make_folders(tmp_path, 2)
    assert sr.run(str(dest), folders, env=env) == ["OK", "OK"]
    late = [folders[0], _folder(tmp_path, "late", {"late.bin": b"L"})]
    [line] = sr.run(str(dest), late, env=env, only={1}, timeout={1: 1})
    assert line.startswith("ERR ShardedSaveError"), line
    _told(line)
    assert "save #1 of 2 ranks, led by rank 0 on host" in line


def test_a_rank_that_joins_its_save_in_time_is_unaffected(tmp_path: Path) -> None:
    """Proves: the same job's next save (step 6) after a committed step 5 is joined as usual."""
    uri = str(tmp_path / "store" / "ckpt")
    folders = [_folder(tmp_path, "r0", {"a.bin": b"A"}), _folder(tmp_path, "r1", {"b.bin": b"B"})]
    assert sr.save_threads(uri, folders, job="dup", step=5) == []
    errors: list[BaseException] = []

    def again(r: int) -> None:
        try:
            save_sharded(uri, folders[r], rank=r, world_size=2, job="dup", step=6, timeout=60)
        except BaseException as exc:  # returned to the test
            errors.append(exc)

    threads = [threading.Thread(target=again, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
