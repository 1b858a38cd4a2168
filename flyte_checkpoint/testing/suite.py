"""The tests of the conformance suite (see the package docstring for how to use them)."""

from __future__ import annotations

import os
import tarfile
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from ..errors import NotFoundError, SourceChangedError, TransientError
from ..storage.blobstore import BlobStore, CopyLimits
from ..uri import join
from ..util.sources import SourceFile
from .data import data as _data
from .data import described, outcome
from .deletes import DeleteManyTests
from .listing import ListingTests
from .overwrites import OverwriteTests
from .sizes import SizeTests


class _RewrittenAfterFirstRead(SourceFile):
    """A source file that another writer rewrites in place (same size) right after its first read."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.rewritten = False
        self._rewrite_lock = threading.Lock()

    def _rewrite_once(self) -> None:
        with self._rewrite_lock:
            if not self.rewritten:
                self.rewritten = True
                with open(self.path, "r+b") as f:
                    f.write(_data(self.size, seed=99))

    def read(self, n: int = -1) -> bytes:
        data = super().read(n)
        self._rewrite_once()
        return data

    def readinto(self, buffer) -> int:
        got = super().readinto(buffer)
        self._rewrite_once()
        return got

    def pread(self, n: int, offset: int) -> bytes:
        data = super().pread(n, offset)
        self._rewrite_once()
        return data


def check_empty_root(store: BlobStore, root: str) -> None:
    """Fail unless ``store`` lists nothing under ``root``, blaming ``list`` when what it yields
    lies outside ``root`` and the fixture when ``root`` really holds objects."""
    found = list(store.list(root))
    outside = [u for u in found if not u.startswith(root)]
    assert not outside, (
        f"promise broken: list(prefix) yields only the URIs that start with the prefix;"
        f" list({root!r}) yielded {outside[:3]}"
    )
    assert found == [], (
        f"setup: store_root {root} is not empty (the fixture must give a fresh prefix): {found[:3]}"
    )


class BlobStoreSuite(SizeTests, ListingTests, DeleteManyTests, OverwriteTests):
    """The :class:`BlobStore` contract: streams, atomic writes, stat, delete, list; at sizes
    picked from the store's parts and ranges (:mod:`.sizes`), with siblings that share a name
    prefix and odd keys (:mod:`.listing`), many deleted at once (:mod:`.deletes`), and with
    readers during overwrites (:mod:`.overwrites`).

    A capability flag set to False on a test class removes the tests that need it from that
    class (see :data:`CAPABILITY_TESTS`): they are not collected at all, so nothing skips.
    """

    large_object_size: int = 24 * 1024 * 1024
    supports_list: bool = True

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        for flag, names in CAPABILITY_TESTS.items():
            for name in names:
                if not getattr(cls, flag):
                    setattr(cls, name, None)  # pytest collects only callables
                elif getattr(cls, name) is None:  # closed by a base class, opened again here
                    setattr(cls, name, getattr(BlobStoreSuite, name))

    @pytest.fixture
    def root(self, store: BlobStore, store_root: str) -> str:
        if self.supports_list:
            check_empty_root(store, store_root)
        return store_root

    def test_capability_flags_say_what_the_store_does(self, store: BlobStore) -> None:
        """``supports_list_details`` is True exactly where ``list_details`` is the store's own,
        ``supports_ranges`` only where ``read_range`` is, and ``part_size`` is ``None`` or a
        number of bytes (the fault and crash suites size their saves from it)."""
        kind = type(store)
        native_details = kind.list_details is not BlobStore.list_details
        assert store.supports_list_details == native_details, (
            f"promise broken: supports_list_details says whether list_details is native;"
            f" {kind.__name__} says {store.supports_list_details}, its list_details is"
            f" {'its own' if native_details else 'the default'}"
        )
        assert not store.supports_ranges or kind.read_range is not BlobStore.read_range, (
            f"promise broken: supports_ranges means a real ranged read; {kind.__name__} keeps"
            " the default read_range"
        )
        limits = store.copy_limits
        assert limits is None or (
            isinstance(limits, CopyLimits) and kind.copy_source is not BlobStore.copy_source
        ), (
            f"promise broken: copy_limits is a CopyLimits where the store copies ranges (and"
            f" implements copy_source); {kind.__name__} declares {limits!r}"
        )
        part = store.part_size
        assert part is None or (isinstance(part, int) and part >= 0), (
            f"promise broken: part_size is None or a number of bytes; {kind.__name__} says {part!r}"
        )
        ranges = store.read_range_size
        assert ranges is None or (isinstance(ranges, int) and ranges > 0), (
            f"promise broken: read_range_size is None or a number of bytes; {kind.__name__} says {ranges!r}"
        )

    def test_part_and_range_sizes_are_the_kits(self, store: BlobStore, root: str) -> None:
        """A writer on the kit's ``PartWriter`` sends parts of the store's ``part_size``, and a
        stream on its ``RangedReader`` reads ranges of its ``read_range_size``: the suite tests
        around the sizes the store declares, so they must be the ones it uses."""
        from ..storage.kit import PartWriter, RangedReader

        uri = join(root, "declared")
        writer = store.open_write(uri)
        try:
            if isinstance(writer, PartWriter):
                assert writer.part_size == store.part_size, (
                    f"promise broken: part_size is the size of the writer's parts; the store says"
                    f" {store.part_size}, its PartWriter sends {writer.part_size}"
                )
            writer.write(b"declared")
        finally:
            writer.close()
        with store.open_read(uri) as reader:
            if isinstance(reader, RangedReader):
                assert reader.range_size == store.read_range_size, (
                    f"promise broken: read_range_size is the size of the stream's ranged reads; the"
                    f" store says {store.read_range_size}, its RangedReader reads {reader.range_size}"
                )

    def test_stat_of_absent_object_is_none(self, store: BlobStore, root: str) -> None:
        got, error = outcome(lambda: store.stat(join(root, "absent")))
        assert got is None and error is None, (
            f"promise broken: stat of an absent object returns None; it {described(got, error)}"
        )

    def test_open_read_of_absent_object_raises_not_found(self, store: BlobStore, root: str) -> None:
        got, error = outcome(lambda: store.open_read(join(root, "absent")).read())
        assert isinstance(error, NotFoundError), (
            f"promise broken: reading an absent object raises NotFoundError;"
            f" open_read {described(got, error)}"
        )

    def test_round_trip_small(self, store: BlobStore, root: str) -> None:
        uri = join(root, "small")
        with store.open_write(uri) as w:
            w.write(b"hello ")
            w.write(b"world")
        size = store.stat(uri)
        assert size == 11, f"promise broken: stat gives the object's size; 11 bytes written, stat says {size}"
        with store.open_read(uri) as r:
            got = r.read()
        assert got == b"hello world", f"promise broken: an object reads back as written; read {got!r}"

    def test_zero_byte_object(self, store: BlobStore, root: str) -> None:
        uri = join(root, "empty")
        with store.open_write(uri):
            pass
        size = store.stat(uri)
        assert size == 0, f"promise broken: an empty write stores an empty object; stat says {size}"
        got = store.read_bytes(uri)
        assert got == b"", f"promise broken: an empty object reads back empty; read {len(got)} bytes"

    def test_object_invisible_until_close(self, store: BlobStore, root: str) -> None:
        uri = join(root, "pending")
        w = store.open_write(uri)
        w.write(b"x" * 1000)
        early = store.stat(uri)
        assert early is None, (
            f"promise broken: an object appears only when its writer is closed;"
            f" stat before close says {early}"
        )
        w.close()
        size = store.stat(uri)
        assert size == 1000, f"promise broken: close() commits the object; stat after close says {size}"

    def test_exception_discards_the_write(self, store: BlobStore, root: str) -> None:
        uri = join(root, "aborted")
        with pytest.raises(RuntimeError, match="boom"), store.open_write(uri) as w:
            w.write(_data(1024 * 1024))
            raise RuntimeError("boom")
        size = store.stat(uri)
        assert size is None, (
            f"promise broken: an exception in a writer's with block leaves nothing; stat says {size}"
        )
        if self.supports_list:
            left = list(store.list(root))
            assert left == [], (
                f"promise broken: an aborted write leaves no object behind (not even a temporary one);"
                f" listed {left}"
            )

    def test_abort_keeps_previous_object(self, store: BlobStore, root: str) -> None:
        uri = join(root, "kept")
        store.write_bytes(uri, b"old")
        w = store.open_write(uri)
        w.write(_data(self.large_object_size // 2, seed=1))
        w.abort()
        got = store.read_bytes(uri)
        assert got == b"old", (
            f"promise broken: abort() keeps the previous object; it reads back {len(got)} bytes, not b'old'"
        )

    def test_overwrite_replaces_whole_object(self, store: BlobStore, root: str) -> None:
        uri = join(root, "over")
        store.write_bytes(uri, b"a" * 5000)
        store.write_bytes(uri, b"b" * 10)
        got = store.read_bytes(uri)
        assert got == b"b" * 10, (
            f"promise broken: an overwrite replaces the whole object; read back {got[:20]!r}"
            f" ({len(got)} bytes), not 10 bytes of b'b'"
        )

    def test_write_after_close_is_an_error(self, store: BlobStore, root: str) -> None:
        w = store.open_write(join(root, "closed"))
        w.close()
        got, error = outcome(lambda: w.write(b"late"))
        assert isinstance(error, ValueError), (
            f"promise broken: a write to a closed writer raises ValueError; it {described(got, error)}"
        )

    def test_delete(self, store: BlobStore, root: str) -> None:
        uri = join(root, "gone")
        store.write_bytes(uri, b"x")
        store.delete(uri)
        size = store.stat(uri)
        assert size is None, f"promise broken: delete removes the object; stat says {size} afterwards"
        _, error = outcome(lambda: store.delete(uri))
        assert error is None, (
            f"promise broken: deleting an absent object is no error;"
            f" it raised {type(error).__name__}: {error}"
        )

    def test_list_by_prefix(self, store: BlobStore, root: str) -> None:
        names = ["a/1", "a/2", "b/1", "a-x"]
        for n in names:
            store.write_bytes(join(root, n), n.encode())
        listed = list(store.list(root))
        assert sorted(listed) == sorted(join(root, n) for n in names), (
            f"promise broken: list(prefix) yields every object under the prefix, and only those: {listed}"
        )
        assert listed == sorted(listed), f"promise broken: list yields URIs in sorted order: {listed}"
        under_a = list(store.list(join(root, "a") + "/"))
        assert under_a == [join(root, "a/1"), join(root, "a/2")], (
            f"promise broken: list(prefix) yields only the URIs that start with the prefix, sorted: {under_a}"
        )

    def test_list_details_gives_sizes_times_and_one_level_with_folders(
        self, store: BlobStore, root: str
    ) -> None:
        """``list_details``: every object with its size (and a modification time near now, if
        the store gives one); ``recursive=False`` lists one level, deeper objects as folders."""
        started = datetime.now(timezone.utc)
        names = {"a/1": b"1", "a/2": b"22", "b/c/1": b"333", "a-x": b"4444"}
        for n, data in names.items():
            store.write_bytes(join(root, n), data)
        every = list(store.list_details(root))
        uris = [i.uri for i in every]
        assert uris == sorted(join(root, n) for n in names), (
            f"promise broken: list_details lists every object under the prefix, sorted by URI: {uris}"
        )
        sizes = [i.size for i in every]
        assert sizes == [len(names[i.uri[len(root) + 1 :]]) for i in every], (
            f"promise broken: list_details gives each object's size: {sizes}"
        )
        folders = [i.uri for i in every if i.is_folder]
        assert not folders, f"promise broken: a recursive list_details lists no folders: {folders}"
        slack = timedelta(minutes=5)  # a server's clock may be off a little
        for info in every:
            if info.modified is not None:
                assert info.modified.tzinfo is not None, (
                    f"promise broken: list_details gives timezone-aware times: {info}"
                )
                assert started - slack <= info.modified <= datetime.now(timezone.utc) + slack, (
                    f"promise broken: list_details gives the time the object was written: {info}"
                )
        top = [(i.uri, i.size, i.is_folder) for i in store.list_details(root + "/", recursive=False)]
        want = [
            (join(root, "a-x"), 4, False),
            (join(root, "a") + "/", None, True),
            (join(root, "b") + "/", None, True),
        ]
        assert top == want, (
            f"promise broken: list_details(recursive=False) lists one level, deeper objects as one"
            f" folder each (size None), sorted: {top}"
        )
        under_a = [(i.uri, i.is_folder) for i in store.list_details(join(root, "a"), recursive=False)]
        assert under_a == [(join(root, "a-x"), False), (join(root, "a") + "/", True)], (
            f"promise broken: list_details(prefix, recursive=False) takes the prefix as a string: {under_a}"
        )
        deep = [(i.uri, i.size) for i in store.list_details(join(root, "b/c") + "/", recursive=False)]
        assert deep == [(join(root, "b/c/1"), 3)], (
            f"promise broken: list_details(recursive=False) of a deeper prefix lists its level: {deep}"
        )
        nothing = list(store.list_details(join(root, "nothing") + "/", recursive=False))
        assert nothing == [], f"promise broken: list_details of an empty prefix lists nothing: {nothing}"

    def test_read_range(self, store: BlobStore, root: str) -> None:
        uri = join(root, "ranged")
        payload = _data(100_000)
        store.write_bytes(uri, payload)
        for start, length in ((0, 10), (99_990, 100), (50_000, 4096)):
            got = store.read_range(uri, start, length)
            assert got == payload[start : start + length], (
                f"promise broken: read_range returns the object's bytes [start, start + length), fewer"
                f" only at its end; read_range({start}, {length}) of 100000 bytes returned {len(got)}"
            )

    def test_copy_object(self, store: BlobStore, root: str) -> None:
        """``copy_object`` (optional, with a default; checkpoint generations use it): the whole
        object, over an existing one too; an absent source writes nothing and returns None."""
        src, dst = join(root, "copy-src"), join(root, "copy-dst")
        payload = _data(2 * 1024 * 1024 + 3)
        store.write_bytes(src, payload)
        store.write_bytes(dst, b"to be replaced")
        copied = store.copy_object(src, dst)
        got = store.read_bytes(dst)
        assert (copied, got == payload) == (len(payload), True), (
            f"promise broken: copy_object copies the whole object and returns its size; returned"
            f" {copied}, and the copy holds {len(got)} of {len(payload)} bytes"
        )
        assert store.read_bytes(src) == payload, "promise broken: copy_object leaves its source alone"
        absent = join(root, "copy-none")
        assert store.copy_object(join(root, "copy-missing"), absent) is None, (
            "promise broken: copy_object of an absent object returns None"
        )
        assert store.stat(absent) is None, "promise broken: copy_object of an absent object writes nothing"

    def test_write_bytes_if_absent(self, store: BlobStore, root: str) -> None:
        """``write_bytes_if_absent`` (optional, with a default; the checkpoint history numbers
        manifests with it): creates an absent object and returns True; over an existing one
        writes nothing and returns False. Where ``creates_atomically`` is declared, of writers
        creating one object at once exactly one gets True, and the object is its bytes (counted
        over rounds of racing threads released together: no timing)."""
        uri = join(root, "create-once")
        assert store.write_bytes_if_absent(uri, b"first") is True, (
            "promise broken: write_bytes_if_absent of an absent object returns True"
        )
        assert store.write_bytes_if_absent(uri, b"second!") is False, (
            "promise broken: write_bytes_if_absent over an existing object returns False"
        )
        assert store.read_bytes(uri) == b"first", "promise broken: a refused create writes nothing"
        if not store.creates_atomically:
            return
        writers, rounds = 4, 3
        for n in range(rounds):
            target = join(root, f"create-race-{n}")
            start = threading.Barrier(writers)
            won: list[int] = []

            def create(
                i: int, target: str = target, start: threading.Barrier = start, won: list[int] = won
            ) -> None:
                start.wait()
                if store.write_bytes_if_absent(target, f"writer {i}".encode()):
                    won.append(i)

            threads = [threading.Thread(target=create, args=(i,)) for i in range(writers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(won) == 1, (
                f"promise broken: creates_atomically is declared, but {len(won)} of {writers} racing"
                " creates of one object returned True; exactly one may"
            )
            assert store.read_bytes(target) == f"writer {won[0]}".encode(), (
                "promise broken: the object a racing create made holds another writer's bytes"
            )

    def test_upload_and_download_file(self, store: BlobStore, root: str, tmp_path: Path) -> None:
        src = tmp_path / "src.bin"
        payload = _data(3 * 1024 * 1024 + 5)
        src.write_bytes(payload)
        uri = join(root, "file.bin")
        store.upload_file(src, uri)
        dst = tmp_path / "dst.bin"
        store.download_file(uri, dst)
        got = dst.read_bytes()
        assert got == payload, (
            f"promise broken: download_file gives back what upload_file stored; {len(got)} of"
            f" {len(payload)} bytes" + (" (other bytes)" if len(got) == len(payload) else "")
        )

    def test_upload_file_refuses_a_small_file_that_changes_while_read(
        self, store: BlobStore, root: str, tmp_path: Path
    ) -> None:
        """``upload_file`` reads through ``flyte_checkpoint.storage.kit.open_source`` and checks the
        file before committing: a file rewritten after its first read raises and stores nothing."""
        self._upload_changing_file(store, root, tmp_path, 1000)

    def test_upload_file_refuses_a_large_file_that_changes_while_read(
        self, store: BlobStore, root: str, tmp_path: Path
    ) -> None:
        """The same for a file of ``large_object_size`` (read in parts or blocks)."""
        self._upload_changing_file(store, root, tmp_path, self.large_object_size)

    def _upload_changing_file(self, store: BlobStore, root: str, tmp_path: Path, size: int) -> None:
        uri = join(root, "changing")
        store.write_bytes(uri, b"previous")
        src = tmp_path / "changing.bin"
        src.write_bytes(_data(size))
        os.utime(src, (1_000_000_000, 1_000_000_000))  # written long ago: a rewrite now changes the time
        with _RewrittenAfterFirstRead(src) as source:
            got, error = outcome(lambda: store.upload_file(source, uri))
        assert source.rewritten, (
            "promise broken: upload_file reads the file through flyte_checkpoint.storage.kit.open_source"
            " (the file it was given was never read)"
        )
        assert isinstance(error, SourceChangedError) and str(src) in str(error), (
            f"promise broken: upload_file of a file that changes while it is read raises"
            f" SourceChangedError naming the file; it {described(got, error)}"
        )
        kept = store.read_bytes(uri)
        assert kept == b"previous", (
            f"promise broken: an upload_file refused for a changed file keeps the previous object;"
            f" it reads back {len(kept)} bytes"
        )

    def test_concurrent_writers_leave_one_whole_object(self, store: BlobStore, root: str) -> None:
        """Racing writers leave one whole object. A loser may fail with TransientError (a store
        whose commit detects the race, such as Azure's block lists); the core retries those."""
        uri = join(root, "race")
        payloads = [bytes([65 + i]) * (256 * 1024 + i) for i in range(4)]
        errors: list[BaseException] = []

        def save(p: bytes) -> None:
            try:
                store.write_bytes(uri, p)
            except TransientError:
                pass
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=save, args=(p,)) for p in payloads]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, (
            f"promise broken: racing writers fail only with TransientError (the core retries it);"
            f" {type(errors[0]).__name__}: {errors[0]}"
            if errors
            else ""
        )
        got = store.read_bytes(uri)
        assert got in payloads, (
            f"promise broken: racing writers leave one writer's whole object; read back {len(got)} bytes"
            " that are none of theirs"
        )

    def test_errors_are_the_projects_own(self, store: BlobStore, root: str, tmp_path: Path) -> None:
        """Each read of an absent object raises the project's ``NotFoundError`` (so also
        ``FileNotFoundError``), never the SDK's own error, and the message names the object."""
        uri = join(root, "missing-object")
        reads = {
            "open_read": lambda: store.open_read(uri).read(),
            "read_bytes": lambda: store.read_bytes(uri),
            "read_range": lambda: store.read_range(uri, 0, 10),
            "download_file": lambda: store.download_file(uri, tmp_path / "download"),
        }
        for name, read in reads.items():
            got, error = outcome(read)
            assert isinstance(error, NotFoundError), (
                f"promise broken: each read of an absent object raises the project's NotFoundError"
                f" (never the SDK's own error); {name} {described(got, error)}"
            )
            assert isinstance(error, FileNotFoundError), (
                f"promise broken: NotFoundError is a FileNotFoundError; {name} raised {type(error).__mro__}"
            )
            assert "missing-object" in str(error), (
                f"promise broken: an error message names the object; {name} raised: {error}"
            )


