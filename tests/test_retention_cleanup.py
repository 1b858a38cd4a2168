"""The clean-up protocol (flyte_checkpoint.history.cleanup) on the memory and file stores."""

from __future__ import annotations

import os
import uuid

import pytest

from flyte_checkpoint.history.cleanup import Janitor, clean
from flyte_checkpoint.history.manifest import (
    DELETING,
    Manifest,
    generation_uri,
    read_manifests,
    write_manifest,
)
from flyte_checkpoint.history.retention import Retention
from flyte_checkpoint.storage.registry import store_for


@pytest.fixture(params=["memory", "file"])
def root(request, tmp_path):
    if request.param == "memory":
        return f"memory://fcp-retention/{uuid.uuid4().hex}"
    return str(tmp_path / "root")


def put(store, dest, gen, *, attempt=0, current=False, metrics=None, step=None, run="r", size=None):
    """Generation ``gen`` of ``dest``: its bytes (at dest when ``current``, else its .obj) and manifest."""
    data = f"{dest}#{gen}".encode()
    obj = dest if current else generation_uri(dest, gen)
    store.write_bytes(obj, data)
    m = Manifest(
        generation=gen,
        object=obj,
        size=len(data) if size is None else size,
        run=run,
        attempt=attempt,
        step=step,
        metrics=metrics or {},
        time=1000.0 + gen,
        dest=dest,
    )
    write_manifest(store, m)
    return m


def series(store, dest, n, attempt=0, **kw):
    return [put(store, dest, g, attempt=attempt, current=g == n - 1, **kw) for g in range(n)]


def names(store, prefix):
    return sorted(u[len(prefix) :] for u in store.list(prefix))


def test_keep_last_deletes_old_generations_and_their_manifests(root):
    dest = f"{root}/a/ckpt"
    store = store_for(dest)
    series(store, dest, 5)
    report = clean(store, [dest], Retention(keep_last=2), writing=dest)
    assert len(report.deleted) == 3 and not report.more
    left = names(store, f"{root}/a/")
    assert left == [
        "ckpt",
        "ckpt.fcp-history/g00000003.json",
        "ckpt.fcp-history/g00000003.obj",
        "ckpt.fcp-history/g00000004.json",
    ]
    again = clean(store, [dest], Retention(keep_last=2), writing=dest)
    assert again.deleted == [] and again.finished == []  # idempotent
    assert names(store, f"{root}/a/") == left


def test_a_clean_up_is_capped_and_the_next_goes_on(root):
    dest = f"{root}/a/ckpt"
    store = store_for(dest)
    series(store, dest, 6)
    first = clean(store, [dest], Retention(keep_last=1), limit=2)
    assert len(first.deleted) == 2 and first.more
    assert first.deleted == [generation_uri(dest, 0), generation_uri(dest, 1)]  # oldest first
    second = clean(store, [dest], Retention(keep_last=1), limit=2)
    third = clean(store, [dest], Retention(keep_last=1), limit=2)
    assert len(second.deleted) == 2 and second.more
    assert len(third.deleted) == 1 and not third.more
    assert [m.generation for m in read_manifests(store, dest)] == [5]


def test_dry_run_deletes_nothing_and_says_why(root):
    dest = f"{root}/a/ckpt"
    store = store_for(dest)
    for g, loss in enumerate([1.0, 0.5, 0.5, 2.0]):
        put(store, dest, g, current=g == 3, metrics={"loss": loss})
    before = names(store, f"{root}/a/")
    report = clean(store, [dest], Retention(keep_best=("loss", "min", 1)), dry_run=True)
    assert report.deleted == [generation_uri(dest, 0), generation_uri(dest, 1)]
    assert names(store, f"{root}/a/") == before
    why = {d.candidate.uri: d.reasons for d in report.decisions}
    assert any("newest committed" in r for r in why[dest])
    assert any("keep_best" in r for r in why[generation_uri(dest, 2)])  # a tie: the newer


@pytest.mark.parametrize("stage", ["marked", "object-deleted"])
def test_a_half_done_deletion_is_finished_by_the_next_clean_up(root, stage):
    dest = f"{root}/a/ckpt"
    store = store_for(dest)
    ms = series(store, dest, 3)
    write_manifest(store, Manifest(**{**ms[0].__dict__, "state": DELETING}))
    if stage == "object-deleted":
        store.delete(ms[0].object)
    report = clean(store, [dest], Retention(keep_last=5))
    assert report.finished == [ms[0].object] and report.deleted == []
    assert [m.generation for m in read_manifests(store, dest)] == [1, 2]
    assert store.stat(ms[0].object) is None


def test_a_deleting_manifest_never_takes_a_rewritten_destination(root):
    """A killed clean-up of an earlier attempt's object, whose destination was written again
    since: the new bytes belong to the newer save and stay."""
    dest = f"{root}/a/ckpt"
    store = store_for(dest)
    old = put(store, dest, 0, current=True)
    write_manifest(store, Manifest(**{**old.__dict__, "state": DELETING}))
    store.write_bytes(dest, b"a newer and longer object")  # not what the manifest describes
    clean(store, [dest], Retention(keep_last=1), objects="all")
    assert store.read_bytes(dest) == b"a newer and longer object"


