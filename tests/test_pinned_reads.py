"""A load during a commit is never called damaged (issue 32, item 12).

A load reads an object in several requests: a partial load its trailer, its index, then the
members it needs; a full load its trailer, then the stream; ``inspect`` the stream, then the
index. Each test holds a load between two of its reads (a hook of the spy store: the load
itself reports where it is), commits another save to the same URI, and lets the load go on.
What it gives is the whole old tree (a store that pins: the file and memory stores read the
version they started with), the whole new tree (a cloud store's pinned read of a replaced
version fails with ObjectReplacedError, and the load's retry reads the new object), or an
ObjectReplacedError: never CorruptCheckpointError, never a mix.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import CorruptCheckpointError, ObjectReplacedError
from flyte_checkpoint.format import inflate
from flyte_checkpoint.storage.blobstore import BlobStore
from flyte_checkpoint.storage.registry import store_for
from flyte_checkpoint.util.retry import RetryPolicy

from .reliability.backends import backend_pool  # noqa: F401
from .reliability.gates import HANG, HoldAt
from .spystore import SpyStore, spying
from .test_partial import any_store  # noqa: F401
from .test_sharded import save_with_threads

MiB = 1024 * 1024
STORES = ["file", "memory", "s3", "gcs", "azure"]


def write_tree(root: Path, tag: str, sizes: list[int]) -> dict[str, bytes]:
    """Files of random bytes (one gzip member each from 64 KiB: several ranged reads)."""
    root.mkdir(parents=True)
    files = {}
    for i, size in enumerate(sizes):
        data = tag.encode() + os.urandom(size)
        (root / f"f{i}.bin").write_bytes(data)
        files[f"f{i}.bin"] = data
    (root / "sub").mkdir()
    (root / "sub" / "meta.json").write_bytes(f'{{"tag": "{tag}"}}'.encode())
    files["sub/meta.json"] = f'{{"tag": "{tag}"}}'.encode()
    return files


def read_tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def scheme(uri: str) -> str:
    return uri.split("://", 1)[0] if "://" in uri else "file"


Trees = tuple[Path, dict[str, bytes], Path, dict[str, bytes]]


def two_trees(tmp_path: Path, scale: float) -> Trees:
    """Two trees of the same names and other bytes and sizes: with ``scale`` 1, more than 4 MiB,
    so that a cloud stream is many ranged reads and some are asked after the commit."""
    sizes = [[3 * MiB, 100_000, 2 * MiB, 5_000], [2 * MiB + 77, 130_000, 3 * MiB, 9_000]]
    old = write_tree(tmp_path / "old", "old", [int(n * scale) for n in sizes[0]])
    new = write_tree(tmp_path / "new", "new", [int(n * scale) for n in sizes[1]])
    return tmp_path / "old", old, tmp_path / "new", new


@pytest.fixture
def trees(tmp_path) -> Trees:
    """Two small trees (members of their own, several ranged reads of a partial load)."""
    return two_trees(tmp_path, 0.2)


@pytest.fixture
def big_trees(tmp_path) -> Trees:
    return two_trees(tmp_path, 1.0)


def race(
    uri: str,
    target: str,
    hold: HoldAt,
    load: Callable[[str], Any],
    commit: Callable[[], None],
    spy_setup: Callable[[SpyStore], None] | None = None,
) -> Any:
    """Run ``load(spy_uri)`` in a thread, held by ``hold``; ``commit()`` while it is held;
    returns what the load returned, or the exception it raised."""
    outcome: dict[str, Any] = {}
    with spying(target, hook=hold) as spy:
        if spy_setup is not None:
            spy_setup(spy)
        spy_uri = spy.uri_for(uri) if target != "memory" else spy_uri_of(uri)

        def run() -> None:
            try:
                outcome["value"] = load(spy_uri)
            except BaseException as exc:  # reported to the test
                outcome["value"] = exc

        thread = threading.Thread(target=run)
        thread.start()
        try:
            assert hold.reached.wait(HANG), "the load never reached the hold"
            commit()
        finally:
            hold.release.set()
            thread.join(HANG)
        assert not thread.is_alive(), "the load hangs"
    return outcome["value"]


def expect_one_version(got: Any, old: dict[str, bytes], new: dict[str, bytes], target: str) -> None:
    """Whole old, whole new, or ObjectReplacedError; the stores that pin locally: whole old."""
    if isinstance(got, BaseException):
        assert isinstance(got, ObjectReplacedError), repr(got)
        assert "changed while it was being read" in str(got)
        return
    assert got in (old, new), f"a mix of two saves: {sorted(got)}"
    if target in ("file", "memory"):
        assert got == old, "the store pins the version the load started with: the old tree, whole"


def saved(uri: str, src: Path) -> Callable[[], None]:
    return lambda: fc.Checkpoint(uri).save_sync(str(src))


def subset(tree: dict[str, bytes], names: tuple[str, ...]) -> dict[str, bytes]:
    return {k: v for k, v in tree.items() if k in names}


def spy_uri_of(uri: str) -> str:
    """The spy store's URI of a ``memory://`` object (the spy passes its reads on to it)."""
    return "spy://" + uri.split("://", 1)[1]


