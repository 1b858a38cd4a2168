"""The kit's PartWriter copies ranges as S3 does (every part but the last at least ``min_part``,
at most ``max_copy`` bytes a copy), on a store that holds parts in memory and refuses what S3
refuses; the copy suite runs on it, and on variants that each break one promise."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from flyte_checkpoint.storage.blobstore import BlobWriter, CopyLimits, CopySource, copy_source_changed
from flyte_checkpoint.storage.kit import PartWriter, StorePool
from flyte_checkpoint.storage.stores.memory import MemoryStore, _MemoryWriter
from flyte_checkpoint.testing import CopyCheckSuite, CopySuite

MIN_PART = 256 * 1024
LIMITS = CopyLimits(min_part=MIN_PART, max_copy=3 * MIN_PART, max_pieces=10_000)


def _put(uri: str, data: bytes) -> None:
    """Store an object as the memory store's own writer does (a new version)."""
    with _MemoryWriter(uri) as w:
        w.write(data)


class PartedStore(MemoryStore):
    """The memory store with an S3-like writer: numbered parts, copied parts, a commit that
    refuses a part (but the last) under ``min_part`` or a copy over ``max_copy``."""

    copy_limits = LIMITS
    check_versions = True

    def __init__(self) -> None:
        self.pool = StorePool("parted", 2)
        self.sent = 0  # bytes sent as written parts or whole objects
        self.requests: list[str] = []
        self._lock = threading.Lock()

    def open_write(self, uri: str) -> BlobWriter:
        return PartedWriter(self, uri)

    def read_source(self, source: CopySource, start: int, length: int) -> bytes:
        if self.check_versions and self.copy_source(source.uri) != source:
            raise copy_source_changed(source)
        return self.read_range(source.uri, start, length)

    def note(self, what: str, sent: int = 0) -> None:
        with self._lock:
            self.requests.append(what)
            self.sent += sent


class PartedWriter(PartWriter):
    def __init__(self, store: PartedStore, uri: str) -> None:
        super().__init__(
            uri,
            part_size=MIN_PART,
            max_concurrency=2,
            pool=store.pool,
            double_every=1000,
            max_parts=10_000,
            max_part_size=1 << 30,
            copy_limits=store.copy_limits,
        )
        self.store = store

    def _put_whole(self, data: bytes | bytearray) -> None:
        self.store.note("put", len(data))
        _put(self.uri, bytes(data))

    def _start(self) -> None:
        self.store.note("start")

    def _send_part(self, number: int, data: bytes | bytearray) -> Any:
        self.store.note("part", len(data))
        return ("part", bytes(data))

    def _copy_part(self, number: int, source: CopySource, start: int, length: int) -> Any:
        self.store.note("copy")
        limits = self.store.copy_limits
        assert limits is not None and limits.max_copy is not None
        assert length <= limits.max_copy, f"the server refuses a copy of {length} bytes"
        return ("copy", self.store.read_source(source, start, length))

    def _read_source(self, source: CopySource, start: int, length: int) -> bytes:
        self.store.note("read")
        return self.store.read_source(source, start, length)

    def _complete(self, results: list[Any], tail: Any) -> None:
        for i, (kind, data) in enumerate(results[:-1]):
            assert len(data) >= MIN_PART, f"the server refuses part {i + 1} ({kind}) of {len(data)} bytes"
        self.store.note("complete")
        _put(self.uri, b"".join(d for _, d in results))


class _MemoryOnly(BlobWriter):
    def __init__(self, uri: str) -> None:
        super().__init__(uri)

    def _write(self, data: Any) -> None:
        pass

    def _commit(self) -> None:
        pass

    def _abort(self) -> None:
        pass


class TestPartedStore(CopySuite, CopyCheckSuite):
    @pytest.fixture
    def store(self) -> Iterator[PartedStore]:
        store = PartedStore()
        yield store
        store.pool.close()

    @pytest.fixture
    def store_root(self) -> str:
        return f"memory://parted/{uuid.uuid4().hex}"


