"""Crash mid-save: a child process saving a directory checkpoint is SIGKILLed at points it reports.

For each backend (file, S3, GCS, Azure, on their test servers) a child process saves a
directory of about 5 MiB of incompressible data in several files, and is SIGKILLed at a
point of the save that it reports reaching and waits at (see killpoints.py): with the
writer open and nothing written, after every part boundary of the bytes handed to the
store, as the commit starts, (on S3) as the commit request is sent and once S3 has
answered it, after the store's commit returned, and after ``save_sync`` returned. Where
each kill lands is decided by the save's own progress, so the outcome does not depend on
the machine's speed. Half of the kills hit a destination that already holds a checkpoint
(the previous one must stay whole), half a destination that holds nothing (it must stay
empty). After every kill the destination is loaded with ``Checkpoint`` and compared, file by
file and byte by byte, with what that point allows: before the commit, the previous state;
from the moment the store has committed, the new tree, whole.

Leftovers a killed writer cannot clean are counted and reported: S3 multipart uploads that
were never completed (invisible to loads; a bucket lifecycle rule removes them), and local
``.fcp-tmp-*`` files beside the destination (invisible to loads and listings; a later save
sweeps those older than an hour, which the test checks by ageing them).

Run with ``-s`` to see one summary line per backend.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import flyte_checkpoint as fc
from flyte_checkpoint.storage.registry import store_for
from tests.reliability import backends
from tests.reliability.backends import Backend, s3_open_uploads
from tests.reliability.killpoints import SAVE_SCRIPT, kill_at
from tests.reliability.trees import Snapshot, loaded, make_tree

#: The backends' fixtures (see backends.py), visible to pytest in this module.
backend = backends.backend
backend_pool = backends.backend_pool

MIN_KILLS = 20
#: Bytes between two ``bytes:N`` points: each backend's part (block, chunk) size in these
#: tests, so there is a kill at every part boundary; the file store writes no parts.
PART = {"file": 256 * 1024, "s3": 256 * 1024, "gcs": 256 * 1024, "azure": 320 * 1024}
#: Points after which the store has committed the new object.
COMMITTED = ("s3:commit-answered", "committed", "saved")


def kill_points(backend: str, size: int) -> list[str]:
    """Every point of a save of ``size`` bytes, in the order the save reaches them."""
    step = PART[backend]
    commit = ["commit", "s3:commit-sent", "s3:commit-answered"] if backend == "s3" else ["commit"]
    return ["open", *(f"bytes:{n}" for n in range(step, size, step)), *commit, "committed", "saved"]


def local_temp_files(dest: str) -> list[Path]:
    """Temporary files of the local store beside ``dest``."""
    return sorted(Path(dest).parent.glob(".fcp-tmp-*"))


def test_sigkill_mid_save_leaves_the_previous_checkpoint_whole_or_nothing(backend: Backend, tmp_path: Path):
    """Proves: on every backend, a writer SIGKILLed at any point of a directory save (every
    part boundary, the commit's steps, after it) leaves the destination holding the previous
    checkpoint whole (nothing if there was none) until the store has committed, and the new
    tree whole from then on; each state loads and matches byte for byte."""
    log = tmp_path / "children.log"
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    # The bytes a save of such a tree hands to the store (the same for every version).
    make_tree(tmp_path / "sizing", 0)
    fc.Checkpoint("memory://crash-sizing/tree").save_sync(tmp_path / "sizing")
    size = store_for("memory://crash-sizing/tree").stat("memory://crash-sizing/tree")
    assert size is not None
    points = kill_points(backend.name, size)
    assert len(points) >= MIN_KILLS

    seeded_dest = backend.fresh("seeded")
    current: Snapshot | None = make_tree(tmp_path / "seed", 0)
    fc.Checkpoint(seeded_dest).save_sync(tmp_path / "seed")
    assert loaded(seeded_dest, scratch) == current

    outcomes: dict[str, str] = {}
    empty_dests: list[str] = []
    for i, point in enumerate(points):
        seeded = i % 2 == 0
        dest = seeded_dest if seeded else backend.fresh(f"empty-{i}")
        if not seeded:
            empty_dests.append(dest)
        before = current if seeded else None
        tree = tmp_path / f"v{i + 1}"
        new = make_tree(tree, i + 1)
        kill = kill_at(point, SAVE_SCRIPT, [dest, str(tree)], backend.child_env(), log)
        assert kill.reached, f"the save never reached {point!r}"
        after = loaded(dest, scratch)
        want = new if point in COMMITTED else before
        outcome = "new" if after == new else "nothing" if after is None and before is None else "previous"
        assert after == want, (
            f"killed at {point!r}: {dest} holds {outcome if after in (new, before) else 'neither state'},"
            f" not {'the new tree' if want is new else 'the previous state'}: {sorted(after or {})}"
        )
        if seeded:
            current = after
        outcomes[point] = outcome
        shutil.rmtree(tree)

    interrupted = [p for p in points if p not in COMMITTED]
    leftovers = ""
    if backend.name == "s3":
        open_uploads = sum(len(s3_open_uploads(backend, d)) for d in [seeded_dest, *empty_dests])
        # A killed process cannot abort its multipart upload; only interrupted saves leave one.
        assert open_uploads <= len(interrupted)
        leftovers = f"; {open_uploads} multipart uploads left open (invisible; lifecycle rule removes them)"
    if backend.name == "file":
        temps = [t for d in [seeded_dest, *empty_dests] for t in local_temp_files(d)]
        assert len(temps) <= len(interrupted)
        for d in [seeded_dest, *empty_dests]:  # invisible to listings
            assert all(".fcp-tmp-" not in u for u in store_for(d).list(str(Path(d).parent) + "/"))
        leftovers = f"; {len(temps)} .fcp-tmp-* files left by killed writers"
        # A later save sweeps temporary files older than an hour, and only those.
        old = time.time() - 2 * 3600
        for t in temps:
            os.utime(t, (old, old))
        fresh_tmp = Path(seeded_dest).parent / ".fcp-tmp-seeded.live-writer"
        fresh_tmp.write_bytes(b"a writer still at work")
        for d in [seeded_dest, *empty_dests]:
            fc.Checkpoint(d).save_sync(b"after the crashes")
            assert local_temp_files(d) == ([fresh_tmp] if d == seeded_dest else [])
        leftovers += " (all swept by the next save once older than an hour)"

    counts = {o: sum(1 for v in outcomes.values() if v == o) for o in ("previous", "nothing", "new")}
    parts = sum(p.startswith("bytes:") for p in points)
    print(
        f"\ncrash[{backend.name}]: {len(points)} SIGKILLs at reported points ({parts} part boundaries of"
        f" {size} bytes, the commit's {len(points) - parts - 2} steps, after save_sync):"
        f" {counts['previous']} left the previous checkpoint whole, {counts['nothing']} left nothing,"
        f" {counts['new']} the new one whole; 0 damaged{leftovers}"
    )
    assert counts["previous"] and counts["nothing"] and counts["new"]
