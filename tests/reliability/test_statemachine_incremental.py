"""Incremental saves over bases damaged at random, as a hypothesis rule-based state machine
(issue 32, item 5, and its "incremental bases damaged at random" actor).

A task saves a folder again and again to one destination (an attempt) or to the next
attempt's destination (its first save copies from the previous attempt's object), changing
its files between saves (rewritten with the same size or another, added, removed, renamed).
Between saves the stored objects are damaged at random, as bit rot or a bad copy would: a
byte flipped in the members of a file (unchanged or not), anywhere in the tar's members
(headers, padding, small files), in the index or the trailer; or a member dropped.

The model: every save that returns committed exactly the folder as it was (a fresh load of
its object gives that tree, whatever the damage of the object it copied from); a save may
warn, naming the damaged object it copied from, but never commits damage; an object damaged
since its save either is refused by a load with ``CorruptCheckpointError`` or, where the damage
is harmless (a gzip header's time), loads as saved; nothing is left behind (temporary files,
threads).

Backends: the file store, the memory store, and two memory stores on the kit's
``PartWriter`` with an S3-like minimum part (``tests/test_kit_copies.py``'s): one whose server
gives no checksum of a copied part (each copied part is read back, as on moto or Azure), one
whose server answers with the part's CRC-32 (as S3 does for an upload that names CRC32). The
long copies of the last two copy the tar headers between unchanged files too.

CI's budget: ``FCP_INCR_STATE_EXAMPLES`` sequences (default 10) of up to
``FCP_INCR_STATE_STEPS`` steps (default 12) per backend, under a minute in all; raise both for
a long run (its command and figures are in RELIABILITY.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import tempfile
import threading
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import flyte_checkpoint as fc
from flyte_checkpoint.errors import CorruptCheckpointError
from flyte_checkpoint.format import index as ix
from flyte_checkpoint.storage.blobstore import BlobWriter
from flyte_checkpoint.storage.registry import get_registry, store_for
from flyte_checkpoint.util.retry import RetryPolicy
from tests.test_kit_copies import PartedStore, PartedWriter

#: CI's budget, per backend; raise both to run it longer.
LONG_RUN = os.environ.get("FCP_INCR_STATE_EXAMPLES")
EXAMPLES = int(LONG_RUN or "10")
STEPS = int(os.environ.get("FCP_INCR_STATE_STEPS", "12"))
BACKENDS = ("file", "memory", "parted", "parted-crc")
KiB = 1024
ONE_TRY = RetryPolicy(attempts=1)
#: What the runs did, per backend (printed at the end; ``-s`` shows it).
TALLY: Counter[str] = Counter()


class _CrcWriter(PartedWriter):
    """A copied part is answered with its CRC-32, as S3 answers an upload that names CRC32."""

    def _copied_crc32(self, result: Any) -> int | None:
        return zlib.crc32(result[1])


class PartedCrcStore(PartedStore):
    def open_write(self, uri: str) -> BlobWriter:
        return _CrcWriter(self, uri)


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


class DamagedBases(RuleBasedStateMachine):
    """See the module docstring. ``where(name)`` makes a fresh URI of the backend."""

    where: Callable[[str], str]
    base: Path

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(dir=self.base))
        self.src = self.root / "src"
        self.src.mkdir()
        self.attempts: list[str] = [self.where("attempt-0")]
        self.saved: dict[str, dict[str, bytes]] = {}  # each object's tree, as saved
        self.damaged: set[str] = set()  # objects damaged since their save
        self.warnings = _Warnings()
        logging.getLogger("flyte_checkpoint").addHandler(self.warnings)
        self.rng = random.Random(0)

    # -- the folder -------------------------------------------------------------------------

    def _write(self, name: str, size: int, seed: int) -> None:
        path = self.src / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(random.Random(seed).randbytes(size))

    @initialize(
        sizes=st.lists(st.integers(ix.ALIGN_MIN, 700 * KiB), min_size=2, max_size=5),
        seed=st.integers(0, 2**16),
    )
    def make_tree(self, sizes: list[int], seed: int) -> None:
        for i, size in enumerate(sizes):
            self._write(f"{'w/' if i % 2 else ''}f{i}.bin", size, seed + i)
        (self.src / "state.json").write_text('{"step": 0}')
        (self.src / "small.txt").write_bytes(b"s" * 700)

    def _files(self) -> list[Path]:
        return sorted(p for p in self.src.rglob("*") if p.is_file())

    @rule(
        how=st.sampled_from(["same size", "resize", "add", "remove", "rename", "small"]),
        pick=st.integers(0, 100),
        seed=st.integers(0, 2**16),
        size=st.integers(ix.ALIGN_MIN, 700 * KiB),
    )
    def change(self, how: str, pick: int, seed: int, size: int) -> None:
        files = [p for p in self._files() if p.suffix == ".bin"]
        target = files[pick % len(files)] if files else None
        if how == "add" or target is None:
            self._write(f"n{seed}.bin", size, seed)
        elif how == "same size":
            target.write_bytes(random.Random(seed).randbytes(target.stat().st_size))
        elif how == "resize":
            target.write_bytes(random.Random(seed).randbytes(size))
        elif how == "remove" and len(files) > 1:
            target.unlink()
        elif how == "rename":
            target.rename(target.with_name(f"r{seed}.bin"))
        else:
            (self.src / "state.json").write_text(f'{{"step": {seed}}}')
        TALLY[f"change: {how}"] += 1

    # -- saves ------------------------------------------------------------------------------

    @rule(next_attempt=st.booleans())
    def save(self, next_attempt: bool) -> None:
        """Save the folder to the attempt's destination, or to the next attempt's (copying from
        this one's object on its first save)."""
        prev = None
        if next_attempt and self.attempts[-1] in self.saved:
            prev = self.attempts[-1]
            self.attempts.append(self.where(f"attempt-{len(self.attempts)}"))
        dest = self.attempts[-1]
        tree = _snapshot(self.src)
        before = len(self.warnings.messages)
        with fc.Checkpoint(dest, prev, retry=ONE_TRY) as cp:
            cp.save_sync(str(self.src))
        self.saved[dest] = tree
        self.damaged.discard(dest)
        said = self.warnings.messages[before:]
        for message in said:
            if " is damaged: " in message:
                base = dest if prev is None else prev
                assert f"the previous checkpoint {base} is damaged" in message, message
                TALLY["save: damage found, files sent instead"] += 1
            elif "is refused" in message:
                TALLY["save: index refused, everything sent"] += 1
        TALLY["save"] += 1
        self._check_loads(dest, tree)

    def _check_loads(self, uri: str, tree: dict[str, bytes], damaged: bool = False) -> None:
        """A load of ``uri`` gives ``tree``; of a ``damaged`` object, a tree that is ``tree`` or
        (damage in its first bytes: no longer gzip) the object's bytes as a payload, as the
        checkpoint contract reads bytes; else it raises (the caller catches what it allows)."""
        with fc.Checkpoint(str(self.root / f"load-{uuid.uuid4().hex}"), uri, retry=ONE_TRY) as cp:
            path = cp.load_sync()
            assert path is not None, f"{uri} loads as no checkpoint"
            if damaged and path.is_file():
                assert path.name == "payload" and path.read_bytes() == store_for(uri).read_bytes(uri)
                TALLY["load of a damaged object: its bytes, as a payload"] += 1
                return
            got = _snapshot(path)
        assert got == tree, f"{uri} does not hold the tree saved: {sorted(got)} against {sorted(tree)}"
        if damaged:
            TALLY["load of a damaged object: as saved (harmless damage)"] += 1

    # -- damage -----------------------------------------------------------------------------

    @precondition(lambda self: bool(self.saved))
    @rule(
        kind=st.sampled_from(["file member"] * 3 + ["any member", "drop member", "index", "trailer"]),
        which=st.integers(0, 100),
        where=st.floats(0, 1, exclude_max=True),
        bit=st.integers(0, 7),
        latest=st.booleans(),
        then=st.sampled_from([None, "save", "save to the next attempt"]),
    )
    def damage(self, kind: str, which: int, where: float, bit: int, latest: bool, then: str | None) -> None:
        """Damage a stored object as bit rot or a bad copy would (written back whole); ``then``
        save the folder over it, or to the next attempt's destination (copying from it)."""
        uris = [uri for uri in self.attempts if uri in self.saved]  # in order: URIs are random
        uri = uris[-1] if latest else uris[which % len(uris)]
        store = store_for(uri)
        raw = bytearray(store.read_bytes(uri))
        index = ix.read_index(store, uri) if uri not in self.damaged else None
        if index is None:  # damaged already: anywhere
            at = int(where * len(raw))
            raw[at] ^= 1 << bit
        elif kind == "file member":
            entries = [e for e in index.files.values() if e.size >= ix.ALIGN_MIN]
            entry = entries[which % len(entries)] if entries else next(iter(index.files.values()))
            m = index.members[entry.first + which % (entry.last - entry.first + 1)]
            raw[m.coff + int(where * m.clen)] ^= 1 << bit
        elif kind == "any member":
            m = index.members[which % len(index.members)]
            raw[m.coff + int(where * m.clen)] ^= 1 << bit
        elif kind == "drop member":
            m = index.members[which % len(index.members)]
            del raw[m.coff : m.coff + m.clen]
        elif kind == "index":
            raw[index.data_end + int(where * (len(raw) - ix.TRAILER_SIZE - index.data_end))] ^= 1 << bit
        else:
            raw[len(raw) - ix.TRAILER_SIZE + int(where * ix.TRAILER_SIZE)] ^= 1 << bit
        store.write_bytes(uri, bytes(raw))
        self.damaged.add(uri)
        TALLY[f"damage: {kind}"] += 1
        if then is not None and uri == self.attempts[-1]:
            self.save(next_attempt=then != "save")

    # -- the model --------------------------------------------------------------------------

    @invariant()
    def every_object_loads_as_saved_or_is_refused_as_damaged(self) -> None:
        for uri in self.attempts[-2:]:
            tree = self.saved.get(uri)
            if tree is None:
                continue
            if uri not in self.damaged:
                self._check_loads(uri, tree)
                continue
            try:
                self._check_loads(uri, tree, damaged=True)
            except CorruptCheckpointError:
                TALLY["load of a damaged object: refused"] += 1

    def teardown(self) -> None:
        logging.getLogger("flyte_checkpoint").removeHandler(self.warnings)
        for uri in self.saved:
            with contextlib.suppress(Exception):
                store_for(uri).delete(uri)
        shutil.rmtree(self.root, ignore_errors=True)


def _registered(name: str) -> Iterator[Callable[[str], str]]:
    store: Any = {"parted": PartedStore, "parted-crc": PartedCrcStore}[name]()
    scheme = f"fcp{name.replace('-', '')}"
    fc.register_store(f"{scheme}-store", (scheme,), lambda: store, f"{name}: a PartWriter on memory (tests)")
    try:
        yield lambda what: f"{scheme}://state/{uuid.uuid4().hex}/{what}"
    finally:
        fc.unregister_store(f"{scheme}-store")
        store.pool.close()


@pytest.mark.parametrize("name", BACKENDS)
def test_incremental_saves_never_commit_a_damaged_base(name: str, tmp_path: Path) -> None:
    """See the module docstring: ``FCP_INCR_STATE_EXAMPLES`` sequences of up to
    ``FCP_INCR_STATE_STEPS`` steps on ``name``."""
    base = tmp_path / "trees"
    base.mkdir()
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    with contextlib.ExitStack() as stack:
        if name == "file":
            where: Callable[[str], str] = lambda what: str(store_dir / uuid.uuid4().hex / what)  # noqa: E731
        elif name == "memory":
            where = lambda what: f"memory://fcp-incr-state/{uuid.uuid4().hex}/{what}"  # noqa: E731
        else:
            where = stack.enter_context(contextlib.contextmanager(_registered)(name))
        known = set(threading.enumerate())

        class Checked(DamagedBases):
            def teardown(self) -> None:
                super().teardown()
                get_registry().close()
                for t in threading.enumerate():
                    if t not in known and t.name.startswith("fcp-"):
                        t.join(timeout=60)
                left = [t.name for t in threading.enumerate() if t not in known and t.name.startswith("fcp-")]
                assert left == [], f"threads left running: {left}"
                tmp = [p for p in store_dir.rglob("*") if ".fcp-tmp-" in p.name]
                assert tmp == [], f"temporary files left: {tmp}"

        Checked.where = staticmethod(where)  # type: ignore[assignment]
        Checked.base = base
        TALLY.clear()
        run_state_machine_as_test(
            Checked,
            settings=settings(
                max_examples=EXAMPLES,
                stateful_step_count=STEPS,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                derandomize=LONG_RUN is None,  # CI: the same sequences every run; longer runs: new ones
            ),
        )
    print(
        f"\nincremental state machine on {name}: " + ", ".join(f"{k} {v}" for k, v in sorted(TALLY.items()))
    )
    assert TALLY["save"] > 0
