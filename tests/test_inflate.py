"""Full loads of indexed folder objects inflate their gzip members on several threads
(format/inflate.py): the same tree as a streamed load, every member and every file verified,
the archive-safety rules unchanged; objects without an index, small ones and stores without
ranged reads stream as before."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import threading
from pathlib import Path

import pytest
from blake3 import blake3

import flyte_checkpoint as fc
from flyte_checkpoint.errors import CorruptCheckpointError, UnsafeArchiveError
from flyte_checkpoint.format import index as ix
from flyte_checkpoint.format import inflate
from flyte_checkpoint.storage.registry import store_for

from .helpers import member_rows, older_index, tree
from .reliability.backends import backend_pool  # noqa: F401
from .spystore import spying
from .test_index import _set, forge

MiB = 1024 * 1024


@pytest.fixture(autouse=True)
def two_threads(monkeypatch):
    """Parallel loads on 2 threads, whatever the machine's cores (see inflate.MIN_CORES), of
    objects from 4 MiB (the trees here) up."""
    monkeypatch.setenv(inflate.THREADS_ENV, "2")
    monkeypatch.setattr(inflate, "PARALLEL_MIN", 4 * MiB)


def make_tree(root: Path) -> Path:
    """Many small files, large files over several members (compressible and not), hard
    links, empty files, a symbolic link: over 4 MiB compressed."""
    for i in range(300):
        d = root / f"part-{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"item-{i:04d}.txt").write_bytes(f"line {i}\n".encode() * (i % 50) + os.urandom(i % 3))
    (root / "empty").mkdir()
    (root / "empty" / "zero").write_bytes(b"")
    (root / "zero-top").write_bytes(b"")
    (root / "weights.bin").write_bytes(os.urandom(13 * MiB + 7))  # stored members
    (root / "log.jsonl").write_bytes(b'{"step": 1, "loss": 0.25}\n' * 400_000)  # compressed, ~10 MiB
    (root / "exact").write_bytes(b"e" * ix.ALIGN_MIN)
    os.link(root / "weights.bin", root / "weights-link.bin")
    os.link(root / "part-0" / "item-0007.txt", root / "hard-small")
    (root / "sym").symlink_to("part-1/item-0001.txt")
    return root


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    return make_tree(tmp_path_factory.mktemp("inflate") / "src")


@pytest.fixture(params=["file", "memory", "s3"])
def target(request, tmp_path, backend_pool):  # noqa: F811
    """(spy target scheme, a fresh URI on it) for the file and memory stores and moto's S3."""
    if request.param == "file":
        yield "file", str(tmp_path / "obj.tgz")
    elif request.param == "memory":
        yield "memory", f"memory://inflate/{os.urandom(6).hex()}/ckpt"
    else:
        b = backend_pool.get("s3")
        with b.activated():
            yield "s3", b.fresh("ckpt")


def test_indexed_loads_inflate_in_parallel_and_restore_the_same_tree(src, target, tmp_path, monkeypatch):
    scheme, uri = target
    fc.Checkpoint(uri).save_sync(str(src))
    index = ix.read_index(store_for(uri), uri)
    assert index is not None
    assert len(inflate._batches(index.members)) >= 3
    # the first member inflated waits until another thread inflates one: only a load that
    # inflates on more than one thread gets past it
    other = threading.Event()
    first: list[int] = []
    real = inflate.inflate_member

    def gated(*args):
        me = threading.get_ident()
        if not first:
            first.append(me)
            assert other.wait(60), "no other thread inflated a member while the first one waited"
        elif me != first[0]:
            other.set()
        return real(*args)

    monkeypatch.setattr(inflate, "inflate_member", gated)
    with spying(scheme) as spy:
        cp = fc.Checkpoint(str(tmp_path / "d"), spy.uri_for(uri))
        got = cp.load_sync()
        assert got is not None and tree(got) == tree(src)
        assert other.is_set()
        assert spy.count("open_read") == 1  # one stream of the members
        assert spy.count("read_range") == 2  # the trailer and the index
    restored = Path(got)
    assert os.path.samefile(restored / "weights.bin", restored / "weights-link.bin")
    assert os.path.samefile(restored / "hard-small", restored / "part-0" / "item-0007.txt")
    assert os.readlink(restored / "sym") == "part-1/item-0001.txt"
    cp.close()