@pytest.fixture
def memory_uri() -> str:
    return f"memory://reads/{uuid.uuid4().hex}/ckpt"


def loader(tmp_path: Path, names: list[str] | None = None) -> Callable[[str], dict[str, bytes]]:
    """A load of the files ``names`` (a partial load), or of the whole tree (``None``), into a
    fresh folder: the tree it restored."""

    def load(spy_uri: str) -> dict[str, bytes]:
        with fc.Checkpoint(str(tmp_path / f"ws-{uuid.uuid4().hex}"), spy_uri) as cp:
            got = cp.load_sync(members=names)
            assert got is not None
            return read_tree(got)

    return load


def one_file(tmp_path: Path, name: str) -> Callable[[str], dict[str, bytes]]:
    """``load_file_sync(name)``: the file it restored, as a tree of one."""

    def load(spy_uri: str) -> dict[str, bytes]:
        cp = fc.Checkpoint(str(tmp_path / "ws"), spy_uri)
        got = cp.load_file_sync(name, tmp_path / f"one-{uuid.uuid4().hex}.bin")
        assert got is not None
        return {name: got.read_bytes()}

    return load


# -- partial loads ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["members", "load_file"])
@pytest.mark.parametrize(
    "nth", [1, 2, 3], ids=["before-the-trailer", "before-the-index", "before-the-members"]
)
def test_a_partial_load_during_a_commit_gives_one_whole_version(any_store, trees, tmp_path, nth, kind):  # noqa: F811
    """Replaced before the 1st, 2nd or 3rd ranged read (the trailer, the index, the members) of
    ``load(members=...)`` and of ``load_file``: before, the 2nd and 3rd said 'damaged'."""
    uri, target = any_store
    old_src, old, new_src, new = trees
    fc.Checkpoint(uri).save_sync(str(old_src))
    if kind == "members":
        names: tuple[str, ...] = ("f0.bin", "f2.bin", "sub/meta.json")
        load = loader(tmp_path, ["f0.bin", "f2.bin", "sub"])
    else:
        names, load = ("f2.bin",), one_file(tmp_path, "f2.bin")

    got = race(uri, target, HoldAt(("read_range",), nth), load, saved(uri, new_src))
    expect_one_version(got, subset(old, names), subset(new, names), target)


# -- full loads ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "hold",
    [(("open_read",), 1), (("read",), 3)],
    ids=["between-the-trailer-and-the-stream", "in-the-stream"],
)
def test_a_full_load_during_a_commit_gives_one_whole_version(any_store, big_trees, tmp_path, hold):  # noqa: F811
    uri, target = any_store
    old_src, old, new_src, new = big_trees
    fc.Checkpoint(uri).save_sync(str(old_src))
    got = race(uri, target, HoldAt(*hold), loader(tmp_path), saved(uri, new_src))
    expect_one_version(got, old, new, target)


def test_a_parallel_full_load_during_a_commit_gives_one_whole_version(
    any_store,  # noqa: F811
    trees,
    tmp_path,
    monkeypatch,
):
    """The parallel inflate reads the trailer, the index, then the stream: held after the index."""
    uri, target = any_store
    old_src, old, new_src, new = trees
    monkeypatch.setattr(inflate, "PARALLEL_MIN", 0)
    monkeypatch.setenv(inflate.THREADS_ENV, "2")
    fc.Checkpoint(uri).save_sync(str(old_src))
    got = race(uri, target, HoldAt(("open_read",), 1), loader(tmp_path), saved(uri, new_src))
    expect_one_version(got, old, new, target)


# -- the command line ---------------------------------------------------------------------


