"""Readers racing commits (issue 32): loads held between their reads while saves commit.

A hypothesis rule-based state machine with two kinds of actors on one destination URI: savers,
which commit a folder (names from a small pool, sizes from empty to a few MiB, so that a cloud
stream is many ranged reads), a payload, or remove the object; and readers, each a load in a
thread of its own: a full load, a partial load of some names, ``load_file`` of one name, or
``inspect``. A reader runs through a spy store of its own, whose hook holds it at the ``n``-th
call of one kind (``read_range``, ``open_read``, a stream's ``read``): the rule that starts it
returns once the reader reports that it is held (or that it finished first), so the
interleaving is the sequence of rules, whatever the machine's speed. Commits run while readers
are held; a later rule releases a reader and waits for its end.

The model: the object's history of versions. A reader that started at version ``s`` and was
released at version ``e`` gives exactly what version ``s`` holds (a tree whole, a payload, "no
checkpoint" for a removed object, ``NotFoundError`` for names it lacks), or, where ``e`` is not
``s``, what version ``e`` holds, or a transient error (``ObjectReplacedError``): never
``CorruptCheckpointError``, never a mix. On the stores that pin locally (file, memory) it is
exactly version ``s`` (the load reads the file or bytes it started with), but where version
``s`` lacks what was asked (a name, or a folder where it was a payload): a failure of a read of
an object that changed since is taken for a race and the load is retried, which gives version
``e``. After each sequence a fresh load gives the last version, and no thread or workspace is
left.

CI's budget: ``FCP_READERS_EXAMPLES`` sequences of up to ``FCP_READERS_STEPS`` steps per backend
(file, memory with the parallel inflate forced on, S3 on moto, GCS on gcp-storage-emulator,
Azure on Azurite). A longer run::

    FCP_READERS_EXAMPLES=200 FCP_READERS_STEPS=30 .venv/bin/python -m pytest \\
        tests/reliability/test_statemachine_readers.py -q -s
"""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import flyte_checkpoint as fc
from flyte_checkpoint.errors import NotFoundError, ObjectReplacedError, TransientError
from flyte_checkpoint.format import inflate
from flyte_checkpoint.storage.registry import store_for
from flyte_checkpoint.uri import scheme_of
from flyte_checkpoint.util.retry import RetryPolicy
from tests.reliability.backends import backend_pool  # noqa: F401
from tests.reliability.gates import HANG, HoldAt
from tests.spystore import spying

LONG_RUN = os.environ.get("FCP_READERS_EXAMPLES")
EXAMPLES = int(LONG_RUN or "4")
STEPS = int(os.environ.get("FCP_READERS_STEPS", "12"))
BACKEND_NAMES = ("file", "memory", "s3", "gcs", "azure")
#: The stores whose pin keeps the version a load started with readable (the load never fails).
PINS_LOCALLY = ("file", "memory")
#: A load retried at once (the tests hold no commit while a released reader runs).
RETRY = RetryPolicy(attempts=3, base_delay=0)
MiB = 1024 * 1024
NAMES = ("a.bin", "b.bin", "dir/c.bin", "dir/d.txt", "e\\f.bin")
SIZES = st.sampled_from([0, 17, 5_000, 70_000, 300_000, MiB + 3])
#: Where a reader of each kind is held: the ``nth`` call of ``op`` (a reader that finishes first
#: is a load with no race). Partial loads: 1 the trailer, 2 the index, 3 the members (with an
#: index), or the stream (without); full loads: the trailer, the index (parallel inflate), the
#: stream; inspect: the stream, then the index.
HOLDS = {
    "full": [("read_range", 1), ("read_range", 2), ("open_read", 1), ("read", 2)],
    "members": [("read_range", 2), ("read_range", 3), ("open_read", 1)],
    "file": [("read_range", 2), ("read_range", 3), ("open_read", 1)],
    "inspect": [("read", 1), ("read", 3), ("read_range", 1)],
}
#: A load: its kind and where it is held.
Load = tuple[str, tuple[str, int]]
LOADS = st.sampled_from(sorted(HOLDS)).flatmap(
    lambda kind: st.tuples(st.just(kind), st.sampled_from(HOLDS[kind]))
)
#: The names a partial load asks for.
ASKED = st.lists(st.sampled_from([*NAMES, "dir"]), min_size=1, max_size=3)
#: A folder saved: names and sizes.
TREES = st.lists(st.tuples(st.sampled_from(NAMES), SIZES), min_size=1, max_size=4)
TALLY: Counter[str] = Counter()


