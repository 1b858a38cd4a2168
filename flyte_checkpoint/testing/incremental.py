"""The incremental-save suites: checked copies, and folder saves on a network store that copies
on the server.

Mix :class:`IncrementalSuite` into a test class of a store that declares ``copy_limits``,
with the fixtures ``store_recipe`` (as for :class:`~flyte_checkpoint.testing.FaultSuite`) and
``store_root`` (a fresh prefix the registry resolves to a store of the same server, configured
by the environment: its credentials). The suite points ``store_root``'s URIs at a
:class:`~flyte_checkpoint.testing.FaultProxy` (``configure_store(..., endpoint_url=proxy.url)``)
that counts the bytes sent, and looks at the server with a store built by the recipe on it.

Mix :class:`CopyCheckSuite` (fixtures ``store`` and ``store_root``, as for
:class:`~flyte_checkpoint.testing.CopySuite`) into the test class of every store that declares
``copy_limits``: a copy given ``expect`` commits nothing, and raises ``CopyDamagedError`` naming
exactly the damaged pieces, when the source's bytes are not those (issue 32, item 5).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..errors import CopyDamagedError, CopySourceChangedError, TransientError
from ..storage.blobstore import BlobStore, CopyCheck
from ..storage.kit.checksums import crc32
from ..uri import join, redact
from .faultproxy import HANG_GUARD, FaultProxy
from .recipe import StoreRecipe
from .suite import _data, check_empty_root

MiB = 1024 * 1024

CHILD = r"""
import sys
import flyte_checkpoint as fc
endpoint, prefix, dest, src, part_size = sys.argv[1:6]
fc.configure_store(prefix, endpoint_url=endpoint, part_size=part_size, max_concurrency=1, request_attempts=1)
fc.Checkpoint(dest).save_sync(src)
print("DONE", flush=True)
"""


def _blob(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def tree_of(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` by relative name, with its bytes."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


class IncrementalSuite:
    """Saves of a folder with files unchanged, changed, renamed and removed: only the changed
    bytes go up, the object is the tree, a replaced source and a killed save commit nothing."""

    #: Files in the tree, and the size of each (a copy must be worth it: above ``min_part``).
    files: int = 5
    file_size: int = 3 * MiB
    #: The store's part size during the tests (``configure_store``'s ``part_size``).
    part_size: str = "1MiB"
    #: What a save sends besides file data: request lines and headers, the index, small files.
    overhead: int = 256 * 1024
    #: Text the CopySourceChangedError of a source replaced mid-save holds (the server's
    #: refusal; empty where the server ignores the condition and a check of the writer finds it).
    replaced_detail: str = ""

    def pieces_left(self, server: BlobStore, uri: str) -> list[Any]:
        """Uncommitted server-side pieces of ``uri`` (multipart uploads, staged blocks)."""
        return []

    #: Whether an aborted save removes its pieces (else the next commit does).
    abort_removes_pieces: bool = True

    # -- fixtures ---------------------------------------------------------------------------

    @pytest.fixture
    def proxied(self, store_recipe: StoreRecipe, store_root: str) -> Iterator[tuple[FaultProxy, str]]:
        import flyte_checkpoint as fc

        prefix = store_root.rstrip("/") + "/"
        assert store_recipe.upstream is not None, "IncrementalSuite needs a store with a server"
        with FaultProxy(store_recipe.upstream) as proxy:
            fc.configure_store(prefix, endpoint_url=proxy.url, part_size=self.part_size, max_concurrency=2)
            try:
                yield proxy, prefix
            finally:
                fc.configure_store(prefix)

    @pytest.fixture
    def server(self, store_recipe: StoreRecipe) -> Iterator[BlobStore]:
        assert store_recipe.upstream is not None
        store = store_recipe.build(store_recipe.upstream)
        yield store
        store.close()

    # -- helpers ----------------------------------------------------------------------------

    def make_tree(self, root: Path) -> Path:
        (root / "shards").mkdir(parents=True)
        for i in range(self.files):
            (root / "shards" / f"s{i}.bin").write_bytes(_blob(self.file_size + i, seed=i))
        (root / "state.json").write_text('{"step": 1}')
        return root

    @staticmethod
    def sent(proxy: FaultProxy) -> int:
        return sum(r.up for r in proxy.records)

    def save(self, proxy: FaultProxy, dest: str, src: Path, prev: str | None = None, **kw: Any) -> int:
        """Save ``src`` to ``dest``; the bytes that went up through the proxy."""
        import flyte_checkpoint as fc

        before = self.sent(proxy)
        with fc.Checkpoint(dest, prev, **kw) as cp:
            cp.save_sync(str(src))
        return self.sent(proxy) - before

    @staticmethod
    def restored(dest: str, tmp_path: Path) -> dict[str, bytes]:
        import flyte_checkpoint as fc

        with fc.Checkpoint(str(tmp_path / f"n-{uuid.uuid4().hex}"), dest) as cp:
            path = cp.load_sync()
            assert path is not None, f"promise broken: {dest} loads as no checkpoint"
            return tree_of(path)

    # -- tests ------------------------------------------------------------------------------

    def test_incremental_saves_send_only_what_changed(self, proxied, server, tmp_path) -> None:
        from ..storage.registry import store_for

        proxy, prefix = proxied
        limits = store_for(prefix).copy_limits
        assert limits is not None, "promise broken: IncrementalSuite is for stores with copy_limits"
        src = self.make_tree(tmp_path / "src")
        dest = prefix + "ckpt.tgz"
        full = self.save(proxy, dest, src)
        assert full > self.files * self.file_size
        unchanged = self.save(proxy, dest, src)
        assert unchanged < self.overhead, f"promise broken: an unchanged tree sent {unchanged} bytes"
        assert self.restored(dest, tmp_path) == tree_of(src)

        (src / "shards" / "s2.bin").write_bytes(_blob(self.file_size + 2, seed=42))  # one file changed
        one = self.save(proxy, dest, src)
        assert self.file_size < one < self.file_size + 2 * self.overhead, (
            f"promise broken: one changed file of {self.file_size} bytes: {one} bytes sent"
        )
        assert self.restored(dest, tmp_path) == tree_of(src)

        (src / "shards" / "s4.bin").rename(src / "shards" / "moved.bin")  # renamed, and one removed
        (src / "shards" / "s0.bin").unlink()
        moved = self.save(proxy, dest, src)
        # At most a piece of min_part read back and sent per new header (S3's 5 MiB parts).
        assert moved < self.overhead + 2 * limits.min_part, f"a rename and a removal sent {moved} bytes"
        assert self.restored(dest, tmp_path) == tree_of(src)

        nxt = prefix + "attempt-1.tgz"  # an attempt's first save, from the previous attempt's object
        first = self.save(proxy, nxt, src, dest)
        assert first < self.overhead, f"promise broken: a first save from the previous sent {first}"
        assert self.restored(nxt, tmp_path) == tree_of(src)
        assert self.pieces_left(server, dest) == [] and self.pieces_left(server, nxt) == []

    def test_a_damaged_base_is_not_copied_where_it_is_damaged(
        self, proxied, server, tmp_path, caplog
    ) -> None:
        """A byte flipped in the stored members of an unchanged file of the previous object
        (bit rot, a bad copy): the save does not copy that file's members (its copies are checked
        against the CRC-32 the index records of their stored bytes), sends it, warns naming the
        object and the file, and commits an object that loads; the next save copies it again."""
        import logging

        from ..format.index import read_index

        proxy, prefix = proxied
        src = self.make_tree(tmp_path / "src")
        dest = prefix + "ckpt.tgz"
        self.save(proxy, dest, src)
        index = read_index(server, dest)
        assert index is not None
        member = index.members[index.files["shards/s1.bin"].first]
        raw = bytearray(server.read_bytes(dest))
        raw[member.coff + member.clen // 2] ^= 0x10
        server.write_bytes(dest, bytes(raw))
        (src / "state.json").write_text('{"step": 2}')
        with caplog.at_level(logging.WARNING, logger="flyte_checkpoint"):
            sent = self.save(proxy, dest, src)
        assert self.restored(dest, tmp_path) == tree_of(src), "promise broken: damaged bytes were copied"
        warned = f"the previous checkpoint {redact(dest)} is damaged: the stored bytes of shards/s1.bin"
        assert warned in caplog.text, caplog.text
        assert sent > self.file_size, f"the damaged file was not sent ({sent} bytes went up)"
        assert self.pieces_left(server, dest) == [] or not self.abort_removes_pieces
        again = self.save(proxy, dest, src)
        assert again < self.overhead, f"promise broken: the save after it sent {again} bytes"
        assert self.restored(dest, tmp_path) == tree_of(src)

    def test_a_source_replaced_mid_save_fails_and_the_retry_copies_from_the_new_one(
        self, proxied, server, tmp_path
    ) -> None:
        """The object copied from is replaced once the save has planned against it: the try
        fails with CopySourceChangedError and commits nothing; with retries, the next try plans
        against the new object and the result is the tree saved."""
        from ..storage.registry import store_for
        from ..util.retry import RetryPolicy

        proxy, prefix = proxied
        src = self.make_tree(tmp_path / "src")
        dest = prefix + "ckpt.tgz"
        self.save(proxy, dest, src)
        bodies = []
        for seed in (7, 8):
            other = self.make_tree(tmp_path / f"other-{seed}")
            (other / "shards" / "s1.bin").write_bytes(_blob(self.file_size + 1, seed=seed))
            self.save(proxy, prefix + f"other-{seed}.tgz", other)
            bodies.append(store_for(dest).read_bytes(prefix + f"other-{seed}.tgz"))

        # The save's own store (the environment's timeouts: a replacement of tens of MiB
        # outlasts the recipe's short ones on a busy machine) replaces the object.
        store = store_for(dest)
        real_copy_source = store.copy_source
        looks: list[str] = []
        replace_with: list[bytes] = []

        def replaced_after_planning(uri: str) -> Any:
            found = real_copy_source(uri)
            looks.append(uri)
            if len(looks) == 2 and replace_with:  # the planner's second look, once it read the index
                store.write_bytes(dest, replace_with.pop())
            return found  # as if the replacement came a moment later

        store.copy_source = replaced_after_planning  # type: ignore[method-assign]
        try:
            replace_with.append(bodies[0])
            with pytest.raises(TransientError, match="replaced or removed while a save copied") as info:
                self.save(proxy, dest, src, retry=RetryPolicy(attempts=1))
            assert isinstance(info.value.__cause__, CopySourceChangedError)  # the retry layer's wrapping
            assert self.replaced_detail in str(info.value.__cause__)
            assert store.read_bytes(dest) == bodies[0], "promise broken: the failed save committed"
            if self.abort_removes_pieces:
                assert self.pieces_left(server, dest) == []
            looks.clear()
            replace_with.append(bodies[1])
            self.save(proxy, dest, src)  # default retries: the second try copies from what is there now
            assert len(looks) >= 4, "the save was tried again, planning anew"
        finally:
            del store.copy_source
        assert self.restored(dest, tmp_path) == tree_of(src)
        assert self.pieces_left(server, dest) == []

    def test_killed_incremental_save_leaves_the_previous_object_whole(
        self, proxied, server, tmp_path
    ) -> None:
        """A child saving incrementally (copies, and one changed file being uploaded) is
        SIGKILLed once the upload stalls at the proxy: the previous object stays, byte for
        byte, and nothing else is listed."""
        proxy, prefix = proxied
        src = self.make_tree(tmp_path / "src")
        dest = prefix + "ckpt.tgz"
        self.save(proxy, dest, src)
        before = server.read_bytes(dest)
        (src / "shards" / "s3.bin").write_bytes(_blob(self.file_size + 3, seed=33))
        proxy.cut("up", self.file_size // 2, action="stall")  # inside the changed file (counted from now)
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, proxy.url, prefix, dest, str(src), self.part_size],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )
        try:
            proxy.wait_for(lambda: proxy.fired > 0 or child.poll() is not None, what="the upload stalled")
            assert proxy.fired, f"the child ended first: {child.communicate()[1][-2000:]!r}"
        finally:
            if child.poll() is None:
                child.send_signal(signal.SIGKILL)
            child.wait(HANG_GUARD)
            child.stdout.close()  # type: ignore[union-attr]
            child.stderr.close()  # type: ignore[union-attr]
        assert server.read_bytes(dest) == before, "promise broken: a killed save changed the object"
        # nothing else but the first save's history (its manifest and summary: docs/history.md)
        assert [u for u in server.list(prefix) if ".fcp-history/" not in u] == [dest]


def checks_of(data: bytes, start: int, length: int, piece: int) -> CopyCheck:
    """The :class:`~flyte_checkpoint.storage.blobstore.CopyCheck` of bytes ``start .. start +
    length`` of ``data``, in pieces of ``piece`` bytes (the last shorter)."""
    pieces = []
    for at in range(start, start + length, piece):
        chunk = data[at : min(at + piece, start + length)]
        pieces.append((len(chunk), crc32().compute(chunk)))
    return CopyCheck(tuple(pieces))


class CopyCheckSuite:
    """Copies given ``expect``: from a source whose bytes are those, the object commits; from
    one damaged since (a byte flipped), nothing commits and ``CopyDamagedError`` names each
    damaged piece, whether the server copied it or the writer read and sent it."""

    def _unit(self, store: BlobStore) -> int:
        limits = store.copy_limits
        assert limits is not None, "promise broken: CopyCheckSuite is for stores that declare copy_limits"
        return max(limits.min_part, 1024 * 1024)

    def _objects(self, store: BlobStore, store_root: str, flip: int | None) -> tuple[str, bytes, Any]:
        """A source object (``flip``: the offset of a byte flipped after its checks were taken),
        its bytes as checked, and its copy source."""
        unit = self._unit(store)
        check_empty_root(store, store_root)
        data = _data(3 * unit + 4097, seed=32)
        uri = join(store_root, "checked-source")
        stored = bytearray(data)
        if flip is not None:
            stored[flip] ^= 0x10
        store.write_bytes(uri, bytes(stored))
        return uri, data, store.copy_source(uri)

    def _copy(self, store: BlobStore, dest: str, source: Any, data: bytes) -> None:
        """Written bytes, then a long copy (the server's; on a store with a minimum piece, its
        first bytes read and sent to fill the part before), then a short one (read and sent)."""
        unit = self._unit(store)
        piece = unit // 3 + 17
        with store.open_write(dest) as w:
            w.write(b"head" * 100)
            w.copy(source, 100, 2 * unit + 5, checks_of(data, 100, 2 * unit + 5, piece))
            w.copy(source, len(data) - 3000, 3000, checks_of(data, len(data) - 3000, 3000, 1000))

    def test_checked_copies_of_an_intact_source_commit(self, store: BlobStore, store_root: str) -> None:
        _, data, source = self._objects(store, store_root, None)
        dest = join(store_root, "checked-dest")
        self._copy(store, dest, source, data)
        unit = self._unit(store)
        expected = b"head" * 100 + data[100 : 100 + 2 * unit + 5] + data[-3000:]
        assert store.read_bytes(dest) == expected, "promise broken: checked copies commit the bytes copied"

    @pytest.mark.parametrize("where", ["copied", "read"])
    def test_a_checked_copy_of_a_damaged_source_commits_nothing(
        self, store: BlobStore, store_root: str, where: str
    ) -> None:
        """A byte flipped in the long copy's middle (which the server copies on every store), or
        in the short copy (which a store with a minimum piece reads and sends): the commit raises
        CopyDamagedError naming that piece of the source only, and the object stays as it was."""
        unit = self._unit(store)
        piece = unit // 3 + 17
        flip = 100 + 4 * piece + 9 if where == "copied" else 3 * unit + 4097 - 1500
        uri, data, source = self._objects(store, store_root, flip)
        dest = join(store_root, "checked-dest")
        store.write_bytes(dest, b"previous")
        with pytest.raises(CopyDamagedError) as info:
            self._copy(store, dest, source, data)
        damaged = (100 + 4 * piece, piece) if where == "copied" else (len(data) - 2000, 1000)
        found = [(s.uri, start, length) for s, start, length in info.value.damaged]
        assert found == [(uri, *damaged)], f"promise broken: the damaged piece is named, alone: {found}"
        assert redact(uri) in str(info.value) and "committed nothing" in str(info.value)
        assert store.read_bytes(dest) == b"previous", "promise broken: a damaged copy committed"


__all__ = ["CopyCheckSuite", "IncrementalSuite", "checks_of", "tree_of"]
