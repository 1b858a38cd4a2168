"""The copy suite: a store's server-side range copy (``copy_limits``, ``BlobWriter.copy``).

Mix :class:`CopySuite` into the test class of a store that declares ``copy_limits`` (with the
``store`` and ``store_root`` fixtures of :class:`~flyte_checkpoint.testing.BlobStoreSuite`).
Its objects are sized from the store's ``copy_limits.min_part``, so that copies cross the
server's minimum and the writer's own handling of short pieces is exercised too.
"""

from __future__ import annotations

import pytest

from ..errors import CopySourceChangedError
from ..storage.blobstore import BlobStore, CopySource
from ..uri import join
from .suite import _data, check_empty_root


class CopySuite:
    """Objects built from written bytes and ranges of other objects copied by the server."""

    supports_list: bool = True

    @pytest.fixture
    def copy_root(self, store: BlobStore, store_root: str) -> str:
        if self.supports_list:
            check_empty_root(store, store_root)
        return store_root

    def _unit(self, store: BlobStore) -> int:
        """A length around the store's minimum piece (1 MiB where there is none)."""
        limits = store.copy_limits
        assert limits is not None, (
            f"promise broken: CopySuite is for stores that declare copy_limits; {type(store).__name__}"
            " declares None"
        )
        return max(limits.min_part, 1024 * 1024)

    def _source(self, store: BlobStore, uri: str, data: bytes) -> CopySource:
        store.write_bytes(uri, data)
        source = store.copy_source(uri)
        assert source is not None and source.uri == uri and source.size == len(data), (
            f"promise broken: copy_source describes the object (its URI and size): {source}"
        )
        return source

    def test_copy_source_of_absent_object_is_none(self, store: BlobStore, copy_root: str) -> None:
        self._unit(store)
        assert store.copy_source(join(copy_root, "absent")) is None, (
            "promise broken: copy_source of an absent object is None"
        )

    def test_copy_source_version_changes_when_the_object_is_replaced(
        self, store: BlobStore, copy_root: str
    ) -> None:
        self._unit(store)
        uri = join(copy_root, "versioned")
        first = self._source(store, uri, _data(1000, seed=1))
        assert store.copy_source(uri) == first, "promise broken: an unchanged object keeps its version"
        second = self._source(store, uri, _data(1000, seed=2))
        assert second.version != first.version, (
            f"promise broken: a replaced object has a new version: {first.version!r} both times"
        )

    def test_written_and_copied_bytes_in_order(self, store: BlobStore, copy_root: str) -> None:
        """Written bytes, long and short copies (shorter than the server's minimum piece), copies
        back to back, a copy first and a copy last: the object is their concatenation, and the
        counters say which bytes were written and which copied."""
        unit = self._unit(store)
        data = _data(3 * unit + 4097, seed=5)
        src = self._source(store, join(copy_root, "source"), data)
        pieces: list[tuple[str, bytes | tuple[int, int]]] = [
            ("copy", (unit // 2, unit + 3)),  # first piece copied
            ("write", b"header" * 20),  # a short written piece between copies
            ("copy", (0, 2 * unit + 11)),
            ("copy", (len(data) - 100, 100)),  # a short copy right after a long one
            ("write", _data(unit + 5, seed=6)),
            ("copy", (7, 0)),  # nothing
            ("copy", (1, len(data) - 1)),  # nearly all, last
        ]
        expected, written, copied = self._build(store, join(copy_root, "built"), src, data, pieces)
        got = store.read_bytes(join(copy_root, "built"))
        assert len(got) == len(expected) and got == expected, (
            "promise broken: a written object is its written and copied bytes, in the order given"
            f" ({len(got)} bytes, {len(expected)} expected)"
        )
        assert (written, copied) == (120 + unit + 5, len(expected) - 120 - unit - 5), (
            f"promise broken: bytes_written counts the written bytes, bytes_copied the copied ones:"
            f" {written}, {copied}"
        )

    def _build(
        self, store: BlobStore, uri: str, src: CopySource, data: bytes, pieces: list
    ) -> tuple[bytes, int, int]:
        expected = bytearray()
        with store.open_write(uri) as w:
            for kind, arg in pieces:
                if kind == "write":
                    w.write(arg)
                    expected += arg
                else:
                    start, length = arg
                    w.copy(src, start, length)
                    expected += data[start : start + length]
        return bytes(expected), w.bytes_written, w.bytes_copied

    def test_copy_onto_the_source_itself(self, store: BlobStore, copy_root: str) -> None:
        """A new object at the source's own URI, copying from the object it replaces."""
        unit = self._unit(store)
        uri = join(copy_root, "self")
        data = _data(2 * unit + 333, seed=7)
        src = self._source(store, uri, data)
        with store.open_write(uri) as w:
            w.write(b"new head")
            w.copy(src, 100, 2 * unit)
        assert store.read_bytes(uri) == b"new head" + data[100 : 100 + 2 * unit], (
            "promise broken: an object may be rewritten from ranges of itself"
        )

    def test_invisible_until_commit_and_abort_leaves_nothing(self, store: BlobStore, copy_root: str) -> None:
        unit = self._unit(store)
        data = _data(2 * unit + 1, seed=8)
        src = self._source(store, join(copy_root, "source"), data)
        uri = join(copy_root, "target")
        store.write_bytes(uri, b"previous")
        w = store.open_write(uri)
        w.copy(src, 0, 2 * unit)
        w.write(b"tail")
        assert store.read_bytes(uri) == b"previous", "promise broken: a copy is invisible until the commit"
        w.abort()
        assert store.read_bytes(uri) == b"previous", (
            "promise broken: an aborted copy leaves the previous object"
        )
        if self.supports_list:
            listed = list(store.list(copy_root))
            assert listed == sorted([uri, src.uri]), (
                f"promise broken: an aborted copy leaves nothing: {listed}"
            )

    def test_copy_from_a_replaced_source_fails_and_commits_nothing(
        self, store: BlobStore, copy_root: str
    ) -> None:
        """A source replaced (same size, other bytes) after ``copy_source`` described it: the
        write raises ``CopySourceChangedError`` (at the copy, a write or the commit) and the
        target keeps its previous object: never a mix of two versions."""
        unit = self._unit(store)
        size = 2 * unit + 99
        src = self._source(store, join(copy_root, "source"), _data(size, seed=9))
        store.write_bytes(src.uri, _data(size, seed=10))
        for start, length in ((0, 2 * unit), (5, 10)):  # a copy by the server, and one read back
            uri = join(copy_root, f"target-{length}")
            store.write_bytes(uri, b"previous")
            raised: CopySourceChangedError | None = None
            try:
                with store.open_write(uri) as w:
                    w.write(b"x" * 10)
                    w.copy(src, start, length)
                    w.write(b"y" * 10)
            except CopySourceChangedError as exc:
                raised = exc
            assert store.read_bytes(uri) == b"previous", (
                "promise broken: a copy from a replaced source commits nothing"
            )
            assert raised is not None, (
                f"promise broken: a copy from a replaced source raises CopySourceChangedError"
                f" (a copy of {length} bytes committed)"
            )
            assert "source" in str(raised), f"the message names the source object: {raised}"

    def test_copy_outside_the_source_is_refused(self, store: BlobStore, copy_root: str) -> None:
        self._unit(store)
        src = self._source(store, join(copy_root, "source"), b"0123456789")
        with store.open_write(join(copy_root, "target")) as w:
            with pytest.raises(ValueError, match="inside the object"):
                w.copy(src, 5, 6)
            with pytest.raises(ValueError, match="inside the object"):
                w.copy(src, -1, 2)
            w.write(b"ok")
        assert store.read_bytes(join(copy_root, "target")) == b"ok"


__all__ = ["CopySuite"]