@dataclass(frozen=True)
class Version:
    """What the object holds: a tree (``files``: name -> bytes), a payload, or nothing."""

    kind: str  # "tree" | "payload" | "absent"
    files: tuple[tuple[str, bytes], ...] = ()
    payload: bytes = b""

    def expect(self, load: str, names: tuple[str, ...]) -> tuple:
        """What a load of ``load`` kind of ``names`` gives from this version."""
        if self.kind == "absent":
            return ("none",)
        if load == "inspect":
            return ("tar.gz", len(self.files)) if self.kind == "tree" else ("raw", 0)
        if self.kind == "payload":
            return ("payload", self.payload) if load == "full" else ("notfound",)
        files = dict(self.files)
        if load == "full":
            return ("files", tuple(sorted(files.items())))
        if load == "file":
            return ("one", files[names[0]]) if names[0] in files else ("notfound",)
        chosen = {k: v for k, v in files.items() if any(k == n or k.startswith(n + "/") for n in names)}
        if any(not any(k == n or k.startswith(n + "/") for k in files) for n in names):
            return ("notfound",)
        return ("files", tuple(sorted(chosen.items())))


def read_tree(root: Path) -> tuple[tuple[str, bytes], ...]:
    return tuple(sorted((str(p.relative_to(root)), p.read_bytes()) for p in root.rglob("*") if p.is_file()))


@dataclass
class Reader:
    number: int
    load: str
    names: tuple[str, ...]
    start: int  # the history's index when it started
    hold: HoldAt
    thread: threading.Thread
    stack: contextlib.ExitStack
    outcome: list[Any] = field(default_factory=list)