#: The tests each capability flag opens (True, the default) or removes (False).
CAPABILITY_TESTS: dict[str, tuple[str, ...]] = {
    "supports_list": (
        "test_list_by_prefix",
        "test_list_details_gives_sizes_times_and_one_level_with_folders",
        "test_list_keeps_siblings_that_share_a_name_prefix_apart",
    )
}


class CheckpointSuite:
    """``Checkpoint`` save and load through the registry on the backend's scheme."""

    @pytest.fixture
    def cp_root(self, store: BlobStore, store_root: str) -> str:
        return store_root

    def _checkpoint(self, dest: str, src: str | None = None):
        from ..checkpoint import Checkpoint

        return Checkpoint(dest, src)

    def test_bytes_round_trip(self, cp_root: str) -> None:
        uri = join(cp_root, "bytes.ckpt")
        with self._checkpoint(uri) as cp:
            cp.save_sync(b"state-1")
        with self._checkpoint(join(cp_root, "next"), uri) as cp:
            path = cp.load_sync()
            assert path == cp.path / "payload", (
                f"promise broken: a load of saved bytes returns the workspace's payload file;"
                f" it returned {path}"
            )
            got = path.read_bytes()
            assert got == b"state-1", f"promise broken: a load restores the bytes saved; it restored {got!r}"

    def test_directory_round_trip(self, cp_root: str, tmp_path: Path) -> None:
        src = tmp_path / "ckpt"
        (src / "sub").mkdir(parents=True)
        (src / "state.json").write_text('{"step": 3}')
        (src / "sub" / "w.bin").write_bytes(os.urandom(300_000))
        uri = join(cp_root, "dir.ckpt")
        with self._checkpoint(uri) as cp:
            cp.save_sync(src)
        with self._checkpoint(join(cp_root, "next"), uri) as cp:
            path = cp.load_sync()
            assert path == cp.path, (
                f"promise broken: a load of a folder returns the workspace; it returned {path}"
            )
            state = (path / "state.json").read_text()
            assert state == '{"step": 3}', (
                f"promise broken: a load restores the folder saved; state.json: {state!r}"
            )
            same = (path / "sub" / "w.bin").read_bytes() == (src / "sub" / "w.bin").read_bytes()
            assert same, "promise broken: a load restores the folder saved; sub/w.bin differs"

    def test_object_is_a_gzip_tar_of_top_level_entries(
        self, store: BlobStore, cp_root: str, tmp_path: Path
    ) -> None:
        src = tmp_path / "ckpt"
        src.mkdir()
        (src / "state.json").write_text("{}")
        uri = join(cp_root, "tar.ckpt")
        with self._checkpoint(uri) as cp:
            cp.save_sync(src)
        local = tmp_path / "obj.tgz"
        store.download_file(uri, local)
        with tarfile.open(local, "r:gz") as tf:
            names = tf.getnames()
        assert names == ["state.json"], (
            f"promise broken: a folder is stored as a gzip tar of its top-level entries; it holds {names}"
        )

    def test_missing_source_loads_as_none(self, cp_root: str) -> None:
        with self._checkpoint(join(cp_root, "a"), join(cp_root, "never-written")) as cp:
            got = cp.load_sync()
        assert got is None, f"promise broken: a load from an absent object returns None; it returned {got}"

    def test_large_directory_round_trip(self, cp_root: str, tmp_path: Path) -> None:
        src = tmp_path / "big"
        src.mkdir()
        size = getattr(self, "large_object_size", 24 * 1024 * 1024)
        (src / "shard.bin").write_bytes(_data(size, seed=7))
        uri = join(cp_root, "big.ckpt")
        with self._checkpoint(uri) as cp:
            cp.save_sync(src)
        with self._checkpoint(join(cp_root, "n"), uri) as cp:
            path = cp.load_sync()
            same = (path / "shard.bin").read_bytes() == (src / "shard.bin").read_bytes()
            assert same, f"promise broken: a load restores the folder saved; its {size}-byte file differs"
