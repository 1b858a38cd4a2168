"""Incremental folder saves (issue 18): files whose hash the previous object's index records
are copied from it on the server, not compressed and sent; the object stays one gzip tar that
every reader reads; a store without the capability sends everything."""

from __future__ import annotations

import gzip
import io
import os
import random
import shutil
import subprocess
import tarfile
import threading
import uuid
from pathlib import Path

import pytest
from blake3 import blake3

import flyte_checkpoint as fc
from conftest import require
from flyte_checkpoint.errors import CopySourceChangedError, TransientError
from flyte_checkpoint.format import index as ix
from flyte_checkpoint.storage.blobstore import CopyLimits
from flyte_checkpoint.storage.registry import store_for
from flyte_checkpoint.storage.stores.memory import MemoryStore
from flyte_checkpoint.util.retry import RetryPolicy

from .helpers import older_index, tree
from .spystore import SpyStore, spying

MiB = 1024 * 1024


def _blob(size: int, seed: int) -> bytes:
    """Deterministic bytes that do not compress (as model weights)."""
    return random.Random(seed).randbytes(size)


def make_tree(root: Path) -> Path:
    (root / "weights").mkdir(parents=True)
    for i in range(4):
        (root / "weights" / f"w{i}.bin").write_bytes(_blob(2 * MiB + 1000 * i, seed=i))
    (root / "frozen.bin").write_bytes(_blob(5 * MiB + 3, seed=10))
    (root / "config.json").write_bytes(b'{"lr": 0.1}\n')
    (root / "notes.txt").write_bytes(b"n" * (100 * 1024))  # aligned and compressible
    return root


@pytest.fixture(params=["file", "memory"])
def spy(request, tmp_path):
    with spying(request.param) as spy:
        spy.root = (  # type: ignore[attr-defined]
            spy.uri_for(str(tmp_path / "store")) if request.param == "file" else f"spy://t/{uuid.uuid4().hex}"
        )
        yield spy


def save(spy: SpyStore, dest: str, src: Path, prev: str | None = None, **kw) -> tuple[int, int]:
    """Save ``src`` to ``dest``; the bytes written and copied at the store."""
    before = spy.bytes_written, spy.bytes_copied
    with fc.Checkpoint(dest, prev, **kw) as cp:
        cp.save_sync(str(src))
    return spy.bytes_written - before[0], spy.bytes_copied - before[1]


def restored(dest: str, tmp_path: Path) -> dict:
    with fc.Checkpoint(str(tmp_path / f"n-{uuid.uuid4().hex}"), dest) as cp:
        return tree(cp.load_sync())


@pytest.mark.parametrize(
    ("version", "said"),
    [
        (2, "records SHA-256 hashes (an older index): this save sends every file"),
        (3, "records no checksum of its stored members (an older index), against which a copy of them"),
    ],
)
def test_an_object_with_an_older_index_is_not_copied_from(spy, tmp_path, caplog, version, said):
    """An object saved by an older version of this library cannot be copied from: one of index
    version 2 records SHA-256, which cannot tell which files are unchanged by their BLAKE3; one
    of version 3 records no CRC-32 of its members' stored bytes, against which a copy of them
    is checked (issue 32, item 5). The next save sends everything, correctly, says so, and the
    save after it copies again."""
    src = make_tree(tmp_path / "src")
    dest = f"{spy.root}/ckpt.tgz"
    save(spy, dest, src)
    store = store_for(dest)
    store.write_bytes(dest, older_index(store.read_bytes(dest), version))
    index = ix.read_index(store, dest)
    assert index is not None and index.algorithm == ("sha256" if version < 3 else "blake3")
    total = sum(len(v) for v in tree(src).values() if isinstance(v, bytes))
    with caplog.at_level("INFO", logger="flyte_checkpoint"):
        written, copied = save(spy, dest, src)
    assert copied == 0 and written > total // 2
    assert said in caplog.text
    assert restored(dest, tmp_path) == tree(src)
    written, copied = save(spy, dest, src)
    assert copied > total * 0.9 and written < 300 * 1024, (written, copied)