class Readers(RuleBasedStateMachine):
    """See the module docstring. Class attributes set per backend: ``backend``, ``where``
    (a fresh URI), ``base`` (a folder for trees)."""

    backend: str = "file"
    base: Path = Path(tempfile.gettempdir())

    @staticmethod
    def where() -> str:
        raise NotImplementedError

    readers = Bundle("readers")

    def __init__(self) -> None:
        super().__init__()
        self.uri = self.where()
        self.history: list[Version] = [Version("absent")]
        self.live: list[Reader] = []
        self.count = 0
        self.folder = self.base / uuid.uuid4().hex
        self.folder.mkdir()

    # -- savers ---------------------------------------------------------------------------

    @initialize(chosen=TREES, seed=st.integers(0, 2**32))
    def first_save(self, chosen: list[tuple[str, int]], seed: int) -> None:
        self._commit_tree(chosen, seed)

    @rule(
        what=st.sampled_from(["tree", "tree", "tree", "payload", "remove"]),
        chosen=TREES,
        seed=st.integers(0, 2**32),
    )
    def commit(self, what: str, chosen: list[tuple[str, int]], seed: int) -> None:
        """A save of a folder or of bytes, or the object's removal (three in five: a folder)."""
        if what == "tree":
            self._commit_tree(chosen, seed)
        elif what == "payload":
            data = b"P" + random.Random(seed).randbytes(chosen[0][1])  # "P": never taken for gzip or tar
            fc.Checkpoint(self.uri).save_sync(data)
            self.history.append(Version("payload", payload=data))
        else:
            store_for(self.uri).delete(self.uri)
            self.history.append(Version("absent"))
        TALLY[f"commit {what}"] += 1

    def _commit_tree(self, chosen: list[tuple[str, int]], seed: int) -> None:
        rng = random.Random(seed)
        files = {name: rng.randbytes(size) for name, size in chosen}
        self.count += 1
        src = self.folder / f"v{self.count}"
        for name, data in files.items():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_bytes(data)
        fc.Checkpoint(self.uri).save_sync(str(src))
        self.history.append(Version("tree", tuple(sorted(files.items()))))

    # -- readers --------------------------------------------------------------------------

    @precondition(lambda self: len(self.live) < 3)
    @rule(
        target=readers, load=LOADS, names=st.lists(st.sampled_from([*NAMES, "dir"]), min_size=1, max_size=3)
    )
    def start_a_reader(self, load: tuple[str, tuple[str, int]], names: list[str]) -> Reader:
        """A load that runs until its hold (or its end), and stays held while other rules run."""
        return self._start(load[0], tuple(dict.fromkeys(names)), *load[1])

    @rule(
        load=LOADS,
        names=ASKED,
        what=st.sampled_from(["tree", "tree", "tree", "payload", "remove"]),
        chosen=TREES,
        seed=st.integers(0, 2**32),
    )
    def race(self, load: Load, names: list[str], what: str, chosen: list[tuple[str, int]], seed: int) -> None:
        """One reader held, one commit, the reader released: a race in every such step."""
        reader = self._start(load[0], tuple(dict.fromkeys(names)), *load[1])
        self.commit(what, chosen, seed)
        self._release(reader)

    def _start(self, load: str, names: tuple[str, ...], op: str, nth: int) -> Reader:
        self.count += 1
        stopped = threading.Event()
        hold = HoldAt(op, nth, stopped)
        stack = contextlib.ExitStack()
        spy = stack.enter_context(spying(self.target(), hook=hold, scheme=f"rd{self.count}"))
        uri = spy.uri_for(self.uri)
        chosen = names[:1] if load == "file" else names
        reader = Reader(self.count, load, chosen, len(self.history) - 1, hold, None, stack)  # type: ignore[arg-type]
        name = f"reader-{self.count}"
        reader.thread = threading.Thread(target=self._run, args=(reader, uri, stopped), name=name)
        reader.thread.start()
        assert stopped.wait(HANG), "a reader neither reached its hold nor finished"
        self.live.append(reader)
        TALLY[f"reader {load} {'held' if hold.reached.is_set() else 'done before its hold'}"] += 1
        return reader

    def _run(self, reader: Reader, uri: str, stopped: threading.Event) -> None:
        try:
            reader.outcome.append(self._load(reader, uri))
        except BaseException as exc:  # judged by the release
            reader.outcome.append(exc)
        finally:
            stopped.set()

    def _load(self, reader: Reader, uri: str) -> tuple:
        ws = str(self.folder / f"ws-{reader.number}")
        try:
            if reader.load == "inspect":
                from flyte_checkpoint.format.inspection import inspect_uri

                info = RETRY.call(lambda: inspect_uri(uri), "inspect")
                return (info.format, info.files) if info.format == "tar.gz" else ("raw", 0)
            with fc.Checkpoint(ws, uri, retry=RETRY) as cp:
                if reader.load == "file":
                    got = cp.load_file_sync(reader.names[0], self.folder / f"one-{reader.number}")
                    return ("none",) if got is None else ("one", got.read_bytes())
                path = cp.load_sync() if reader.load == "full" else cp.load_sync(members=reader.names)
                if path is None:
                    return ("none",)
                if path.name == "payload":
                    return ("payload", path.read_bytes())
                return ("files", read_tree(path))
        except NotFoundError as exc:
            if type(exc) is not NotFoundError:  # a missing bucket is no outcome of a race
                raise
            return ("none",) if "no checkpoint object" in str(exc) else ("notfound",)

    @rule(reader=consumes(readers))
    def release_a_reader(self, reader: Reader) -> None:
        self._release(reader)

    def _release(self, reader: Reader) -> None:
        reader.hold.release.set()
        reader.thread.join(HANG)
        assert not reader.thread.is_alive(), "a released reader hangs"
        reader.stack.close()
        self.live.remove(reader)
        got = reader.outcome[0]
        end = len(self.history) - 1
        old = self.history[reader.start].expect(reader.load, reader.names)
        new = self.history[end].expect(reader.load, reader.names)
        if isinstance(got, BaseException):
            assert isinstance(got, (ObjectReplacedError, TransientError)), (
                f"reader {reader.load} {reader.names} held at {reader.hold!r}:"
                f" only a transient error may come of a race, not {got!r}"
            )
            assert end != reader.start, f"nothing was committed while it was held, yet {got!r}"
            TALLY["released: transient"] += 1
            return
        raced = reader.hold.reached.is_set() and end != reader.start
        if not raced:
            assert got == old, self._said(
                reader, got, old, new, "the version it read, no other was committed"
            )
        elif self.backend in PINS_LOCALLY and old != ("notfound",):
            assert got == old, self._said(reader, got, old, new, "exactly the version it started with")
        else:
            assert got in (old, new), self._said(
                reader, got, old, new, "the old version or the new one, whole"
            )
        TALLY[f"released: {'old' if got == old else 'new'}{' (raced)' if raced else ''}"] += 1

    def _said(self, reader: Reader, got: Any, old: tuple, new: tuple, what: str) -> str:
        def short(x: Any) -> str:
            if isinstance(x, tuple) and x and x[0] == "files":
                return f"files {[(k, len(v)) for k, v in x[1]]}"
            return repr(x)[:120]

        return (
            f"reader {reader.load} {reader.names} held at {reader.hold!r}"
            f" (reached: {reader.hold.reached.is_set()}) must give {what}; got {short(got)},"
            f" old {short(old)}, new {short(new)}"
        )

    def target(self) -> str:
        return scheme_of(self.uri)

    @invariant()
    def at_most_three_readers_are_held(self) -> None:
        assert len(self.live) <= 3

    def teardown(self) -> None:
        for reader in list(self.live):
            self._release(reader)
        final = self.history[-1].expect("full", ())
        with fc.Checkpoint(str(self.folder / "final"), self.uri) as cp:
            path = cp.load_sync()
            got = (
                ("none",)
                if path is None
                else ("payload", path.read_bytes())
                if path.name == "payload"
                else ("files", read_tree(path))
            )
        assert got == final, "a fresh load does not give the last version committed"
        if self.history[-1].kind != "absent":
            store_for(self.uri).delete(self.uri)