def test_every_file_and_member_is_verified(src, tmp_path):
    obj = tmp_path / "obj.tgz"
    fc.Checkpoint(str(obj)).save_sync(str(src))
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None
    stats = inflate.LoadStats()
    dest = tmp_path / "out"
    dest.mkdir()
    assert inflate.restore_indexed(store_for(str(obj)), str(obj), obj.stat().st_size, str(dest), stats=stats)
    assert stats.members == len(index.members)
    assert stats.files_verified == len(index.files)
    assert stats.reads == len(inflate._batches(index.members)) and stats.threads >= 2
    assert tree(dest) == tree(src)


def _no_staging_left(cp: fc.Checkpoint) -> None:
    root = cp.path.parent
    assert not [p for p in root.iterdir() if p.name.startswith(".restore-")]
    assert list(cp.path.iterdir()) == []


def test_a_flipped_byte_in_a_data_member_raises_and_keeps_nothing(src, tmp_path):
    obj = tmp_path / "obj.tgz"
    fc.Checkpoint(str(obj)).save_sync(str(src))
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None
    entry = index.files["log.jsonl"]
    m = index.members[(entry.first + entry.last) // 2]
    raw = bytearray(obj.read_bytes())
    raw[m.coff + m.clen // 2] ^= 0x10
    obj.write_bytes(bytes(raw))
    cp = fc.Checkpoint(str(tmp_path / "d"), str(obj))
    with pytest.raises(
        CorruptCheckpointError, match=rf"{obj} is damaged: gzip member \d+ .*save the checkpoint"
    ):
        cp.load_sync()
    _no_staging_left(cp)


@pytest.mark.parametrize("version", [1, 2])
def test_objects_of_older_index_versions_are_verified_with_sha256(src, tmp_path, version):
    """Indexes of versions 1 and 2 record SHA-256 (version 3: BLAKE3): a parallel load of such
    an object verifies every file with SHA-256, and a file that does not match is named."""
    obj = tmp_path / "obj.tgz"
    fc.Checkpoint(str(obj)).save_sync(str(src))
    obj.write_bytes(older_index(obj.read_bytes(), version))
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None and index.algorithm == "sha256"
    for e in index.files.values():
        assert e.digest == hashlib.sha256((src / e.name).read_bytes()).hexdigest()
    stats = inflate.LoadStats()
    dest = tmp_path / "out"
    dest.mkdir()
    assert inflate.restore_indexed(store_for(str(obj)), str(obj), obj.stat().st_size, str(dest), stats=stats)
    assert stats.files_verified == len(index.files) and stats.threads >= 2
    assert tree(dest) == tree(src)

    row = next(i for i, e in enumerate(index.files.values()) if e.name == "log.jsonl")
    raw = obj.read_bytes()
    files = [
        [e.name, e.first, e.last, e.offset, e.size, e.mtime, e.mode, e.digest] for e in index.files.values()
    ]
    files[row][7] = hashlib.sha256(b"something else").hexdigest()
    members = member_rows(index, version)
    gaps = [(end, n, bytes.fromhex(h)) for end, (n, h) in index.gaps.items()]
    payload = ix.pack_payload(members, files, gaps)
    obj.write_bytes(raw[: index.data_end] + ix.encode_tail(payload, index.data_end, version=version))
    cp = fc.Checkpoint(str(tmp_path / "d"), str(obj))
    with pytest.raises(CorruptCheckpointError, match=r"'log.jsonl' does not match the SHA-256 its index"):
        cp.load_sync()


def test_a_wrong_hash_in_a_rebuilt_index_raises(src, tmp_path):
    obj = tmp_path / "obj.tgz"
    fc.Checkpoint(str(obj)).save_sync(str(src))

    def wrong_hash(doc):
        row = next(r for r in doc["files"] if r[0] == "log.jsonl")
        row[7] = blake3(b"something else").hexdigest()

    forge(obj, wrong_hash)
    cp = fc.Checkpoint(str(tmp_path / "d"), str(obj))
    with pytest.raises(CorruptCheckpointError, match=r"'log.jsonl' does not match the BLAKE3 its index"):
        cp.load_sync()
    _no_staging_left(cp)


def test_a_file_the_index_does_not_place_there_raises(src, tmp_path):
    obj = tmp_path / "obj.tgz"
    fc.Checkpoint(str(obj)).save_sync(str(src))
    forge(obj, lambda doc: doc["files"].sort(key=lambda r: r[0] != "exact") or _set(0, "elsewhere")(doc))
    with pytest.raises(CorruptCheckpointError, match=r"file 'exact' .* is not where its index places it"):
        fc.Checkpoint(str(tmp_path / "d"), str(obj)).load_sync()


def test_on_s3_a_damaged_member_raises_naming_the_uri(src, backend_pool, tmp_path):  # noqa: F811
    b = backend_pool.get("s3")
    with b.activated():
        uri = b.fresh("ckpt")
        fc.Checkpoint(uri).save_sync(str(src))
        store = store_for(uri)
        index = ix.read_index(store, uri)
        assert index is not None
        m = index.members[index.files["weights.bin"].first + 1]
        raw = bytearray(store.read_bytes(uri))
        raw[m.coff + m.clen // 3] ^= 0x01
        store.write_bytes(uri, bytes(raw))
        with pytest.raises(CorruptCheckpointError) as err:
            fc.Checkpoint(str(tmp_path / "d"), uri).load_sync()
    assert f"{uri} is damaged: gzip member" in str(err.value)
    assert not any(secret in str(err.value) for secret in b.secrets)


def _indexed_tar(obj: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> None:
    """An object framed and indexed as a folder save is, holding a tar written by hand: a
    large file (to pass the threshold), then ``members``."""
    from flyte_checkpoint.format.pipeline import ParallelGzipWriter

    buf = io.BytesIO()
    builder = ix.IndexBuilder()
    big = tarfile.TarInfo("big")
    big.size = inflate.PARALLEL_MIN + MiB
    data = os.urandom(big.size)
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        tf.addfile(big, io.BytesIO(data))  # one header block, then the data
        builder.add_file("big", 512, big.size, 0, 0o644, blake3(data).hexdigest())
        for info, content in members:
            tf.addfile(info, io.BytesIO(content))
    with open(obj, "wb") as f:
        w = ParallelGzipWriter(f, index=builder)
        w.write(buf.getvalue())
        w.close()


def _member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, linkname, 0 if kind != tarfile.REGTYPE else 3
    return info, b"abc"[: info.size]


@pytest.mark.parametrize(
    ("members", "match"),
    [
        ([_member("../evil")], "climbs out"),
        ([_member("/etc/evil")], "absolute name"),
        ([_member("up", tarfile.SYMTYPE, "../../outside")], "resolves outside the checkpoint"),
        ([_member("dev", tarfile.CHRTYPE)], "device file"),
        ([_member("h", tarfile.LNKTYPE, "/etc/passwd")], "absolute name"),
    ],
    ids=["dotdot", "absolute", "symlink-out", "device", "hardlink-out"],
)
def test_the_archive_safety_rules_apply_to_parallel_loads(tmp_path, members, match):
    obj = tmp_path / "obj.tgz"
    _indexed_tar(obj, members)
    with spying("file") as spy:
        cp = fc.Checkpoint(str(tmp_path / "d"), spy.uri_for(str(obj)))
        with pytest.raises(UnsafeArchiveError, match=match):
            cp.load_sync()
        assert spy.count("read_range") == 2  # the parallel path refused it
    _no_staging_left(cp)


def test_objects_without_an_index_small_ones_and_stores_without_ranges_stream(src, tmp_path, monkeypatch):
    plain = tmp_path / "plain.tgz"
    with tarfile.open(plain, "w:gz") as tf:  # Flyte's kind of object: no index
        for child in sorted(src.iterdir()):
            tf.add(child, arcname=child.name)
    small_src = tmp_path / "small"
    small_src.mkdir()
    (small_src / "a").write_bytes(b"a" * 1000)
    small = tmp_path / "small.tgz"
    fc.Checkpoint(str(small)).save_sync(str(small_src))
    assert small.stat().st_size < inflate.PARALLEL_MIN
    indexed = tmp_path / "indexed.tgz"
    fc.Checkpoint(str(indexed)).save_sync(str(src))
    cases = [  # the trailer is read (to know the hash a streamed load checks files with), no index
        (plain, src, 1, True, "2"),
        (small, small_src, 1, True, "2"),
        (indexed, src, 0, False, "2"),
        (indexed, src, 1, True, "1"),
    ]
    for obj, expected, tail_reads, ranges, threads in cases:
        monkeypatch.setenv(inflate.THREADS_ENV, threads)
        with spying("file") as spy:
            spy.supports_ranges = ranges
            with fc.Checkpoint(str(tmp_path / f"d-{obj.name}-{threads}"), spy.uri_for(str(obj))) as cp:
                got = cp.load_sync()
                assert got is not None and tree(got) == tree(expected)
            assert spy.count("open_read") == 1, obj
            assert spy.count("read_range") == tail_reads, obj


def test_threads_follow_the_cores_unless_told(monkeypatch):
    from flyte_checkpoint.format import pipeline

    assert inflate.THREADS_ENV in (Path(__file__).parents[1] / "docs" / "configuration.md").read_text()

    monkeypatch.delenv(inflate.THREADS_ENV)
    for cores, threads in [
        (1, 1),
        (2, 2),  # from 2 cores up: with BLAKE3 the parallel load beats the streamed one there
        (inflate.MIN_CORES - 1, 1),
        (inflate.MIN_CORES, inflate.MIN_CORES),
        (8, 8),
    ]:
        monkeypatch.setattr(pipeline, "default_workers", lambda cores=cores: cores)
        assert inflate.inflate_threads() == threads
    monkeypatch.setenv(inflate.THREADS_ENV, "0")
    assert inflate.inflate_threads() == 1
    monkeypatch.setenv(inflate.THREADS_ENV, "many")
    with pytest.raises(
        ValueError, match="FLYTE_CHECKPOINT_INFLATE_THREADS='many' is not a number of threads"
    ):
        inflate.inflate_threads()


def test_closing_the_checkpoint_stops_a_parallel_load_and_its_threads(src, tmp_path):
    from flyte_checkpoint.errors import OperationCancelledError

    obj = tmp_path / "obj.tgz"
    fc.Checkpoint(str(obj)).save_sync(str(src))
    reading, release = threading.Event(), threading.Event()

    def hook(op: str, _uri: str) -> None:
        if op == "read" and not reading.is_set():  # the stream of members, after the index
            reading.set()
            assert release.wait(60)

    errors: list[BaseException] = []

    def load(cp: fc.Checkpoint) -> None:
        try:
            cp.load_sync()
        except BaseException as exc:
            errors.append(exc)

    with spying("file", hook) as spy:
        cp = fc.Checkpoint(str(tmp_path / "d"), spy.uri_for(str(obj)))
        worker = threading.Thread(target=load, args=(cp,))
        worker.start()
        assert reading.wait(60)
        assert spy.count("read_range") == 2  # the parallel path
        cp.close()  # cancels the load without waiting for it
        release.set()
        worker.join(60)
    assert not worker.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], OperationCancelledError)
    names = ("fcp-inflate", "fcp-read-ahead")
    assert not [t for t in threading.enumerate() if t.name.startswith(names) and t.is_alive()]


def test_batches_hashed_after_the_reader_took_them_are_hashed_whole(src, tmp_path, monkeypatch):
    """The workers leave all hashing to the reader (as when another thread is busy hashing):
    the reader hashes batches whose pieces it has already handed out, and they must be whole."""
    obj = tmp_path / "obj.tgz"
    fc.Checkpoint(str(obj)).save_sync(str(src))

    def add_only(self, k, data):
        with self._lock:
            self._ready[k] = data

    monkeypatch.setattr(inflate._OrderedHashing, "add", add_only)
    stats = inflate.LoadStats()
    dest = tmp_path / "out"
    dest.mkdir()
    assert inflate.restore_indexed(store_for(str(obj)), str(obj), obj.stat().st_size, str(dest), stats=stats)
    assert tree(dest) == tree(src)
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None and stats.files_verified == len(index.files)


@pytest.mark.parametrize("where", ["index", "trailer-body", "trailer-header"])
def test_damage_after_the_tar_fails_a_parallel_load_too(src, tmp_path, where):
    obj = tmp_path / "obj.tgz"
    fc.Checkpoint(str(obj)).save_sync(str(src))
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None
    raw = bytearray(obj.read_bytes())
    at = {
        "index": index.data_end + 20,
        "trailer-body": len(raw) - 30,
        "trailer-header": len(raw) - ix.TRAILER_SIZE + 3,  # the index is not found: streamed
    }[where]
    raw[at] ^= 0x01
    obj.write_bytes(bytes(raw))
    cp = fc.Checkpoint(str(tmp_path / "d"), str(obj))
    with pytest.raises(CorruptCheckpointError, match=str(obj)):
        cp.load_sync()
    _no_staging_left(cp)


def test_by_default_two_cores_inflate_in_parallel_unless_it_does_not_pay(src, tmp_path, monkeypatch):
    """From 2 cores up a load inflates in parallel, every file verified (with BLAKE3 it is the
    faster load there), except an object of mostly stored blocks (model weights, random bytes),
    which has nothing to inflate, or of many small files, whose creation bounds the load: they
    stream. Told a thread count, it does as told."""
    from flyte_checkpoint.format import pipeline

    monkeypatch.delenv(inflate.THREADS_ENV)
    monkeypatch.setattr(pipeline, "default_workers", lambda: 2)
    stored = tmp_path / "stored"
    stored.mkdir()
    for i in range(3):
        (stored / f"w{i}.bin").write_bytes(os.urandom(2 * MiB))
    small = tmp_path / "small"  # compressible, 18 MiB in files of 12 KiB
    small.mkdir()
    for i in range(1500):
        (small / f"r{i:04d}.json").write_bytes(
            b'{"i": %d, "v": "%s"}\n' % (i, os.urandom(6000).hex().encode())
        )
    for tree_root, parallel in [(src, True), (stored, False), (small, False)]:
        obj = tmp_path / f"{tree_root.name}.tgz"
        fc.Checkpoint(str(obj)).save_sync(str(tree_root))
        assert obj.stat().st_size >= inflate.PARALLEL_MIN
        index = ix.read_index(store_for(str(obj)), str(obj))
        assert index is not None and inflate.pays(index) is parallel
        for told in (None, "2"):
            if told is not None:
                monkeypatch.setenv(inflate.THREADS_ENV, told)
            dest = tmp_path / f"out-{tree_root.name}-{told}"
            dest.mkdir()
            stats = inflate.LoadStats()
            done = inflate.restore_indexed(
                store_for(str(obj)), str(obj), obj.stat().st_size, str(dest), stats=stats
            )
            assert done is (parallel or told is not None), (tree_root.name, told)
            if done:
                assert stats.files_verified == len(index.files) and tree(dest) == tree(tree_root)
        monkeypatch.delenv(inflate.THREADS_ENV)


def streams_after_reading_the_index(monkeypatch) -> None:
    """Loads read the index (2 cores), then stream (as objects of stored data or of many
    small files do there)."""
    from flyte_checkpoint.format import pipeline

    monkeypatch.delenv(inflate.THREADS_ENV, raising=False)
    monkeypatch.setattr(pipeline, "default_workers", lambda: 2)
    monkeypatch.setattr(inflate, "pays", lambda index: False)


@pytest.mark.parametrize(
    ("version", "how"), [(None, "inline"), (None, "thread"), (2, "inline"), (None, "placed"), (2, "placed")]
)
def test_a_streamed_load_checks_every_files_hash_against_the_index(src, tmp_path, monkeypatch, version, how):
    """Loads that stream (one core here; also small objects, mostly stored ones, many small
    files) hash each file and check it against the index: a file whose bytes were swapped for
    others of the same length, with every gzip CRC and the index intact, is refused, whether
    it was hashed as written, at once (up to 64 KiB) or on the hashing thread, and checked
    against the index found at the end, or ("placed") hashed where the index read before the
    stream places it, on the thread that inflates. The same for an object of an older index
    (SHA-256)."""
    from flyte_checkpoint.format import filehashes

    monkeypatch.setenv(inflate.THREADS_ENV, "1")
    assert filehashes.INLINE_MAX == ix.ALIGN_MIN  # "exact", swapped below, is that size
    if how == "thread":
        monkeypatch.setattr(filehashes, "INLINE_MAX", ix.ALIGN_MIN - 1)
    elif how == "placed":
        streams_after_reading_the_index(monkeypatch)
    started = []
    real_start = filehashes.Hasher.__init__
    monkeypatch.setattr(
        filehashes.Hasher, "__init__", lambda self, *a: started.append(1) or real_start(self, *a)
    )
    obj = tmp_path / "obj.tgz"
    fc.Checkpoint(str(obj)).save_sync(str(src))
    if version is not None:
        obj.write_bytes(older_index(obj.read_bytes(), version))
    started.clear()  # the save hashed on its own thread
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None
    verified = []
    real = filehashes.FileHashes.verify
    monkeypatch.setattr(filehashes.FileHashes, "verify", lambda self, *a: verified.append(real(self, *a)))
    real_finish = filehashes.PlacedHashes.finish
    monkeypatch.setattr(filehashes.PlacedHashes, "finish", lambda self: verified.append(real_finish(self)))
    with fc.Checkpoint(str(tmp_path / "ok"), str(obj)) as cp:
        got = cp.load_sync()
        assert got is not None and tree(got) == tree(src)
    # two names are hard links: extracted as links, hashed (in place) with their first name
    assert verified == [len(index.files) - (0 if how == "placed" else 2)]

    # "exact" (64 KiB of b"e", members of its own) swapped for 64 KiB of b"f" in new members
    # with their own right CRCs: only the file's hash, recorded in the index, tells
    e = index.files["exact"]
    first, last = index.members[e.first], index.members[e.last]
    raw = obj.read_bytes()
    old = raw[first.coff : last.coff + last.clen]
    import gzip as gz
    import zlib

    new_data = gz.compress(b"f" * ix.ALIGN_MIN, mtime=0)
    assert zlib.crc32(b"f" * ix.ALIGN_MIN) != first.crc
    members = member_rows(index, version)
    swapped = (len(new_data), ix.ALIGN_MIN, zlib.crc32(b"f" * ix.ALIGN_MIN), zlib.crc32(new_data))
    members[e.first : e.last + 1] = [swapped[: len(members[0])]]
    assert e.first == e.last, "the test swaps a file held in one member"
    files = [
        (x.name, x.first, x.last, x.offset, x.size, x.mtime, x.mode, x.digest) for x in index.files.values()
    ]
    gaps = [(end, n, bytes.fromhex(h)) for end, (n, h) in index.gaps.items()]
    body = raw[: first.coff] + new_data + raw[first.coff + len(old) : index.data_end]
    data_end = len(body)
    tail = ix.encode_tail(ix.pack_payload(members, files, gaps), data_end, version=version or ix.VERSION)
    obj.write_bytes(body + tail)
    label = "BLAKE3" if version is None else "SHA-256"
    with pytest.raises(
        CorruptCheckpointError, match=rf"'exact' does not match the {label} its index records"
    ):
        fc.Checkpoint(str(tmp_path / "bad"), str(obj)).load_sync()
    assert not (tmp_path / "bad").exists() or not any((tmp_path / "bad").iterdir())
    assert not [t for t in threading.enumerate() if t.name == "fcp-hash" and t.is_alive()]
    # one hashing thread each load (weights.bin and log.jsonl are large), unless hashed in place
    assert started == ([] if how == "placed" else [1, 1])


def test_a_load_that_streams_after_reading_the_index_parses_it_once(src, tmp_path, monkeypatch):
    """A load reads the index (ranged reads) to choose how to inflate; when it streams, the
    tail it meets at the end is compared with those bytes rather than parsed again (20,000
    files' entries cost 0.06 s a parse). A tail that differs from them is parsed and checked
    on its own: the index read before never stands in for other bytes."""
    from flyte_checkpoint.format import pipeline
    from flyte_checkpoint.format.compression import decompressor

    monkeypatch.delenv(inflate.THREADS_ENV, raising=False)
    monkeypatch.setattr(pipeline, "default_workers", lambda: 2)
    monkeypatch.setattr(inflate, "pays", lambda index: False)
    obj = tmp_path / "obj.tgz"
    fc.Checkpoint(str(obj)).save_sync(str(src))
    assert obj.stat().st_size >= inflate.PARALLEL_MIN
    parsed = []
    real = ix._parse
    monkeypatch.setattr(ix, "_parse", lambda *a: parsed.append(1) or real(*a))
    with spying("file") as spy, fc.Checkpoint(str(tmp_path / "d"), spy.uri_for(str(obj))) as cp:
        got = cp.load_sync()
        assert got is not None and tree(got) == tree(src)
        assert spy.count("open_read") == 1 and spy.count("read_range") == 2  # trailer, index
    assert parsed == [1]

    known = ix.read_index(store_for(str(obj)), str(obj))
    assert known is not None and known.raw
    other = tmp_path / "other.tgz"
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "f").write_bytes(b"other")
    fc.Checkpoint(str(other)).save_sync(str(tmp_path / "o"))

    def tail_of(path: Path):
        with open(path, "rb") as f:
            members = decompressor(f)
            members.read()
            return members.tail

    own = ix.check_tail(tail_of(other), str(other), known)
    assert own is not None and list(own.files) == ["f"]
    assert own == ix.read_index(store_for(str(other)), str(other))
    data = bytearray(obj.read_bytes())
    data[known.data_end + 20] ^= 0x04  # inside the first index member: its bytes differ from known's
    obj.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match=r"index of .* is damaged"):
        ix.check_tail(tail_of(obj), str(obj), known)