@pytest.mark.parametrize("target", ["file", "s3"])
@pytest.mark.parametrize("command", ["pull", "pull --member", "inspect"])
def test_the_command_line_during_a_commit_reads_one_version(backend_pool, trees, tmp_path, target, command):  # noqa: F811
    from flyte_checkpoint.cli import main

    old_src, old, new_src, new = trees
    b = backend_pool.get(target)
    with b.activated():
        uri = b.fresh("ckpt")
        fc.Checkpoint(uri).save_sync(str(old_src))
        out = tmp_path / "out"
        argv = {
            "pull": ["pull", "{uri}", str(out)],
            "pull --member": ["pull", "{uri}", str(out), "--member", "f2.bin"],
            "inspect": ["inspect", "{uri}"],
        }[command]
        # pull: held before its stream; pull --member: before its members; inspect: before the
        # index it reads after the stream
        hold = (
            HoldAt(("open_read",), 1)
            if command == "pull"
            else HoldAt(("read_range",), 3 if "member" in command else 1)
        )
        status = race(
            uri, target, hold, lambda u: main([a.replace("{uri}", u) for a in argv]), saved(uri, new_src)
        )
        assert status == 0, status
        if command == "pull":
            expect_one_version(read_tree(out), old, new, target)
        elif command == "pull --member":
            expect_one_version(read_tree(out), subset(old, ("f2.bin",)), subset(new, ("f2.bin",)), target)


def test_inspect_never_reports_the_index_of_the_save_committed_after_its_stream(tmp_path, capsys):
    """Before, inspect read the stream, then the index of whatever was there next, and called
    a mismatch damaged (``index: refused``); now it reports the version it streamed."""
    from flyte_checkpoint.cli import main

    uri = str(tmp_path / "ckpt")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.bin").write_bytes(os.urandom(200_000))
    (tmp_path / "b").mkdir()
    for i in range(5):
        (tmp_path / "b" / f"y{i}.bin").write_bytes(os.urandom(100_000))
    fc.Checkpoint(uri).save_sync(str(tmp_path / "a"))
    status = race(
        uri,
        "file",
        HoldAt(("read_range",), 1),
        lambda u: main(["inspect", u, "--json"]),
        saved(uri, tmp_path / "b"),
    )
    assert status == 0
    import json

    report = json.loads(capsys.readouterr().out)
    assert (report["indexed_files"], report["files"]) == (1, 1)
    assert "index_error" not in report or report["index_error"] is None


# -- a sharded rank's own files -----------------------------------------------------------


@pytest.mark.parametrize("target", ["file", "s3"])
def test_own_files_of_a_sharded_save_come_from_the_version_whose_index_chose_them(
    backend_pool,  # noqa: F811
    tmp_path,
    target,
):
    from flyte_checkpoint.sharded import load_sharded

    def sharded(uri: str, tag: str, sizes: list[int]) -> list[dict[str, bytes]]:
        folders = []
        for rank, size in enumerate(sizes):
            folder = tmp_path / f"{tag}-{rank}"
            folder.mkdir()
            (folder / f"rank{rank}.bin").write_bytes(tag.encode() + os.urandom(size))
            folders.append(folder)
        assert save_with_threads(uri, folders) == []
        return [read_tree(f) for f in folders]

    b = backend_pool.get(target)
    with b.activated():
        uri = b.fresh("ckpt")
        old = sharded(uri, "old", [300_000, 200_000])

        def load(spy_uri: str) -> dict[str, bytes]:
            with fc.Checkpoint(str(tmp_path / "ws"), spy_uri) as cp:
                got = load_sharded(cp, own=True, rank=1)
                assert got is not None
                return read_tree(got)

        new: list[dict[str, bytes]] = []
        got = race(
            uri,
            scheme(uri),
            HoldAt(("read_range",), 3),
            load,
            lambda: new.extend(sharded(uri, "new", [250_000, 150_000])),
        )
        expect_one_version(got, old[1], new[1], target)


# -- a store that cannot pin ------------------------------------------------------------


def unpinned(spy: SpyStore) -> None:
    """The spy without pins: the default pin (plain reads, the version checked after a failure)."""
    spy.pin = lambda uri: BlobStore.pin(spy, uri)  # type: ignore[method-assign]
    type(spy).supports_pinned_reads = False  # type: ignore[assignment]


@pytest.fixture
def no_pins(monkeypatch):
    monkeypatch.setattr(SpyStore, "supports_pinned_reads", True)  # restored after the test
    return unpinned


@pytest.mark.parametrize("nth", [2, 3])
def test_a_store_that_cannot_pin_never_calls_a_replaced_object_damaged(
    trees, tmp_path, nth, no_pins, memory_uri
):
    uri = memory_uri
    old_src, _, new_src, new = trees
    fc.Checkpoint(uri).save_sync(str(old_src))
    load = loader(tmp_path, ["f0.bin", "f2.bin"])
    got = race(uri, "memory", HoldAt(("read_range",), nth), load, saved(uri, new_src), spy_setup=no_pins)
    # the mixed read failed its checks, the object had changed: replaced, retried, the new tree
    assert got == subset(new, ("f0.bin", "f2.bin"))