def test_long_runs_are_copied_and_only_the_short_pieces_are_sent():
    """A header, a long copy, a short written piece and another long copy: the server copies
    the runs; what is sent is the written bytes plus at most ``min_part`` per short piece."""
    store = PartedStore()
    try:
        src_uri = f"memory://parted/{uuid.uuid4().hex}/src"
        data = bytes(range(256)) * (40 * MIN_PART // 256)
        _put(src_uri, data)
        src = store.copy_source(src_uri)
        assert src is not None
        store.requests.clear()
        uri = src_uri + "-new"
        with store.open_write(uri) as w:
            w.write(b"h" * 1000)
            w.copy(src, 0, 20 * MIN_PART)
            w.write(b"g" * 1000)
            w.copy(src, 20 * MIN_PART, 20 * MIN_PART)
        assert (
            store.read_bytes(uri) == b"h" * 1000 + data[: 20 * MIN_PART] + b"g" * 1000 + data[20 * MIN_PART :]
        )
        assert w.bytes_written == 2000 and w.bytes_copied == 40 * MIN_PART
        assert store.sent <= 2000 + 2 * MIN_PART
        assert store.requests.count("copy") >= 2
    finally:
        store.pool.close()


class _Unversioned(PartedStore):
    check_versions = False


class _NoCopyLimits(MemoryStore):
    copy_limits = None


def test_the_suite_fails_a_store_that_copies_from_a_replaced_source():
    suite = TestPartedStore()
    store = _Unversioned()
    try:
        with pytest.raises(AssertionError, match="promise broken: a copy from a replaced source"):
            suite.test_copy_from_a_replaced_source_fails_and_commits_nothing(
                store, f"memory://parted/{uuid.uuid4().hex}"
            )
    finally:
        store.pool.close()


def test_the_suite_fails_a_store_without_copy_limits():
    with pytest.raises(AssertionError, match="promise broken: CopySuite is for stores that declare"):
        TestPartedStore().test_copy_source_of_absent_object_is_none(
            _NoCopyLimits(), f"memory://parted/{uuid.uuid4().hex}"
        )


def test_a_writer_without_the_capability_refuses_copies():
    w = _MemoryOnly("memory://x/y")
    with pytest.raises(NotImplementedError, match="cannot copy ranges"):
        w.copy(CopySource("memory://x/z", 10, "1"), 0, 5)
    w.abort()


def test_a_server_checksum_that_the_bytes_read_back_do_not_have_is_not_trusted(caplog):
    """A server whose CRC-32 of a copied part is not that of the source's bytes, which read back
    as the check expects: the copy is trusted no more than the source. The commit refuses the
    whole copy (a folder save sends those files) and says why."""
    import logging

    from flyte_checkpoint.errors import CopyDamagedError
    from flyte_checkpoint.testing.incremental import checks_of

    class LyingWriter(PartedWriter):
        def _copied_crc32(self, result: Any) -> int | None:
            return 0x1234

    class Lying(PartedStore):
        def open_write(self, uri: str) -> BlobWriter:
            return LyingWriter(self, uri)

    store = Lying()
    try:
        data = bytes(range(256)) * (3 * MIN_PART // 256)
        src, dest = f"memory://lying/{uuid.uuid4().hex}", f"memory://lying/{uuid.uuid4().hex}"
        _put(src, data)
        source = store.copy_source(src)
        assert source is not None
        expect = checks_of(data, 0, 2 * MIN_PART, MIN_PART // 2)
        with (
            caplog.at_level(logging.WARNING, "flyte_checkpoint"),
            pytest.raises(CopyDamagedError) as info,
            store.open_write(dest) as w,
        ):
            w.copy(source, 0, 2 * MIN_PART, expect)
        assert [(s.uri, a, n) for s, a, n in info.value.damaged] == [(src, 0, 2 * MIN_PART)]
        assert "is not that of the bytes read back from it: the copy is not trusted" in caplog.text
        assert store.stat(dest) is None
    finally:
        store.pool.close()
