"""tests/shardranks.py keeps each rank child's stderr and shows it when the child hangs or fails,
so that a stalled save explains itself (a two-rank save once printed nothing for 120 s, with
stderr sent to /dev/null). The children below are stopped on an event that never comes: the
hang guard (made short here) fires whatever the machine's speed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import childlines
from tests import shardranks as sr


@pytest.mark.timeout(300)
def test_a_rank_that_hangs_fails_with_its_stacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Proves: a child stopped for good (at "packing") fails finish() with the guard's error,
    which carries the child's stderr: every thread's stack (SIGABRT, faulthandler), the
    observer it waits in among them; the same goes to the test's captured stderr."""
    [folder] = sr.make_folders(tmp_path, 1)
    ranks = sr.start(str(tmp_path / "ckpt"), [folder], stop={0: "packing"})
    assert ranks[0].lines.next("rank 0") == "AT packing"  # it is stopped now, for good
    monkeypatch.setattr(childlines, "HANG", 0.5)
    with pytest.raises(AssertionError) as info:
        sr.finish(ranks)
    text = str(info.value)
    assert "rank 0 printed nothing within 0.5s" in text, text
    assert "----- rank 0: exit status -6, last line ''; its stderr" in text, text  # AT was read above
    assert "Fatal Python error: Aborted" in text and " in stop\n" in text, text
    assert " in stop\n" in capsys.readouterr().err
    assert ranks[0].proc.returncode is not None


@pytest.mark.timeout(300)
def test_a_rank_that_fails_has_its_stderr_shown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Proves: a child that ends without OK (its segment failed) has its stderr written to the
    test's captured stderr under a heading naming it; a child that printed OK does not."""
    folders = sr.make_folders(tmp_path, 2)
    results = sr.run(str(tmp_path / "ckpt"), folders, fail={1: True})
    assert all(r.startswith("ERR ShardedSaveError") for r in results), results
    err = capsys.readouterr().err
    assert '----- rank 1: exit status 0, last line "ERR ShardedSaveError' in err, err
    assert "failed: this rank's disk is on fire\n----- end of rank 1's stderr" in err, err  # its log
    assert "----- rank 0: exit status 0" in err, err
    ok = sr.run(str(tmp_path / "ckpt"), folders)
    assert ok == ["OK", "OK"]
    assert "----- rank" not in capsys.readouterr().err


@pytest.mark.timeout(300)
def test_an_actor_that_hangs_fails_with_its_stacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Proves: an actor held at its pause, never moved on, fails next() with its stderr (its
    stacks: the pause's readline among them), and actors_end then has nothing left to end."""
    [folder] = sr.make_folders(tmp_path, 1)
    actor = sr.Actor(str(tmp_path / "ckpt"), 0, [{"folder": folder}], pause=("packing@1",))
    try:
        actor.at("packing@1")
        monkeypatch.setattr(childlines, "HANG", 0.5)
        with pytest.raises(AssertionError) as info:
            actor.next()
        text = str(info.value)
        assert "printed nothing within 0.5s" in text and "Fatal Python error: Aborted" in text, text
        assert " in pause\n" in text, text
        assert actor.child.proc.poll() is not None
    finally:
        sr.actors_end(actor)