@pytest.mark.parametrize("how", ["at-the-end", "placed"])
def test_a_streamed_load_refuses_an_index_listing_a_file_the_tar_does_not_hold(
    src, tmp_path, monkeypatch, how
):
    """An index entry placed over bytes of the tar that are no file (a tar header), with their
    right hash, is a file the load would not restore: refused, whichever way files are checked."""
    import gzip as gz

    monkeypatch.setenv(inflate.THREADS_ENV, "1")
    if how == "placed":
        streams_after_reading_the_index(monkeypatch)
    obj = tmp_path / "obj.tgz"
    fc.Checkpoint(str(obj)).save_sync(str(src))
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None
    raw = obj.read_bytes()
    tar = gz.decompress(raw)
    e = next(x for x in index.files.values() if x.offset >= 512 and x.size)  # its header in its member
    header_at = index.members[e.first].uoff + e.offset - 512
    assert tar[header_at + 257 : header_at + 262] == b"ustar"
    ghost = (
        "ghost",
        e.first,
        e.first,
        e.offset - 512,
        512,
        0,
        0o644,
        blake3(tar[header_at : header_at + 512]).hexdigest(),
    )
    files = [
        (x.name, x.first, x.last, x.offset, x.size, x.mtime, x.mode, x.digest) for x in index.files.values()
    ] + [ghost]
    members = member_rows(index)
    gaps = [(end, n, bytes.fromhex(h)) for end, (n, h) in index.gaps.items()]
    obj.write_bytes(
        raw[: index.data_end] + ix.encode_tail(ix.pack_payload(members, files, gaps), index.data_end)
    )
    with pytest.raises(CorruptCheckpointError, match="the tar holds no file where its index places 'ghost'"):
        fc.Checkpoint(str(tmp_path / "bad"), str(obj)).load_sync()