def test_a_sequence_of_incremental_saves_restores_each_tree(spy, tmp_path):
    """Unchanged, one file changed, a file renamed, a file removed, and a file rewritten with
    other bytes of the same size and modification time: each save restores the tree saved,
    sends little for what did not change, and sends the file whose content changed."""
    src = make_tree(tmp_path / "src")
    dest = f"{spy.root}/ckpt.tgz"
    total = sum(len(v) for v in tree(src).values() if isinstance(v, bytes))
    written, copied = save(spy, dest, src)
    assert copied == 0 and written > total // 2  # the first save sends everything
    assert restored(dest, tmp_path) == tree(src)

    written, copied = save(spy, dest, src)  # unchanged
    assert written < 300 * 1024, written  # headers, small files and the index
    assert copied > total * 0.9
    assert restored(dest, tmp_path) == tree(src)

    (src / "weights" / "w1.bin").write_bytes(_blob(2 * MiB + 1000, seed=99))  # changed
    written, copied = save(spy, dest, src)
    assert 2 * MiB < written < 2 * MiB + 300 * 1024, written
    assert restored(dest, tmp_path) == tree(src)

    (src / "weights" / "w2.bin").rename(src / "weights" / "renamed.bin")  # renamed: same content
    (src / "notes.txt").unlink()  # removed
    written, copied = save(spy, dest, src)
    assert written < 300 * 1024, written
    assert restored(dest, tmp_path) == tree(src)

    target = src / "frozen.bin"  # other bytes, same size and modification time
    st = target.stat()
    target.write_bytes(_blob(st.st_size, seed=77))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert target.stat().st_mtime_ns == st.st_mtime_ns
    written, copied = save(spy, dest, src)
    assert written > 5 * MiB, "a file with the same size and time but other bytes is sent again"
    assert restored(dest, tmp_path) == tree(src)
    index = ix.read_index(store_for(dest), dest)
    assert index is not None
    assert index.files["frozen.bin"].digest == blake3(target.read_bytes()).hexdigest()


def test_an_attempts_first_save_copies_from_the_previous_attempts_object(spy, tmp_path):
    src = make_tree(tmp_path / "src")
    prev, dest = f"{spy.root}/attempt-0.tgz", f"{spy.root}/attempt-1.tgz"
    save(spy, prev, src)
    (src / "config.json").write_bytes(b'{"lr": 0.2}\n')
    written, copied = save(spy, dest, src, prev)
    assert written < 300 * 1024 and copied > 12 * MiB, (written, copied)
    assert restored(dest, tmp_path) == tree(src)
    assert restored(prev, tmp_path) != tree(src)  # the previous attempt's object is untouched


def test_other_readers_read_the_incremental_object(tmp_path):
    """tarfile, GNU tar, gzip -t and Flyte's Checkpoint read an object made mostly of copies."""
    src = make_tree(tmp_path / "src")
    obj = tmp_path / "obj.tgz"
    fc.Checkpoint(str(obj)).save_sync(str(src))
    (src / "weights" / "w0.bin").write_bytes(_blob(2 * MiB, seed=55))
    (src / "weights" / "w3.bin").rename(src / "w3-moved.bin")
    with spying("file") as spy:
        _, copied = save(spy, spy.uri_for(str(obj)), src)
    assert copied > 8 * MiB
    out = tmp_path / "py"
    with tarfile.open(obj, "r:gz") as tf:
        tf.extractall(out, filter="tar")
    assert tree(out) == tree(src)
    gzip.decompress(obj.read_bytes())
    require(shutil.which("tar") is not None and shutil.which("gzip") is not None, "tar and gzip are required")
    out = tmp_path / "gnu"
    out.mkdir()
    run = subprocess.run(["tar", "xzf", str(obj), "-C", str(out)], capture_output=True)
    assert (run.returncode, run.stderr) == (0, b"")
    assert tree(out) == tree(src)
    run = subprocess.run(["gzip", "-t", str(obj)], capture_output=True)
    assert (run.returncode, run.stdout, run.stderr) == (0, b"", b"")
    try:
        import flyte
    except ImportError:
        flyte = None
    require(flyte is not None, "flyte is not installed (pip install flyte==2.12.1)")
    theirs = flyte.Checkpoint(f"file://{tmp_path / 'next'}", f"file://{obj}")
    assert tree(Path(theirs.load_sync())) == tree(src)


def test_the_index_lists_the_copied_members_as_they_were(tmp_path):
    src = make_tree(tmp_path / "src")
    obj = str(tmp_path / "obj.tgz")
    fc.Checkpoint(obj).save_sync(str(src))
    before = ix.read_index(store_for(obj), obj)
    (src / "config.json").write_bytes(b"{}")
    fc.Checkpoint(obj).save_sync(str(src))
    after = ix.read_index(store_for(obj), obj)
    assert before is not None and after is not None
    for name in ("frozen.bin", "weights/w0.bin"):
        old, new = before.files[name], after.files[name]
        rows = lambda idx, e: [m.row() for m in idx.members[e.first : e.last + 1]]  # noqa: E731
        assert rows(before, old) == rows(after, new)
        assert new.digest == old.digest
    assert tree(fc.Checkpoint(str(tmp_path / "n"), obj).load_sync()) == tree(src)