def test_what_it_never_deletes(root):
    dest = f"{root}/a/ckpt"
    store = store_for(dest)
    series(store, dest, 4)
    stray = generation_uri(dest, 7)  # a generation's bytes without a manifest
    store.write_bytes(stray, b"no manifest")
    other = f"{root}/b/ckpt"
    series(store, other, 3, run="someone-else", attempt=9)
    # the manifest of generation 1 no longer matches its object (damaged, replaced)
    store.write_bytes(generation_uri(dest, 1), b"replaced by something else entirely")
    report = clean(store, [dest, other], Retention(keep_last=1), run="r", protected=[generation_uri(dest, 0)])
    assert report.deleted == [generation_uri(dest, 2)]
    assert store.stat(stray) is not None
    assert store.stat(generation_uri(dest, 1)) is not None
    assert store.stat(generation_uri(dest, 0)) is not None
    assert [m.generation for m in read_manifests(store, other)] == [0, 1, 2]


def test_earlier_attempts_objects_are_deleted_only_when_allowed(root):
    dests = [f"{root}/run/{k}/ckpt" for k in range(3)]
    store = store_for(dests[0])
    for k, d in enumerate(dests):
        series(store, d, 2, attempt=k)
    only_generations = clean(store, dests, Retention(keep_last=1))
    assert sorted(only_generations.deleted) == sorted(generation_uri(d, 0) for d in dests)
    assert all(store.stat(d) is not None for d in dests)
    assert {why for _, why in only_generations.skipped} == {
        "an attempt's own object (deleting those is opt-in: Retention(earlier_attempts=True))"
    }
    everything = clean(store, dests, Retention(keep_last=1), objects="all")
    assert everything.deleted == [dests[0], dests[1]]
    assert store.stat(dests[0]) is None and store.stat(dests[1]) is None
    assert store.stat(dests[2]) is not None
    assert [m.generation for m in read_manifests(store, dests[0])] == []


def test_the_janitor_runs_off_the_thread_and_coalesces():
    import threading

    gate = threading.Event()
    ran = []
    started = threading.Event()

    def slow():
        started.set()
        gate.wait()
        ran.append("slow")

    janitor = Janitor("test")
    janitor.request(slow)
    started.wait()
    janitor.request(lambda: ran.append("b"))
    janitor.request(lambda: ran.append("c"))  # replaces b, which had not started
    assert ran == []
    assert not janitor.wait(0)
    gate.set()
    assert janitor.wait(30)
    assert ran == ["slow", "c"]
    janitor.request(lambda: 1 / 0)  # a failure is logged, never raised
    assert janitor.wait(30)
    assert os.getpid()  # still here


def test_manifests_of_replaced_bytes_are_removed_and_never_make_a_checkpoint(root):
    """Saves that keep no generation (keep_last=1) write one manifest each, all naming the
    destination: only the newest describes it; the older ones go, the object stays."""
    dest = f"{root}/a/ckpt"
    store = store_for(dest)
    for g in range(4):
        put(store, dest, g, current=True)
    report = clean(store, [dest], Retention(keep_last=1))
    assert report.deleted == []
    assert [m.generation for m in read_manifests(store, dest)] == [3]
    assert store.read_bytes(dest) == f"{dest}#3".encode()


def test_a_destination_replaced_without_its_manifest_is_never_deleted(root):
    """Killed after the commit, before the manifest: the object's newest manifest no longer
    matches it, so it is not a checkpoint the policy may delete (and the older ones stay)."""
    dest = f"{root}/run/0/ckpt"
    store = store_for(dest)
    series(store, dest, 3)
    store.write_bytes(dest, b"the next save, committed, whose manifest was never written")
    report = clean(store, [dest], Retention(keep_last=1), objects="all")
    assert store.read_bytes(dest).startswith(b"the next save")
    assert report.deleted == [generation_uri(dest, 0)]  # g1 is now the newest committed
    assert store.stat(generation_uri(dest, 1)) is not None


def test_a_deleting_manifest_never_takes_an_object_rewritten_with_the_same_size(tmp_path):
    """The destination rewritten since (by a save that wrote no manifest: Flyte's own) with
    bytes of the very same size: the modification time tells them apart; the object stays."""
    dest = str(tmp_path / "a/ckpt")
    store = store_for(dest)
    old = put(store, dest, 0, current=True)
    info = next(i for i in store.list_details(dest) if i.uri == dest)
    write_manifest(
        store, Manifest(**{**old.__dict__, "state": DELETING, "modified": info.modified.isoformat()})
    )
    store.write_bytes(dest, b"x" * old.size)
    later = info.modified.timestamp() + 60  # set, not waited for
    os.utime(dest, (later, later))
    clean(store, [dest], Retention(keep_last=1), objects="all")
    assert store.read_bytes(dest) == b"x" * old.size
    assert read_manifests(store, dest) == []