def _threads_left(known: set[threading.Thread]) -> list[threading.Thread]:
    for t in threading.enumerate():
        if t not in known and t.name.startswith("reader-"):
            t.join(timeout=60)
    return [
        t for t in threading.enumerate() if t not in known and t.name.startswith("reader-") and t.is_alive()
    ]


@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_readers_racing_commits_read_one_whole_version(name, backend_pool, tmp_path, monkeypatch):  # noqa: F811
    """See the module docstring: ``FCP_READERS_EXAMPLES`` sequences of up to
    ``FCP_READERS_STEPS`` steps on ``name``'s backend."""
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))  # workspaces: only ours in it
    if name == "memory":  # the parallel inflate reads its trailer, its index, then the stream
        monkeypatch.setattr(inflate, "PARALLEL_MIN", 0)
        monkeypatch.setenv(inflate.THREADS_ENV, "2")
    base = tmp_path / "trees"
    base.mkdir()
    with contextlib.ExitStack() as stack:
        if name == "memory":

            def where() -> str:
                return f"memory://fcp-readers/{uuid.uuid4().hex}/ckpt"
        else:
            server = backend_pool.get(name)
            stack.enter_context(server.activated())
            where = server.fresh
        known = set(threading.enumerate())
        machine = type(
            f"Readers_{name}", (Readers,), {"where": staticmethod(where), "base": base, "backend": name}
        )

        class Checked(machine):  # type: ignore[misc, valid-type]
            def teardown(self) -> None:
                super().teardown()
                assert _threads_left(known) == [], "reader threads left running"
                assert sorted(private_tmp.glob("flyte-checkpoint-ws-*")) == [], "workspaces left"

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
    print(f"\nreaders on {name}: " + ", ".join(f"{k} {v}" for k, v in sorted(TALLY.items())))
