"""A clean-up SIGKILLed at each of its steps: nothing listed that cannot load, and the next
clean-up finishes the job (flyte_checkpoint.history.cleanup).

The child deletes, under ``Retention(keep_last=1)``, two older generations of a checkpoint (each:
mark the manifest "deleting", delete the object, delete the manifest) and is killed at a point
it reports (:mod:`tests.reliability.killpoints`): the marking write's ``open``, ``commit`` or
``committed`` (of the first or the second deletion), or before or after the first to fourth
delete. Nothing here depends on timing.
"""

from __future__ import annotations

import os

import pytest

from flyte_checkpoint.history.cleanup import clean
from flyte_checkpoint.history.manifest import COMMITTED, generation_uri, read_manifests
from flyte_checkpoint.history.retention import Retention
from flyte_checkpoint.storage.registry import store_for
from tests.reliability.killpoints import DELETE_ENV, SIDECAR_ENV, WRITER_ENV, kill_at
from tests.test_retention_cleanup import series

CHILD = r"""
import sys
from tests.reliability import killpoints

dest = sys.argv[1]
killpoints.arm(dest)
from flyte_checkpoint.history.cleanup import clean
from flyte_checkpoint.history.retention import Retention
from flyte_checkpoint.storage.registry import store_for

clean(store_for(dest), [dest], Retention(keep_last=1))
killpoints.done()
"""

POINTS = [
    ("open", {WRITER_ENV: "1"}),
    ("commit", {WRITER_ENV: "1"}),
    ("committed", {WRITER_ENV: "1"}),
    ("delete", {DELETE_ENV: "1"}),  # the first object
    ("deleted", {DELETE_ENV: "1"}),
    ("delete", {DELETE_ENV: "2"}),  # the first manifest
    ("deleted", {DELETE_ENV: "2"}),
    ("committed", {WRITER_ENV: "2"}),  # the second marking
    ("delete", {DELETE_ENV: "3"}),
    ("deleted", {DELETE_ENV: "4"}),
]


def loadable(store, dest) -> None:
    """Every committed manifest's object is there, with the size it records."""
    for m in read_manifests(store, dest):
        if m.state == COMMITTED:
            assert store.stat(m.object) == m.size, m


@pytest.mark.parametrize(("point", "extra"), POINTS, ids=[f"{p}-{next(iter(e.values()))}" for p, e in POINTS])
def test_a_clean_up_killed_at_any_step_is_finished_by_the_next(tmp_path, point, extra):
    dest = str(tmp_path / "store/run/0/ckpt")
    store = store_for(dest)
    series(store, dest, 3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FCP_")} | extra | {SIDECAR_ENV: "1"}
    kill = kill_at(point, CHILD, [dest], env, tmp_path / "child.log")
    assert kill.reached, kill
    loadable(store, dest)
    assert store.read_bytes(dest) == f"{dest}#2".encode()
    report = clean(store, [dest], Retention(keep_last=1))
    loadable(store, dest)
    assert [m.generation for m in read_manifests(store, dest)] == [2]
    assert sorted(store.list(dest)) == [dest, f"{dest}.fcp-history/g00000002.json"]
    assert all(store.stat(generation_uri(dest, g)) is None for g in (0, 1))
    assert not report.more
