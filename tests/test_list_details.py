"""``BlobStore.list_details``: sizes and modification times from a listing, one level with
folders, the default for stores that only list and stat, and ``ls -l`` built on it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import BinaryIO

import pytest

from flyte_checkpoint.storage.blobstore import BlobStore, BlobWriter, ObjectInfo
from flyte_checkpoint.storage.stores.local import LocalStore
from flyte_checkpoint.storage.stores.memory import MemoryStore
from tests.spystore import spying

NAMES = {"run/1/ckpt": b"a" * 10, "run/1/step": b"7", "run/2/ckpt": b"b" * 20, "runz": b"zz", "top": b"t"}


class Minimal(BlobStore):
    """A third-party store with only the five required methods (over the memory store),
    counting its stat calls."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.stats: list[str] = []

    def open_read(self, uri: str) -> BinaryIO:
        return self.inner.open_read(uri)

    def open_write(self, uri: str) -> BlobWriter:
        return self.inner.open_write(uri)

    def stat(self, uri: str) -> int | None:
        self.stats.append(uri)
        return self.inner.stat(uri)

    def delete(self, uri: str) -> None:
        self.inner.delete(uri)

    def list(self, prefix: str) -> Iterator[str]:
        return self.inner.list(prefix)


def fill(store: BlobStore, root: str) -> None:
    for name, data in NAMES.items():
        store.write_bytes(f"{root}/{name}", data)


def test_the_default_for_a_store_that_only_lists_and_stats(tmp_path):
    """Proves: a store written before list_details existed gets it from list + stat (sizes, no
    times); one level stats only the objects at that level, never those inside the folders."""
    store = Minimal()
    root = f"memory://third-party/{os.urandom(4).hex()}"
    fill(store, root)
    every = list(store.list_details(root + "/"))
    assert [(i.uri, i.size, i.modified, i.is_folder) for i in every] == [
        (f"{root}/{n}", len(d), None, False) for n, d in sorted(NAMES.items())
    ]
    store.stats.clear()
    top = list(store.list_details(root + "/", recursive=False))
    assert [(i.uri, i.size, i.is_folder) for i in top] == [
        (f"{root}/run/", None, True),
        (f"{root}/runz", 2, False),
        (f"{root}/top", 1, False),
    ]
    assert store.stats == [f"{root}/runz", f"{root}/top"]


@pytest.mark.parametrize("kind", ["local", "memory"])
def test_local_and_memory_give_sizes_and_times_from_their_listing_without_stat(kind, tmp_path):
    """Proves: the built-in stores list sizes and modification times natively (no stat call per
    object), the times are the objects' own (a file's mtime), and one level shows folders."""

    class Counting(LocalStore if kind == "local" else MemoryStore):  # type: ignore[misc]
        stats = 0

        def stat(self, uri: str) -> int | None:
            Counting.stats += 1
            return super().stat(uri)

    store = Counting()
    root = str(tmp_path / "store") if kind == "local" else f"memory://native/{os.urandom(4).hex()}"
    before = datetime.now(timezone.utc).replace(microsecond=0)
    fill(store, root)
    if kind == "local":
        os.utime(f"{root}/top", (1_700_000_000, 1_700_000_000))
    every = {i.uri: i for i in store.list_details(root + "/")}
    assert sorted(every) == [f"{root}/{n}" for n in sorted(NAMES)]
    for name, data in NAMES.items():
        info = every[f"{root}/{name}"]
        assert info.size == len(data) and not info.is_folder
        assert info.modified is not None and info.modified.tzinfo is not None
        if not (kind == "local" and name == "top"):
            assert info.modified >= before
    if kind == "local":
        assert every[f"{root}/top"].modified == datetime.fromtimestamp(1_700_000_000, timezone.utc)
    top = [(i.uri, i.size, i.is_folder) for i in store.list_details(root + "/", recursive=False)]
    assert top == [(f"{root}/run/", None, True), (f"{root}/runz", 2, False), (f"{root}/top", 1, False)]
    assert [i.uri for i in store.list_details(f"{root}/run", recursive=False)] == [
        f"{root}/run/",
        f"{root}/runz",
    ]
    assert list(store.list_details(f"{root}/absent/", recursive=False)) == []
    assert Counting.stats == 0


def test_ls_long_takes_sizes_and_times_from_one_listing_call(capsys):
    """Proves: ``ls -l`` asks the store for one detailed listing and no size per object (it made
    one stat call per object), and shows size, modification time (UTC) and URI."""
    from flyte_checkpoint.cli import main

    with spying("memory") as spy:
        root = f"spy://ls-long/{os.urandom(4).hex()}"
        fill(MemoryStore(), root.replace("spy://", "memory://"))
        assert main(["ls", "-l", root + "/"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert spy.count("stat") == 0 and spy.count("list_details") == 1
    assert len(lines) == len(NAMES)
    size, day, clock, uri = lines[0].split()
    assert (size, uri) == ("10", f"{root}/run/1/ckpt")
    assert datetime.strptime(f"{day} {clock}", "%Y-%m-%d %H:%M:%S")  # 2026-12-03 10:15:02


def test_ls_one_level_shows_folders_in_text_and_json(tmp_path, capsys):
    """Proves: ``ls --no-recursive`` lists one level (a folder once, ending with '/'; PRE in the
    -l column); --json gives each entry's size, modification time (ISO 8601) and folder flag."""
    from flyte_checkpoint.cli import main

    root = str(tmp_path / "store")
    fill(LocalStore(), root)
    assert main(["ls", "--no-recursive", root + "/"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{root}/run/", f"{root}/runz", f"{root}/top"]
    assert main(["ls", "-l", "--no-recursive", root + "/"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["PRE", f"{root}/run/"]
    assert lines[1].split()[0] == "2" and lines[1].endswith(f"{root}/runz")
    assert main(["ls", "-l", "--no-recursive", root + "/", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["objects"][0] == {"uri": f"{root}/run/", "folder": True, "size": None, "modified": None}
    runz = doc["objects"][1]
    assert runz["size"] == 2 and datetime.fromisoformat(runz["modified"]).tzinfo is not None
    assert main(["ls", "-l", root + "/", "--json"]) == 0
    assert [o["size"] for o in json.loads(capsys.readouterr().out)["objects"]] == [10, 1, 20, 2, 1]


def test_object_info_is_a_plain_value():
    info = ObjectInfo("s3://b/k", 3)
    assert (info.modified, info.is_folder) == (None, False)
    assert info == ObjectInfo("s3://b/k", 3, None, False)
