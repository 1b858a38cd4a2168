"""Proves (issue 37): what an outside tester found in retention stays fixed.

- ``flyte-checkpoint gc PREFIX/`` over destinations whose manifests name no run decides each
  destination on its own (its newest is kept), never breaks a tie by names, and never deletes
  what ``fc.history`` lists as the newest (one order for both);
- resuming in place, the checkpoint loaded stays protected once the next save keeps it as a
  generation.
"""

import subprocess
import sys
from pathlib import Path

import flyte_checkpoint as fc


def gc(*args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("flyte-checkpoint")
    return subprocess.run([str(exe), "gc", *args], capture_output=True, text=True)


def test_gc_prefix_keeps_the_newest_of_each_run(tmp_path: Path) -> None:
    """Proves (issue 37): two runs under one prefix whose manifests name no run: each destination
    is its own run, so gc PREFIX/ --keep-last 1 keeps the newest of each (and deletes only their
    older generations)."""
    for run, attempts in (("run", 2), ("run2", 3)):
        for att in range(attempts):
            cp = fc.Checkpoint(str(tmp_path / f"p/{run}/{att}/ckpt"), keeps_generations=True)
            for g in range(2):
                cp.save_sync(f"{run}-{att}-{g}".encode(), step=att * 10 + g)
    newest_of_run = tmp_path / "p/run/1/ckpt"
    r = gc(str(tmp_path / "p") + "/", "--keep-last", "1")
    assert r.returncode == 0, r.stderr
    # run "run"'s newest checkpoint must survive a keep_last=1 clean-up of the prefix
    assert newest_of_run.exists(), r.stdout
    assert (tmp_path / "p/run2/2/ckpt").exists()
    objects = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "p").glob("*/*/ckpt*"))
    assert objects == [
        f"p/{r}/{a}/ckpt{s}"
        for r, n in (("run", 2), ("run2", 3))
        for a in range(n)
        for s in ("", ".fcp-history")
    ]
    assert not list((tmp_path / "p").glob("*/*/ckpt.fcp-history/*.obj")), r.stdout


def test_gc_prefix_tie_is_not_broken_by_name(tmp_path: Path) -> None:
    """Proves (issue 37): two destinations at (attempt 0, generation 0) are never decided by their
    names: both are kept whichever name sorts first."""
    kept = []
    for first, second in (("a", "b"), ("b", "a")):
        root = tmp_path / f"{first}{second}"
        fc.Checkpoint(str(root / f"{first}/0/ckpt")).save_sync(b"first", step=1)
        fc.Checkpoint(str(root / f"{second}/0/ckpt")).save_sync(b"second", step=2)
        r = gc(str(root) + "/", "--keep-last", "1")
        assert r.returncode == 0, r.stderr
        kept.append(sorted(p.parent.parent.name for p in root.glob("*/0/ckpt")))
    # Each of these is the only checkpoint of its folder: neither should be deleted. At the least, which one
    # survives must not depend on the names (it does: "a" survives both times).
    assert kept == [["a", "b"], ["a", "b"]], kept


def test_gc_prefix_does_not_delete_what_history_lists_as_newest(tmp_path: Path) -> None:
    """Proves (issue 37): history and retention share one order (an unknown attempt is the
    newest): gc never deletes what fc.history lists as the newest."""
    # history.md: an object "whose attempt is unknown comes before every attempt" (it is listed first);
    # the retention code takes an unknown attempt as -1 (oldest) and deletes it under keep_last=1.
    fc.Checkpoint(str(tmp_path / "p/0/ckpt")).save_sync(b"attempt 0", step=1)
    fc.Checkpoint(str(tmp_path / "p/final/ckpt")).save_sync(b"final, saved last", step=2)
    newest = fc.history(str(tmp_path / "p") + "/")[0].uri
    assert newest == str(tmp_path / "p/final/ckpt")
    r = gc(str(tmp_path / "p") + "/", "--keep-last", "1")
    assert r.returncode == 0, r.stderr
    assert Path(newest).exists(), r.stdout


def test_the_loaded_object_survives_an_in_place_resume(tmp_path: Path) -> None:
    """Proves (issue 37): resuming in place, Checkpoint(D, D, retention=...), the bytes loaded stay
    protected after the next save keeps them as a generation (protected by generation, not URI)."""
    d = str(tmp_path / "r/0/ckpt")
    pol = fc.Retention(keep_best=("loss", "min", 1))
    with fc.Checkpoint(d, retention=pol) as c:
        c.save_sync(b"g0 best", step=0, metrics={"loss": 0.1})
        c.save_sync(b"g1 loaded", step=1, metrics={"loss": 0.9})
        c.wait()
    with fc.Checkpoint(d, d, retention=pol) as c:
        assert c.load_sync().read_bytes() == b"g1 loaded"
        c.save_sync(b"g2", step=2, metrics={"loss": 0.5})
        c.save_sync(b"g3", step=3, metrics={"loss": 0.6})
        c.wait()
        steps = [e.step for e in fc.history(d)]
    assert 1 in steps, steps  # the loaded checkpoint (step 1) is gone: [3, 0]


def test_a_tie_in_a_named_run_keeps_both() -> None:
    """Proves (issue 37): two destinations of one named run at the same (attempt, generation) are
    both the newest: keep_last=1 keeps both, whichever name sorts first."""
    from flyte_checkpoint.history.retention import Candidate, select

    for names in (("a", "b"), ("b", "a")):
        found = [Candidate(f"mem://{n}/0/ckpt", 0, 0, run="r", dest=f"mem://{n}/0/ckpt") for n in names]
        older = Candidate("mem://a/0/ckpt.fcp-history/g00000000.obj", 0, -1, run="r", dest="mem://a/0/ckpt")
        kept = select([*found, older], fc.Retention(keep_last=1), run="r")
        assert kept == {"mem://a/0/ckpt", "mem://b/0/ckpt"}
        kept_best = select(found, fc.Retention(keep_best=("m", "min", 1)), run="r")
        assert kept_best == {"mem://a/0/ckpt", "mem://b/0/ckpt"}