class _NoCopy(MemoryStore):
    copy_limits = None


def test_a_store_without_the_capability_sends_everything(tmp_path):
    src = make_tree(tmp_path / "src")
    fc.register_store("nocopy-store", ("nocopy",), _NoCopy, "memory without copies (tests)")
    try:
        with spying("nocopy") as spy:
            dest = f"spy://t/{uuid.uuid4().hex}"
            first, _ = save(spy, dest, src)
            again, copied = save(spy, dest, src)
            assert copied == 0 and again == first
            assert restored(dest, tmp_path) == tree(src)
    finally:
        fc.unregister_store("nocopy-store")


def test_a_previous_object_on_another_store_is_not_copied_from(tmp_path):
    src = make_tree(tmp_path / "src")
    prev = f"memory://t/{uuid.uuid4().hex}"
    fc.Checkpoint(prev).save_sync(str(src))
    with spying("file") as spy:
        written, copied = save(spy, spy.uri_for(str(tmp_path / "dest.tgz")), src, prev)
    assert copied == 0 and written > 12 * MiB


def test_a_source_replaced_mid_save_fails_cleanly_and_is_retried(tmp_path):
    """On the file store: the object being copied from is replaced when the first copy is
    made. Without retries the save raises (its cause CopySourceChangedError) and the object
    is the replacement, untouched; with them, the next try copies from the replacement."""
    src = make_tree(tmp_path / "src")
    other = make_tree(tmp_path / "other")
    (other / "frozen.bin").write_bytes(_blob(5 * MiB + 3, seed=11))
    obj, spare = tmp_path / "obj.tgz", tmp_path / "spare.tgz"
    fc.Checkpoint(str(obj)).save_sync(str(src))
    fc.Checkpoint(str(spare)).save_sync(str(other))
    replacement = spare.read_bytes()
    armed = [True]

    def hook(op: str, uri: str) -> None:
        if op == "copy" and armed[0]:
            armed[0] = False
            tmp = tmp_path / "swap"
            tmp.write_bytes(replacement)
            os.replace(tmp, obj)

    with spying("file", hook) as spy:
        dest = spy.uri_for(str(obj))
        with pytest.raises(TransientError, match="replaced or removed while a save copied") as info:
            save(spy, dest, src, retry=RetryPolicy(attempts=1))
        assert isinstance(info.value.__cause__, CopySourceChangedError)
        assert obj.read_bytes() == replacement
        armed[0] = True
        save(spy, dest, src)  # retried: the second try plans against the replacement
    assert tree(fc.Checkpoint(str(tmp_path / "n"), str(obj)).load_sync()) == tree(src)


CRASH_CHILD = r"""
import sys, threading
import flyte_checkpoint as fc
from tests.spystore import spying

def hook(op, uri):
    if op == "copy":
        print("COPYING", flush=True)
        threading.Event().wait()  # until SIGKILL

with spying("file", hook) as spy:
    fc.Checkpoint(spy.uri_for(sys.argv[1])).save_sync(sys.argv[2])
print("DONE", flush=True)
"""


def test_killed_incremental_save_leaves_the_previous_object_whole(tmp_path):
    """A child SIGKILLed in an incremental save (its first copy made, a changed file before it
    written) leaves the previous file byte for byte, and nothing listed beside it."""
    import select
    import signal
    import sys

    src = make_tree(tmp_path / "src")
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    obj = store_dir / "ckpt.tgz"
    fc.Checkpoint(str(obj)).save_sync(str(src))
    before = obj.read_bytes()
    (src / "config.json").write_bytes(b'{"lr": 0.5}\n')
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), *(p for p in sys.path if p)])}
    child = subprocess.Popen(
        [sys.executable, "-c", CRASH_CHILD, str(obj), str(src)], stdout=subprocess.PIPE, env=env, cwd=root
    )
    try:
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], 120)
        assert ready and child.stdout.readline().strip() == b"COPYING"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(60)
        child.stdout.close()  # type: ignore[union-attr]
    assert obj.read_bytes() == before
    # nothing left but the object and its history (the previous save's: docs/history.md)
    left = list(store_for(str(store_dir)).list(str(store_dir) + "/"))
    assert [u for u in left if ".fcp-history/" not in u] == [str(obj)]


class _ReadDenied(MemoryStore):
    """Writes succeed, reads are denied (write-only credentials)."""

    def copy_source(self, uri):
        from flyte_checkpoint.errors import CheckpointPermissionError

        raise CheckpointPermissionError(f"permission denied to read {uri}")