def flip_a_byte_in_a_member(uri: str) -> None:
    store = store_for(uri)
    data = bytearray(store.read_bytes(uri))
    data[len(data) // 3] ^= 0xFF
    store.write_bytes(uri, bytes(data))


@pytest.mark.parametrize("pins", [True, False], ids=["pinned", "unpinned"])
def test_a_damaged_object_that_nobody_replaced_is_still_damaged(trees, tmp_path, pins, no_pins, memory_uri):
    uri = memory_uri
    fc.Checkpoint(uri).save_sync(str(trees[0]))
    flip_a_byte_in_a_member(uri)
    with spying("memory") as spy:
        if not pins:
            no_pins(spy)
        for load in (
            lambda cp: cp.load_sync(members=["f0.bin", "f2.bin"]),
            lambda cp: cp.load_sync(),
        ):
            with (
                fc.Checkpoint(str(tmp_path / f"ws-{uuid.uuid4().hex}"), spy_uri_of(uri)) as cp,
                pytest.raises(CorruptCheckpointError),
            ):
                load(cp)
        # asked whether it changed (the default pin asks copy_source again), and it had not
        assert spy.count("changed" if pins else "copy_source") >= 2


def test_saves_that_keep_replacing_it_end_in_object_replaced_error(trees, tmp_path, no_pins, memory_uri):
    uri = memory_uri
    old_src, _, new_src, _ = trees
    fc.Checkpoint(uri).save_sync(str(old_src))
    sources = [old_src, new_src]

    def commit_each_time(op: str, _uri: str) -> None:
        if op == "read_range" and commit_each_time.reads % 3 == 1:  # type: ignore[attr-defined]
            fc.Checkpoint(uri).save_sync(str(sources[commit_each_time.reads % 2]))  # type: ignore[attr-defined]
        if op == "read_range":
            commit_each_time.reads += 1  # type: ignore[attr-defined]

    commit_each_time.reads = 0  # type: ignore[attr-defined]
    with spying("memory", hook=commit_each_time) as spy:
        no_pins(spy)
        cp = fc.Checkpoint(
            str(tmp_path / "ws"),
            spy_uri_of(uri),
            retry=RetryPolicy(attempts=2, base_delay=0),
        )
        with pytest.raises(ObjectReplacedError) as caught:
            cp.load_sync(members=["f0.bin"])
        cp.close()
    message = str(caught.value)
    assert "failed after 2 tries" in message and "changed while it was being read" in message
    assert "saves kept replacing it while it was read" in message


@pytest.mark.parametrize("target", ["file", "s3"])
def test_pull_to_stdout_of_an_object_replaced_midway_says_what_went_out(
    backend_pool,  # noqa: F811
    tmp_path,
    target,
    capsysbinary,
):
    """``pull URI -`` streams one version: the file store's whole (it reads what it pinned); on
    S3 the ranges asked after the commit fail (If-Match), and the error says that what was
    written is not a whole object, not that it will be read again."""
    from flyte_checkpoint.cli import main

    old, new = b"O" + os.urandom(6 * MiB), b"N" + os.urandom(6 * MiB)
    b = backend_pool.get(target)
    with b.activated():
        uri = b.fresh("ckpt")
        fc.Checkpoint(uri).save_sync(old)
        # held before its first read: the first ranges are in flight, the last ones asked later
        status = race(
            uri,
            target,
            HoldAt(("read",), 1),
            lambda u: main(["pull", u, "-"]),
            lambda: fc.Checkpoint(uri).save_sync(new),
        )
    captured = capsysbinary.readouterr()
    if target == "file":
        assert (status, captured.out) == (0, old)
        return
    assert status != 0 and old.startswith(captured.out) and len(captured.out) < len(old)
    assert b"changed while it was written to stdout (another save replaced it)" in captured.err
    assert b"are not a whole object; run the command again" in captured.err


def test_debug_logging_keeps_loads_pinned(trees, tmp_path, caplog):
    """At DEBUG the registry hands out logged stores: the pin is the wrapped store's own, so a
    load racing a commit reads the version it began with, as at WARNING."""
    import logging

    caplog.set_level(logging.DEBUG, logger="flyte_checkpoint")
    uri = str(tmp_path / "ckpt")
    old_src, old, new_src, _ = trees
    fc.Checkpoint(uri).save_sync(str(old_src))

    load = loader(tmp_path, ["f0.bin", "f2.bin"])
    got = race(uri, "file", HoldAt(("read_range",), 3), load, saved(uri, new_src))
    assert got == subset(old, ("f0.bin", "f2.bin"))
    lines = [r.getMessage() for r in caplog.records if r.name == "flyte_checkpoint.store"]
    assert any(line.startswith("LocalStore.pin(") and uri in line for line in lines), lines