def test_an_object_replaced_after_its_index_was_read_loads_again_not_as_damaged(tmp_path, monkeypatch):
    """A load that hashes files where the index read before the stream places them, of an
    object replaced in between by another of the same size: the files do not match that index,
    but the stream ends in another one, so the object changed rather than broke: a TransientError
    (read it again), not damaged. A load through the store reads the version it pinned."""
    streams_after_reading_the_index(monkeypatch)
    monkeypatch.setattr(inflate, "PARALLEL_MIN", 0)

    def save(name: str) -> Path:
        root = tmp_path / f"tree-{name}"
        root.mkdir()
        for i in range(3):
            (root / f"f{i}.bin").write_bytes(os.urandom(ix.ALIGN_MIN + 1000 * i))
            os.utime(root / f"f{i}.bin", (1_700_000_000, 1_700_000_000))
        os.utime(root, (1_700_000_000, 1_700_000_000))
        obj = tmp_path / f"{name}.tgz"
        fc.Checkpoint(str(obj)).save_sync(str(root))
        return obj

    # The objects' sizes differ only by a few bytes of their compressed indexes (4 sizes in
    # 12 saves here), so two of 12 objects share a size; looking for a match of one object
    # among 20 others found none in a fresh-clone run.
    by_size: dict[int, list[Path]] = {}
    for k in range(12):
        o = save(f"o{k}")
        by_size.setdefault(o.stat().st_size, []).append(o)
    pairs = [group[:2] for group in by_size.values() if len(group) > 1]
    assert pairs, f"12 objects of 12 sizes: {sorted(by_size)}"
    obj, other = pairs[0]
    real = ix.read_index
    swaps = []

    def read_then_replace(*args, **kwargs):
        index = real(*args, **kwargs)
        if not swaps:
            swaps.append(os.replace(other, obj))
        return index

    # what the first attempt raises, for the retry: the object changed, and to load it again
    from flyte_checkpoint.errors import TransientError
    from flyte_checkpoint.format.filehashes import for_object
    from flyte_checkpoint.format.restore import restore

    size = obj.stat().st_size
    hashes = for_object(store_for(str(obj)), str(obj), size)
    assert hashes is not None
    hashes.index = ix.read_index(store_for(str(obj)), str(obj), size)
    (tmp_path / "once").mkdir()
    with (
        open(other, "rb") as raw,
        pytest.raises(
            TransientError,
            match=rf"{obj} changed while it was read \(its index is not the one read before\); load it again",
        ),
    ):
        restore(raw, str(tmp_path / "once"), size, uri=str(obj), hashes=hashes)  # type: ignore[arg-type]

    # a load replaced between its index and its stream: the file store reads the file it pinned
    # at the start (storage/pinned.py), so it gives the object it began with, whole
    monkeypatch.setattr(ix, "read_index", read_then_replace)
    expected = tree(tmp_path / f"tree-{obj.stem}")
    with fc.Checkpoint(str(tmp_path / "d"), str(obj)) as cp:
        got = cp.load_sync()
        assert got is not None and tree(got) == expected
    assert swaps == [None]


def test_a_file_not_where_the_index_read_before_places_it_fails_at_the_end(src, tmp_path):
    """Checked by place, a file the extractor writes elsewhere than the index read before the
    stream places it is refused once the stream has ended (when the caller knows the object
    was not replaced), not at once."""
    from flyte_checkpoint.format import filehashes

    obj = tmp_path / "obj.tgz"
    fc.Checkpoint(str(obj)).save_sync(str(src))
    index = ix.read_index(store_for(str(obj)), str(obj))
    assert index is not None
    placed = filehashes.PlacedHashes(index, str(obj))
    placed.on_file("exact", 0, 5)  # kept, not raised
    with pytest.raises(
        CorruptCheckpointError, match=r"'exact' \(at byte 0\) is not where its index places it"
    ):
        placed.finish()