def test_a_store_that_denies_reads_still_saves_everything(tmp_path):
    """Write-only credentials: the save cannot look at the previous object, so it sends
    every file, as before; it does not fail."""
    src = make_tree(tmp_path / "src")
    fc.register_store("denied-store", ("denied",), _ReadDenied, "memory that denies reads (tests)")
    try:
        dest = f"denied://t/{uuid.uuid4().hex}"
        fc.Checkpoint(dest).save_sync(str(src))
        fc.Checkpoint(dest).save_sync(str(src))
        assert restored(dest, tmp_path) == tree(src)
    finally:
        fc.unregister_store("denied-store")


class _LongCopies(MemoryStore):
    """The memory store declaring S3-like long copies (the planner then joins neighbours)."""

    copy_limits = CopyLimits(min_part=64 * 1024)


@pytest.mark.parametrize("recorded", [True, False])
def test_unchanged_neighbours_become_one_copy_without_reading_their_headers_back(
    tmp_path, monkeypatch, recorded
):
    """Where the store needs long copies, the headers between two copied files are copied too
    when they are the same bytes: recorded by hash in the index (no read back), or, for a base
    whose index has no such hashes, read back and compared. Unchanged neighbours are one copy."""
    src = make_tree(tmp_path / "src")
    fc.register_store("longcopy-store", ("longcopy",), _LongCopies, "memory with a minimum piece (tests)")
    try:
        with spying("longcopy") as spy:
            dest = f"spy://t/{uuid.uuid4().hex}"
            if not recorded:
                monkeypatch.setattr(ix.IndexBuilder, "add_gap", lambda self, offset, data: None)
            save(spy, dest, src)
            monkeypatch.undo()
            spy.calls.clear()
            written, _ = save(spy, dest, src)
            # one run: notes.txt compresses below the minimum piece, but is copied inside the run
            assert spy.count("copy") == 1, spy.calls
            reads = spy.count("read_range")
            assert reads == 1 if recorded else reads > 1, spy.calls  # the index: one read with the trailer
            assert written < 16 * 1024
            assert restored(dest, tmp_path) == tree(src)
    finally:
        fc.unregister_store("longcopy-store")


def test_the_base_s_index_comes_with_its_trailer_in_one_read(spy, tmp_path):
    """An incremental save reads its base's trailer and index in one ranged read of the
    object's end (one round trip fewer); reading ahead gives the index read without it, and an
    index longer than what was read ahead is completed by one read of its front, never read
    twice."""
    src = make_tree(tmp_path / "src")
    dest = spy.root + "/ckpt"
    save(spy, dest, src)
    spy.calls.clear()
    save(spy, dest, src)
    assert spy.count("read_range") == 1, spy.calls  # every file copied: nothing else is read
    size = spy.stat(dest)
    plain = ix.read_index(spy, dest, size)
    assert plain is not None
    index_len = len(plain.raw) - ix.TRAILER_SIZE
    for ahead, reads in [
        (0, 2),
        (ix.TRAILER_SIZE + index_len // 2, 2),  # half the index read ahead: its front read after
        (ix.TRAILER_SIZE + index_len, 1),
        (ix.INDEX_AHEAD, 1),
        (size + 4096, 1),  # more than the object: the whole object
    ]:
        spy.calls.clear()
        before = spy.bytes_read
        got = ix.read_index(spy, dest, size, ahead=ahead)
        assert got == plain, ahead
        assert spy.count("read_range") == reads, (ahead, spy.calls)
        assert spy.bytes_read - before == max(min(ahead, size), ix.TRAILER_SIZE + index_len), ahead


@pytest.mark.parametrize(
    ("gaps", "extra", "match"),
    [
        ([(10**12, 5, bytes(32))], b"", "a gap lies outside the tar"),
        ([(600, 0, bytes(32))], b"", "a gap lies outside the tar"),
        ([(600, 100, bytes(32))], b"\0", "not a gap section of that count"),
        ([], b"\0\0", "not a gap section"),
    ],
    ids=["past-the-end", "empty", "trailing-byte", "short-count"],
)
def test_a_forged_gap_section_is_refused(tmp_path, gaps, extra, match):
    """The gap section is checked as the rest of the index: a count that does not match the
    bytes after the last file, or a gap outside the tar, is a CorruptCheckpointError."""
    from flyte_checkpoint.errors import CorruptCheckpointError

    src = make_tree(tmp_path / "src")
    obj = tmp_path / "obj.tgz"
    fc.Checkpoint(str(obj)).save_sync(str(src))
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None and index.gaps, "a folder save records the gaps before large files"
    members = [m.row() for m in index.members]
    files = [
        (e.name, e.first, e.last, e.offset, e.size, e.mtime, e.mode, e.digest) for e in index.files.values()
    ]
    payload = ix.pack_payload(members, files, gaps) + extra
    raw = obj.read_bytes()
    obj.write_bytes(raw[: index.data_end] + ix.encode_tail(payload, index.data_end))
    with pytest.raises(CorruptCheckpointError, match=match):
        ix.read_index(store_for(str(obj)), str(obj))


def test_a_parallel_load_of_an_incremental_object_checks_and_restores_it(tmp_path, monkeypatch):
    """The parallel inflate of a full load (every member's CRC, every file's hash against
    the index) restores an object made mostly of copied members."""
    from flyte_checkpoint.format import inflate

    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"shard-{i}.bin").write_bytes(_blob(12 * MiB + i, seed=20 + i))
    (src / "meta.json").write_text("{}")
    obj = str(tmp_path / "obj.tgz")
    fc.Checkpoint(obj).save_sync(str(src))
    (src / "shard-1.bin").write_bytes(_blob(12 * MiB + 1, seed=99))
    with spying("file") as spy:
        _, copied = save(spy, spy.uri_for(obj), src)
    assert copied > 20 * MiB and os.path.getsize(obj) >= inflate.PARALLEL_MIN
    monkeypatch.setenv(inflate.THREADS_ENV, "2")
    assert inflate.inflate_threads() == 2
    assert tree(fc.Checkpoint(str(tmp_path / "n"), obj).load_sync()) == tree(src)


