"""Proves (issue 37): what an outside tester found in the history and the fallback load stays fixed.

- an object named like a kept generation (``M.fcp-history/g00000009.obj``) that is a user's own
  destination is no generation of ``M``: ``fc.history(M)`` does not list it and a fallback load of
  ``M`` does not take it (the check gc makes: "its object is not its own generation's copy");
- a kept generation whose manifest is damaged is placed by the generation its name holds, so a
  fallback load with the destination missing takes the newest generation that loads;
- an object replaced by another writer with as many bytes, at the same listed modification time,
  does not match its old manifest on the file and memory stores (the version is compared);
- a metric too large for a float (``10**400``) is the documented TypeError, naming the metric.
"""

import os
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.storage.stores import memory

# -- a destination named like a generation (adv37 #6) -----------------------------------------


def _make_named_like_a_generation(tmp_path: Path) -> str:
    m = str(tmp_path / "a/0/m")
    cm = fc.Checkpoint(m, keeps_generations=True)
    for i in range(3):
        cm.save_sync(b"m state %d" % i, step=i)
    fc.Checkpoint(m + ".fcp-history/g00000009.obj").save_sync(b"FOREIGN", step=99)
    return m


def test_history_of_m_does_not_list_another_destination(tmp_path: Path) -> None:
    """Proves (issue 37): a user's save named like M's generation 9 is not listed in M's history."""
    m = _make_named_like_a_generation(tmp_path)
    entries = fc.history(m)
    assert all(e.dest == m for e in entries), [(e.uri, e.dest) for e in entries]
    assert [e.step for e in entries] == [2, 1, 0]


def test_fallback_of_m_does_not_load_another_destination(tmp_path: Path) -> None:
    """Proves (issue 37): with M missing, a fallback load takes M's own newest kept generation, not
    a user's save named like a generation of M."""
    m = _make_named_like_a_generation(tmp_path)
    os.unlink(m)
    got = fc.Checkpoint(str(tmp_path / "a/1/m"), m).load_sync(fallback=True)
    assert got is not None and got.read_bytes() == b"m state 1"


# -- a kept generation whose manifest is damaged (adv37 #5) -----------------------------------


def _make_damaged_manifest(tmp_path: Path) -> str:
    dest = str(tmp_path / "r/0/ckpt")
    cp = fc.Checkpoint(dest, keeps_generations=True)
    for i in range(4):
        cp.save_sync(b"state %d" % i, step=i)
    g2 = Path(dest + ".fcp-history/g00000002.json")
    g2.write_text(g2.read_text()[:40])  # a truncated manifest
    return dest


def test_history_places_an_unmanifested_generation_by_its_name(tmp_path: Path) -> None:
    """Proves (issue 37): g00000002.obj without a manifest is listed as generation 2 (before 1
    and 0), not after the generations that have manifests."""
    dest = _make_damaged_manifest(tmp_path)
    os.unlink(dest)
    entries = fc.history(dest)
    assert [e.uri.rsplit("/", 1)[-1] for e in entries] == ["g00000002.obj", "g00000001.obj", "g00000000.obj"]
    assert [e.has_manifest for e in entries] == [False, True, True]


def test_fallback_load_takes_the_newest_generation_that_loads(tmp_path: Path) -> None:
    """Proves (issue 37): with the destination missing, a fallback load returns generation 2 (its
    manifest damaged, loaded as it is), not the older generation 1."""
    dest = _make_damaged_manifest(tmp_path)
    os.unlink(dest)
    got = fc.Checkpoint(str(tmp_path / "r/1/ckpt"), dest).load_sync(fallback=True)
    assert got is not None and got.read_bytes() == b"state 2"


# -- a replacement with as many bytes at the same listed time (adv37 #1, file and memory) -----


def _replace_keeping_size_and_time(where: str, dest: str) -> None:
    """Another writer's object at ``dest``: as many bytes, the same modification time as listed
    (what a coarse clock gives two writes close together), without a manifest."""
    if where == "file":
        st = os.stat(dest)
        tmp = dest + ".other-writer"
        with open(tmp, "wb") as f:
            f.write(b"FLYTE-SAVE!")
        os.replace(tmp, dest)  # renamed into place, as writers do
        os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))
    else:
        from flyte_checkpoint.storage.registry import store_for

        with memory._lock.get():
            when = memory._modified[dest]
        store_for(dest).write_bytes(dest, b"FLYTE-SAVE!")
        with memory._lock.get():
            memory._modified[dest] = when


@pytest.mark.parametrize("where", ["file", "memory"])
def test_a_same_size_replacement_at_the_same_time_is_not_the_old_checkpoint(
    where: str, tmp_path: Path
) -> None:
    """Proves (issue 37): the version token is compared, not only size and time: the replaced
    object is listed without a manifest and a fallback load returns it as it is."""
    base = str(tmp_path / "p") if where == "file" else f"memory://adv37-{os.urandom(4).hex()}"
    dest = base + "/r/0/ckpt"
    cp = fc.Checkpoint(dest, keeps_generations=True)
    cp.save_sync(b"OLD-STATE-1", step=1)
    cp.save_sync(b"OLD-STATE-2", step=2)
    _replace_keeping_size_and_time(where, dest)
    entries = fc.history(dest)
    assert entries[0].uri == dest and not entries[0].has_manifest, [(e.uri, e.has_manifest) for e in entries]
    got = fc.Checkpoint(base + "/r/1/ckpt", dest).load_sync(fallback=True)
    assert got is not None and got.read_bytes() == b"FLYTE-SAVE!"


# -- metrics (adv37, minor) -------------------------------------------------------------------


def test_huge_int_metric_is_a_type_error(tmp_path: Path) -> None:
    """Proves (issue 37): metrics={"loss": 10**400} raises the documented TypeError naming the
    metric, never an OverflowError, and nothing is saved."""
    dest = tmp_path / "r/0/ckpt"
    with pytest.raises(TypeError, match="'loss'"):
        fc.Checkpoint(str(dest)).save_sync(b"x", metrics={"loss": 10**400})
    assert not dest.exists()
