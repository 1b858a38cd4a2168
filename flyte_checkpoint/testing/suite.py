"""The tests of the conformance suite (see the package docstring for how to use them)."""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from ..errors import CheckpointError, NotFoundError, SourceChangedError, TransientError
from ..sources import SourceFile
from ..storage.blobstore import BlobStore, CopyLimits
from ..uri import join


def _data(size: int, seed: int = 0) -> bytes:
    """Deterministic, incompressible-looking bytes."""
    out = bytearray()
    block = hashlib.sha256(str(seed).encode()).digest()
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block * 64
    return bytes(out[:size])


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
    assert found == [], f"store_root {root} is not empty (the fixture must give a fresh prefix): {found[:3]}"


class BlobStoreSuite:
    """The :class:`BlobStore` contract: streams, atomic writes, stat, delete, list.

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
            f"part_size must be None or bytes: {part!r}"
        )

    def test_stat_of_absent_object_is_none(self, store: BlobStore, root: str) -> None:
        assert store.stat(join(root, "absent")) is None

    def test_open_read_of_absent_object_raises_not_found(self, store: BlobStore, root: str) -> None:
        with pytest.raises(NotFoundError):
            store.open_read(join(root, "absent")).read()

    def test_round_trip_small(self, store: BlobStore, root: str) -> None:
        uri = join(root, "small")
        with store.open_write(uri) as w:
            w.write(b"hello ")
            w.write(b"world")
        assert store.stat(uri) == 11
        with store.open_read(uri) as r:
            assert r.read() == b"hello world"

    def test_zero_byte_object(self, store: BlobStore, root: str) -> None:
        uri = join(root, "empty")
        with store.open_write(uri):
            pass
        assert store.stat(uri) == 0
        assert store.read_bytes(uri) == b""

    def test_round_trip_large_in_many_writes(self, store: BlobStore, root: str) -> None:
        uri = join(root, "large")
        data = _data(self.large_object_size)
        with store.open_write(uri) as w:
            for i in range(0, len(data), 3 * 1024 * 1024 + 17):
                w.write(data[i : i + 3 * 1024 * 1024 + 17])
        assert store.stat(uri) == len(data)
        digest = hashlib.sha256()
        with store.open_read(uri) as r:
            while chunk := r.read(1024 * 1024):
                digest.update(chunk)
        assert digest.hexdigest() == hashlib.sha256(data).hexdigest()

    def test_object_invisible_until_close(self, store: BlobStore, root: str) -> None:
        uri = join(root, "pending")
        w = store.open_write(uri)
        w.write(b"x" * 1000)
        assert store.stat(uri) is None
        w.close()
        assert store.stat(uri) == 1000

    def test_exception_discards_the_write(self, store: BlobStore, root: str) -> None:
        uri = join(root, "aborted")
        with pytest.raises(RuntimeError, match="boom"), store.open_write(uri) as w:
            w.write(_data(1024 * 1024))
            raise RuntimeError("boom")
        assert store.stat(uri) is None
        if self.supports_list:
            assert list(store.list(root)) == []

    def test_abort_keeps_previous_object(self, store: BlobStore, root: str) -> None:
        uri = join(root, "kept")
        store.write_bytes(uri, b"old")
        w = store.open_write(uri)
        w.write(_data(self.large_object_size // 2, seed=1))
        w.abort()
        assert store.read_bytes(uri) == b"old"

    def test_overwrite_replaces_whole_object(self, store: BlobStore, root: str) -> None:
        uri = join(root, "over")
        store.write_bytes(uri, b"a" * 5000)
        store.write_bytes(uri, b"b" * 10)
        assert store.read_bytes(uri) == b"b" * 10

    def test_write_after_close_is_an_error(self, store: BlobStore, root: str) -> None:
        w = store.open_write(join(root, "closed"))
        w.close()
        with pytest.raises(ValueError):
            w.write(b"late")

    def test_delete(self, store: BlobStore, root: str) -> None:
        uri = join(root, "gone")
        store.write_bytes(uri, b"x")
        store.delete(uri)
        assert store.stat(uri) is None
        store.delete(uri)  # absent: no error

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
        assert [i.uri for i in every] == sorted(join(root, n) for n in names)
        assert [i.size for i in every] == [len(names[i.uri[len(root) + 1 :]]) for i in every]
        assert not any(i.is_folder for i in every)
        slack = timedelta(minutes=5)  # a server's clock may be off a little
        for info in every:
            if info.modified is not None:
                assert info.modified.tzinfo is not None, info
                assert started - slack <= info.modified <= datetime.now(timezone.utc) + slack, info
        top = [(i.uri, i.size, i.is_folder) for i in store.list_details(root + "/", recursive=False)]
        assert top == [
            (join(root, "a-x"), 4, False),
            (join(root, "a") + "/", None, True),
            (join(root, "b") + "/", None, True),
        ]
        under_a = [(i.uri, i.is_folder) for i in store.list_details(join(root, "a"), recursive=False)]
        assert under_a == [(join(root, "a-x"), False), (join(root, "a") + "/", True)]
        deep = [(i.uri, i.size) for i in store.list_details(join(root, "b/c") + "/", recursive=False)]
        assert deep == [(join(root, "b/c/1"), 3)]
        assert list(store.list_details(join(root, "nothing") + "/", recursive=False)) == []

    def test_read_range(self, store: BlobStore, root: str) -> None:
        uri = join(root, "ranged")
        data = _data(100_000)
        store.write_bytes(uri, data)
        assert store.read_range(uri, 0, 10) == data[:10]
        assert store.read_range(uri, 99_990, 100) == data[99_990:]
        assert store.read_range(uri, 50_000, 4096) == data[50_000:54_096]

    def test_read_n_returns_n_bytes_until_the_end(self, store: BlobStore, root: str) -> None:
        """``open_read(uri).read(n)`` returns exactly ``n`` bytes until the object ends (then the
        rest, then ``b""``), whatever ranges or chunks the store reads in."""
        uri = join(root, "exact-reads")
        data = _data(self.large_object_size + 1)
        store.write_bytes(uri, data)
        n = 1024 * 1024 + 3  # not a multiple of any usual range or chunk
        with store.open_read(uri) as r:
            for offset in range(0, len(data), n):
                chunk = r.read(n)
                want = min(n, len(data) - offset)
                assert len(chunk) == want, (
                    f"promise broken: open_read's read(n) returns n bytes unless at the end;"
                    f" read({n}) at offset {offset} of {len(data)} returned {len(chunk)}"
                )
                assert chunk == data[offset : offset + want], f"read({n}) at offset {offset}: other bytes"
            assert r.read(n) == b"", "read past the end returns b''"

    def test_upload_and_download_file(self, store: BlobStore, root: str, tmp_path: Path) -> None:
        src = tmp_path / "src.bin"
        data = _data(3 * 1024 * 1024 + 5)
        src.write_bytes(data)
        uri = join(root, "file.bin")
        store.upload_file(src, uri)
        dst = tmp_path / "dst.bin"
        store.download_file(uri, dst)
        assert dst.read_bytes() == data

    def test_upload_file_refuses_a_small_file_that_changes_while_read(
        self, store: BlobStore, root: str, tmp_path: Path
    ) -> None:
        """``upload_file`` reads through ``flyte_checkpoint.sources.open_source`` and checks the
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
        named = re.escape(str(src))
        with _RewrittenAfterFirstRead(src) as source, pytest.raises(SourceChangedError, match=named):
            store.upload_file(source, uri)
        assert source.rewritten, "upload_file must read the file through flyte_checkpoint.sources.open_source"
        assert store.read_bytes(uri) == b"previous"

    def test_key_with_spaces_and_unicode(self, store: BlobStore, root: str) -> None:
        uri = join(root, "dir with space/ckpt é ü 文字.bin")
        store.write_bytes(uri, b"unicode")
        assert store.stat(uri) == 7
        assert store.read_bytes(uri) == b"unicode"
        if self.supports_list:
            assert list(store.list(root)) == [uri]

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
        assert not errors
        assert store.read_bytes(uri) in payloads

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
            with pytest.raises(CheckpointError) as info:
                read()
            error = info.value
            assert isinstance(error, NotFoundError), f"{name}: {type(error).__name__}, not NotFoundError"
            assert isinstance(error, FileNotFoundError), f"{name}: {type(error).__mro__}"
            assert "missing-object" in str(error), f"{name}: the message does not name the object: {error}"


#: The tests each capability flag opens (True, the default) or removes (False).
CAPABILITY_TESTS: dict[str, tuple[str, ...]] = {
    "supports_list": ("test_list_by_prefix", "test_list_details_gives_sizes_times_and_one_level_with_folders")
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
            assert path == cp.path / "payload"
            assert path.read_bytes() == b"state-1"

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
            assert path == cp.path
            assert (path / "state.json").read_text() == '{"step": 3}'
            assert (path / "sub" / "w.bin").read_bytes() == (src / "sub" / "w.bin").read_bytes()

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
            assert tf.getnames() == ["state.json"]

    def test_missing_source_loads_as_none(self, cp_root: str) -> None:
        with self._checkpoint(join(cp_root, "a"), join(cp_root, "never-written")) as cp:
            assert cp.load_sync() is None

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
            assert (path / "shard.bin").read_bytes() == (src / "shard.bin").read_bytes()