def test_unchanged_files_are_hashed_ahead_not_by_the_packer(spy, tmp_path, monkeypatch):
    """The files an incremental save may copy are hashed by the lookahead's threads while the
    packer goes on, so the packer hashes none of them itself (it did, one after the other)."""
    from flyte_checkpoint.format import digests

    src = make_tree(tmp_path / "src")
    dest = f"{spy.root}/ckpt.tgz"
    save(spy, dest, src)
    by_packer = []
    real = digests.of_file

    def of_file(fd, size, *args, **kwargs):
        if not threading.current_thread().name.startswith("fcp-lookahead"):
            by_packer.append(size)
        return real(fd, size, *args, **kwargs)

    monkeypatch.setattr(digests, "of_file", of_file)
    written, copied = save(spy, dest, src)
    assert copied > 12 * MiB and written < 300 * 1024, (written, copied)
    assert by_packer == [], by_packer
    assert restored(dest, tmp_path) == tree(src)
    assert not [t for t in threading.enumerate() if t.name.startswith("fcp-lookahead")]


def test_a_file_changed_after_it_was_hashed_ahead_is_sent_as_it_is_now(spy, tmp_path, monkeypatch):
    """A file rewritten (same size, same modification time) between the lookahead's hash and the
    packer's turn is not copied on the strength of that hash: its identity (change time) differs,
    so the packer hashes it again and sends the new bytes."""
    from flyte_checkpoint.format import archive, lookahead

    src = make_tree(tmp_path / "src")
    dest = f"{spy.root}/ckpt.tgz"
    save(spy, dest, src)
    target = src / "frozen.bin"
    changed = []

    class ChangesAfterHashing(lookahead.Lookahead):
        def schedule(self, path: str) -> None:
            super().schedule(path)
            if path == str(target) and not changed:  # announced again by the packer: once
                hashed = self._jobs[path].result()
                assert hashed is not None
                st = target.stat()
                target.write_bytes(_blob(st.st_size, seed=1234))
                os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
                assert lookahead.identity(target.stat()) != hashed[0], (
                    "the rewrite left the identity as it was"
                )
                changed.append(path)

    monkeypatch.setattr(archive, "Lookahead", ChangesAfterHashing)
    written, _ = save(spy, dest, src)
    assert changed == [str(target)]
    assert written > 5 * MiB, "the rewritten file was copied from the previous object"
    assert restored(dest, tmp_path) == tree(src)


def test_the_tree_is_hashed_while_the_base_s_index_is_read(spy, tmp_path, monkeypatch):
    """On a store that is not local, an incremental save starts hashing its tree's large files
    (:func:`~flyte_checkpoint.format.archive.hash_ahead`) once the base is found, before its
    index is read: the read of the index waits here until a lookahead thread has hashed a file.
    A save with no object at the destination hashes nothing ahead."""
    from flyte_checkpoint.format import digests

    src = make_tree(tmp_path / "src")
    dest = f"{spy.root}/ckpt.tgz"
    hashed_ahead = threading.Event()
    hashes = []
    real = digests.of_file

    def of_file(fd, size, *args, **kwargs):
        found = real(fd, size, *args, **kwargs)
        if threading.current_thread().name.startswith("fcp-lookahead"):
            hashes.append(size)
            hashed_ahead.set()
        return found

    monkeypatch.setattr(digests, "of_file", of_file)
    save(spy, dest, src)
    assert hashes == [], "a save with nothing to copy from hashed its tree ahead"
    seen = []

    def hook(op: str, uri: str) -> None:
        if op == "read_range" and uri == dest and not seen:
            seen.append(hashed_ahead.wait(60))

    spy.hook = hook
    try:
        written, copied = save(spy, dest, src)
    finally:
        spy.hook = None
    assert seen == [True], "the index was read before any file was hashed"
    assert copied > 12 * MiB and written < 300 * 1024, (written, copied)
    assert restored(dest, tmp_path) == tree(src)
    assert not [t for t in threading.enumerate() if t.name.startswith("fcp-lookahead")]


def test_files_of_sizes_the_base_lacks_are_dropped_from_the_hashing_ahead(tmp_path, monkeypatch):
    """Jobs of files hashed ahead before the index was read are dropped once it is, for sizes
    the base holds no file of (not yet started), and ``hash_ahead`` lists the tree in the
    packer's order (names sorted, a folder's files where the folder is), working files and
    small files left out."""
    from flyte_checkpoint.format import archive, lookahead

    (tmp_path / "a.bin").write_bytes(bytes(100 * 1024))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "c.bin").write_bytes(bytes(200 * 1024))
    (tmp_path / "d.bin").write_bytes(bytes(300 * 1024))
    (tmp_path / "e.txt").write_bytes(b"small")
    (tmp_path / ".fcp-tmp-x.0123456789ab").write_bytes(bytes(100 * 1024))  # a working file: not saved
    started, release = threading.Event(), threading.Event()
    real = lookahead._hash

    def blocked(path, stop):
        started.set()
        release.wait(60)
        return real(path, stop)

    monkeypatch.setattr(lookahead, "_hash", blocked)
    monkeypatch.setattr(lookahead.os, "cpu_count", lambda: 1)  # one thread: the rest queue
    ahead = archive.hash_ahead(tmp_path)
    try:
        assert list(ahead.sizes) == [str(tmp_path / n) for n in ("a.bin", "b/c.bin", "d.bin")]
        assert started.wait(60)
        assert ahead.retain(lambda size: size != 200 * 1024) == 1  # c.bin's job, not started
        release.set()
        for name in ("a.bin", "d.bin"):
            assert ahead.take(str(tmp_path / name), (tmp_path / name).stat()) is not None
        assert ahead.take(str(tmp_path / "b" / "c.bin"), (tmp_path / "b" / "c.bin").stat()) is None
    finally:
        release.set()
        ahead.close()


def test_a_long_run_of_copies_reaches_the_store_before_the_save_ends():
    """For a store that gains nothing from long copies (``copy_run``), adjacent copies are given
    to it in runs of that length as they come, so it copies while the packer goes on; without
    ``copy_run`` (S3, Azure: parts have a minimum) they stay one copy until something else comes."""
    from flyte_checkpoint.format.pipeline import ParallelGzipWriter
    from flyte_checkpoint.storage.blobstore import CopyCheck, CopySource

    class Sink(io.BytesIO):
        def __init__(self) -> None:
            super().__init__()
            self.copies: list[int] = []
            self.first = threading.Event()

        def copy(self, source: CopySource, start: int, length: int, expect: CopyCheck) -> None:
            assert expect.length == length and expect.pieces == ((4 * MiB, 7),) * (length // (4 * MiB))
            self.copies.append(length)
            self.first.set()

    source = CopySource("memory://x/old", 10**9, "1")
    for run, expected in ((8 * MiB, [8 * MiB, 8 * MiB, 4 * MiB]), (None, [20 * MiB])):
        sink = Sink()
        with ParallelGzipWriter(sink, copy_run=run) as gz:  # type: ignore[arg-type]
            for i in range(5):
                gz.copy(source, i * 4 * MiB, 4 * MiB, [(4 * MiB, 4 * MiB, 0, 7)])
            if run is not None:
                assert sink.first.wait(60), "no copy reached the store before the writer was closed"
        assert sink.copies == expected, (run, sink.copies)


# -- damaged bases (issue 32, item 5) ---------------------------------------------------------


def damage(uri: str, name: str | None = None, member: int | None = None) -> tuple[int, int]:
    """Flip one byte in the middle of the first stored member of file ``name`` of the object at
    ``uri`` (or of member number ``member``), as bit rot or a bad copy would; returns where that
    member lies (start, length). The object is rewritten whole: a new version, damaged."""
    store = store_for(uri)
    index = ix.read_index(store, uri)
    assert index is not None
    m = index.members[index.files[name].first if name is not None else member]  # type: ignore[index]
    raw = bytearray(store.read_bytes(uri))
    raw[m.coff + m.clen // 2] ^= 0x10
    store.write_bytes(uri, bytes(raw))
    return m.coff, m.clen


def test_a_damaged_base_is_not_copied_where_it_is_damaged(spy, tmp_path, caplog):
    """One byte flipped in the stored members of an unchanged file of the previous object: the
    next save used to copy them as they were and commit an object every load refused (and the
    save after it copied the damage again). Now the copies are checked against the CRC-32 of
    the members' stored bytes in the index: that file is sent from the folder instead, the save
    warns naming the object and the file, and commits an object that loads; the next save
    copies everything again."""
    src = make_tree(tmp_path / "src")
    dest = f"{spy.root}/ckpt.tgz"
    save(spy, dest, src)
    damage(dest, "weights/w1.bin")
    (src / "config.json").write_bytes(b'{"lr": 0.3}\n')
    with caplog.at_level("WARNING", logger="flyte_checkpoint"):
        save(spy, dest, src)
    assert restored(dest, tmp_path) == tree(src)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        f"the previous checkpoint {dest} is damaged: the stored bytes of weights/w1.bin are not what"
        " its index records (bit rot, or a bad copy of the object), so this save sends them from the"
        " folder instead of copying them"
    ], warnings
    total = sum(len(v) for v in tree(src).values() if isinstance(v, bytes))
    caplog.clear()
    with caplog.at_level("WARNING", logger="flyte_checkpoint"):
        written, copied = save(spy, dest, src)  # the object is whole again: copied, nothing sent
    assert written < 300 * 1024 and copied > total * 0.9, (written, copied)
    assert not caplog.records
    assert restored(dest, tmp_path) == tree(src)


def test_a_damaged_previous_attempts_object_is_left_as_it_is_and_not_copied_where_damaged(
    spy, tmp_path, caplog
):
    """An attempt's first save copies from the previous attempt's object: damaged members of two
    files there are sent from the folder instead (one warning naming both, one more try), the
    new object loads, and the previous one is not touched."""
    src = make_tree(tmp_path / "src")
    prev, dest = f"{spy.root}/attempt-0.tgz", f"{spy.root}/attempt-1.tgz"
    save(spy, prev, src)
    damage(prev, "frozen.bin")
    damage(prev, "weights/w3.bin")
    damaged = store_for(prev).read_bytes(prev)
    spy.calls.clear()
    with caplog.at_level("WARNING", logger="flyte_checkpoint"):
        written, _ = save(spy, dest, src, prev)
    assert restored(dest, tmp_path) == tree(src)
    assert store_for(prev).read_bytes(prev) == damaged
    assert spy.count("commit") == 2 and spy.count("abort") == 1, spy.calls  # one try refused, one more
    (message,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert (
        f"the previous checkpoint {prev} is damaged: the stored bytes of frozen.bin, weights/w3.bin are"
        in message
    )
    assert written > 7 * MiB, "the two damaged files were sent"


class _LongCopiesStore(MemoryStore):
    copy_limits = CopyLimits(min_part=64 * 1024)


def test_damaged_headers_between_copied_files_are_written_not_copied(tmp_path, caplog):
    """Where the store needs long copies, the tar headers between two copied files are copied
    too: a damaged header member is written instead, and the warning says what it held."""
    src = make_tree(tmp_path / "src")
    fc.register_store("longcopy2-store", ("longcopy2",), _LongCopiesStore, "memory, minimum piece (tests)")
    try:
        dest = f"longcopy2://t/{uuid.uuid4().hex}"
        fc.Checkpoint(dest).save_sync(str(src))
        index = ix.read_index(store_for(dest), dest)
        assert index is not None
        header = index.files["weights/w1.bin"].first - 1  # the member of its tar header
        assert index.members[header].ulen >= 512
        damage(dest, member=header)
        with caplog.at_level("WARNING", logger="flyte_checkpoint"):
            fc.Checkpoint(dest).save_sync(str(src))
        assert restored(dest, tmp_path) == tree(src)
        (message,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert "the stored bytes of tar headers between its files are not what its index records" in message
    finally:
        fc.unregister_store("longcopy2-store")


def test_a_save_finding_damage_twice_copies_nothing_the_third_time():
    """The tries are bounded: a base found damaged again after its damaged ranges were avoided
    (replaced meanwhile by another damaged object) gets a last try that copies nothing."""
    from flyte_checkpoint.errors import CopyDamagedError
    from flyte_checkpoint.format.incremental import REDOS, save_checked
    from flyte_checkpoint.storage.blobstore import CopySource, copy_damaged

    source = CopySource("memory://t/base", 10**6, "1")
    planned, given = [], []

    class Base:
        def __init__(self) -> None:
            self.source = source
            self.avoided: list = []

        def avoid(self, damaged):
            self.avoided.extend(damaged)
            return [0]

        def held_by(self, members):
            return ["f.bin"]

    def plan():
        planned.append(Base())
        return planned[-1]

    def write(reuse) -> int:
        given.append(reuse)
        if reuse is not None:
            raise copy_damaged([(source, 100 * len(given), 10)], "memory://t/dest")
        return 7

    assert save_checked(plan, write) == 7  # type: ignore[arg-type]
    assert len(given) == REDOS + 1 and given[-1] is None and len(planned) == REDOS
    assert planned[1].avoided[0] == (source, 100, 10)
    with pytest.raises(
        CopyDamagedError, match=r"bytes 5\.\.8 of memory://t/base are not what its index records"
    ):
        raise copy_damaged([(source, 5, 3)], "memory://t/dest")


def test_a_damaged_sharded_object_is_not_copied_where_it_is_damaged(tmp_path, caplog):
    """A sharded save's object (its ranks' members carry their stored CRCs in their reports) is
    a base like any other: a damaged member of one rank's file is sent, not copied, by a folder
    save of the union over it."""
    from .test_sharded import save_with_threads

    folders = [tmp_path / f"rank{r}" for r in range(2)]
    for r, folder in enumerate(folders):
        (folder / f"part{r}").mkdir(parents=True)
        (folder / f"part{r}" / "weights.bin").write_bytes(_blob(300 * 1024, seed=r))
    dest = str(tmp_path / "out" / "ckpt")
    assert save_with_threads(dest, folders) == []
    index = ix.read_index(store_for(dest), dest)
    assert index is not None and index.shards and index.checked
    damage(dest, "part1/weights.bin")
    union = tmp_path / "union"
    for folder in folders:
        shutil.copytree(folder, union, dirs_exist_ok=True)
    with caplog.at_level("WARNING", logger="flyte_checkpoint"):
        fc.Checkpoint(dest).save_sync(str(union))
    assert f"the previous checkpoint {dest} is damaged: the stored bytes of part1/weights.bin" in caplog.text
    assert restored(dest, tmp_path) == tree(union)


def test_copies_are_checked_where_no_thread_can_start(tmp_path, monkeypatch, caplog):
    """At interpreter exit no thread starts: the file store's writer checks each copy itself."""
    from flyte_checkpoint.storage.stores import local

    class NoThreads:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def submit(self, *args, **kwargs):
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")

        def shutdown(self, wait: bool = True) -> None:
            pass

    src = make_tree(tmp_path / "src")
    dest = str(tmp_path / "ckpt.tgz")
    fc.Checkpoint(dest).save_sync(str(src))
    damage(dest, "frozen.bin")
    monkeypatch.setattr(local, "ThreadPoolExecutor", NoThreads)
    with caplog.at_level("WARNING", logger="flyte_checkpoint"):
        fc.Checkpoint(dest).save_sync(str(src))
    assert "the stored bytes of frozen.bin are not what its index records" in caplog.text
    assert restored(dest, tmp_path) == tree(src)


def test_the_warning_shows_an_odd_name_on_one_line(tmp_path, caplog):
    """A damaged file whose name holds a newline is named by its repr: the warning stays one
    line (a name is the user's, not a log line of its own)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a\nforged log line.bin").write_bytes(_blob(300 * 1024, seed=3))
    (src / "plain.bin").write_bytes(_blob(300 * 1024, seed=4))
    dest = str(tmp_path / "ckpt.tgz")
    fc.Checkpoint(dest).save_sync(str(src))
    damage(dest, "a\nforged log line.bin")
    damage(dest, "plain.bin")
    with caplog.at_level("WARNING", logger="flyte_checkpoint"):
        fc.Checkpoint(dest).save_sync(str(src))
    (message,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "\n" not in message and "the stored bytes of 'a\\nforged log line.bin', plain.bin are" in message
    assert restored(dest, tmp_path) == tree(src)
