"""Two savers of one destination never share a generation, and the object there is listed newest
with its own manifest (issue 37's leftovers, gap 2).

Each saver commits its bytes, then records its manifest (``record_save``: a listing, then a
conditional create of the next generation's manifest). The test holds each saver at that
create (a gate in the store it is handed) and lets them go in a chosen order, so every
interleaving is forced by events, not by time; on ``memory://``, ``file://`` and S3 (moto's
server; CI=true fails where it cannot start). Then it counts: the manifests written, their
generations, and what ``fc.history`` lists first.
"""

from __future__ import annotations

import sys
import threading
import zlib
from pathlib import Path
from typing import Any

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.history.manifest import read_manifests
from flyte_checkpoint.history.recording import SaveRecord, digest_of_bytes, record_save
from flyte_checkpoint.storage.blobstore import noting_commits
from flyte_checkpoint.storage.registry import store_for
from tests.childlines import Child
from tests.reliability.backends import backend_pool  # noqa: F401
from tests.reliability.gates import HANG

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=["memory", "file", "s3", "gcs", "azure"])
def root(request, backend_pool, tmp_path):  # noqa: F811
    if request.param == "memory":
        yield f"memory://race-{id(request)}"
        return
    backend = backend_pool.get(request.param)
    with backend.activated():
        yield backend.fresh("run")


class Held:
    """``inner``, except that a manifest's create (``write_bytes_if_absent``) waits at a gate:
    :attr:`at` is set when the saver reaches it, and it goes on once :attr:`go` is set."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.at = threading.Event()
        self.go = threading.Event()
        self.creates: list[tuple[str, bool]] = []

    def write_bytes_if_absent(self, uri: str, data: bytes) -> bool:
        self.at.set()
        assert self.go.wait(HANG), "the test never let the saver go"
        created = self.inner.write_bytes_if_absent(uri, data)
        self.creates.append((uri.rsplit("/", 1)[-1], created))
        return created

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Saver:
    """One saver of ``dest``: records the manifest of what it committed, in a thread."""

    def __init__(self, dest: str, data: bytes, step: int) -> None:
        self.store = Held(store_for(dest))
        self.record = SaveRecord(dest, step=step, digest=digest_of_bytes(data), size=len(data))
        self.data = data
        self.result: list[Any] = []
        self.thread = threading.Thread(target=self._record, daemon=True)

    def commit(self) -> None:
        with noting_commits() as seen:  # as a save does: the version its commit gave
            self.store.inner.write_bytes(self.record.dest, self.data)
        self.record.version = seen[self.record.dest]

    def start(self) -> None:
        self.thread.start()
        assert self.store.at.wait(HANG), "the saver never reached its manifest's create"

    def run(self) -> None:
        """Record, without waiting at the create (a saver that writes no manifest has none)."""
        self.store.go.set()
        self._record()

    def release(self) -> None:
        self.store.go.set()
        self.thread.join(HANG)
        assert not self.thread.is_alive()

    def _record(self) -> None:
        self.result.append(record_save(self.store, self.record))  # type: ignore[arg-type]


def _base(dest: str) -> None:
    fc.Checkpoint(dest).save_sync(b"generation zero", step=0)  # generation 0, described


@pytest.mark.parametrize("first", ["A", "B"])
def test_a_saver_overwritten_before_its_manifest_writes_none_and_the_newer_one_is_described(root, first):
    """A commits and lists; B commits over it and lists: both would take generation 1. Whoever
    creates it first, B's manifest (of the object there) ends as the one that names it, and
    A's (of bytes no longer stored) is not left behind. Before: A's write replaced B's, and the
    object was listed without a manifest (its step lost)."""
    dest = root + "/0/ckpt"
    _base(dest)
    a, b = Saver(dest, b"state of A", 1), Saver(dest, b"state of B", 2)  # as many bytes: versions decide
    a.commit()
    a.start()  # A has listed its own object: generation 1 is next
    b.commit()
    b.start()  # B has listed its own object: generation 1 is next too
    for saver in (a, b) if first == "A" else (b, a):
        saver.release()
    assert a.result == [None], a.result
    [mb] = b.result
    assert mb is not None and mb.generation == 1 and mb.step == 2
    store = store_for(dest)
    assert {m.generation: m.step for m in read_manifests(store, dest)} == {1: 2}  # 0 dropped: replaced
    [newest, *_] = fc.history(dest)
    assert (newest.uri, newest.generation, newest.step, newest.has_manifest) == (dest, 1, 2, True)
    assert newest.digest == f"crc32:{zlib.crc32(b'state of B'):08x}"


@pytest.mark.parametrize("first", ["A", "B"])
def test_a_saver_that_lists_after_another_committed_over_it_writes_none(root, first):
    """A commits, B commits over it, and only then do they list: both find B's object (as many
    bytes as A's). A knows by the version its commit gave that the object listed is not its
    own, and writes no manifest; B's describes it, whoever records first. Before: both took
    generation 1, and the last write won, A's step and digest naming B's bytes half the time."""
    dest = root + "/0/ckpt"
    _base(dest)
    a, b = Saver(dest, b"state of A", 1), Saver(dest, b"state of B", 2)
    a.commit()
    b.commit()
    assert a.record.version is not None and a.record.version != b.record.version
    if first == "A":
        a.run()  # lists B's object: no manifest, no create
        b.start()
        b.release()
    else:
        b.start()
        b.release()
        a.run()
    assert a.result == [None] and a.store.creates == []
    [newest, *_] = fc.history(dest)
    assert (newest.uri, newest.generation, newest.step) == (dest, 1, 2)
    assert newest.digest == f"crc32:{zlib.crc32(b'state of B'):08x}"
    assert {m.generation: m.step for m in read_manifests(store_for(dest), dest)} == {1: 2}


def test_two_savers_of_the_same_object_take_two_generations(root):
    """Two savers whose commits gave no version (a store whose commit answers none) both list
    the same object and take generation 1; the second create is refused, and its saver takes
    generation 2 instead of replacing the first's manifest: each under its own number."""
    dest = root + "/0/ckpt"
    _base(dest)
    a, b = Saver(dest, b"state of B", 1), Saver(dest, b"state of B", 2)  # both describe B's object
    b.commit()
    a.start()
    b.start()
    a.release()
    b.release()
    [ma], [mb] = a.result, b.result
    assert (ma.generation, mb.generation) == (1, 2)
    assert b.store.creates == [("g00000001.json", False), ("g00000002.json", True)]
    manifests = {m.generation: m.step for m in read_manifests(store_for(dest), dest)}
    assert manifests[2] == 2 and len(manifests) == len(set(manifests))
    [newest, *_] = fc.history(dest)
    assert (newest.generation, newest.step) == (2, 2)


# -- two processes ---------------------------------------------------------------------------

CHILD = r"""
import sys
import flyte_checkpoint as fc
from flyte_checkpoint.storage.registry import store_for

dest, data, step = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
kind = type(store_for(dest))
create = kind.write_bytes_if_absent


def held(self, uri, body):  # a manifest's create waits for the test's word
    if ".fcp-history/" in uri and uri.endswith(".json"):
        print("CREATE", uri.rsplit("/", 1)[-1], flush=True)
        sys.stdin.readline()
        created = create(self, uri, body)
        print("CREATED" if created else "REFUSED", flush=True)
        return created
    return create(self, uri, body)


kind.write_bytes_if_absent = held
fc.Checkpoint(dest).save_sync(data, step=step)
print("SAVED", flush=True)
"""


@pytest.fixture(params=["file", "s3"])
def where(request, backend_pool):  # noqa: F811
    backend = backend_pool.get(request.param)
    with backend.activated():
        yield backend


def _process(backend, dest: str, data: bytes, step: int) -> Child:
    env = backend.child_env(PYTHONPATH=str(ROOT))
    return Child([sys.executable, "-c", CHILD, dest, data.decode(), str(step)], env, ROOT)


@pytest.mark.parametrize("first", ["A", "B"])
def test_two_processes_saving_to_one_destination(where, first):
    """Two processes save to one destination: A commits and lists, B commits over it and lists,
    both hold at their manifest's create (generation 1 for both); then they go in each order.
    B's manifest is the one left naming the object, under generation 1; A's is refused or
    withdrawn, never left replacing B's."""
    dest = where.fresh("run") + "/0/ckpt"
    _base(dest)
    a = _process(where, dest, b"state of A", 1)
    assert a.next() == "CREATE g00000001.json"  # A committed and listed
    b = _process(where, dest, b"state of B", 2)
    assert b.next() == "CREATE g00000001.json"  # B committed over it and listed
    if first == "A":
        a.say()
        assert a.next() == "CREATED"  # then its check finds B's object: withdrawn
        assert a.next() == "SAVED"
        b.say()
        assert b.next() == "CREATED"
    else:
        b.say()
        assert b.next() == "CREATED"
        a.say()
        assert a.next() == "REFUSED"  # and its object is gone: no manifest
        assert a.next() == "SAVED"
    assert b.next() == "SAVED"
    for child in (a, b):
        code, output = child.end()
        assert code == 0, output
    store = store_for(dest)
    assert {m.generation: m.step for m in read_manifests(store, dest)} == {1: 2}
    [newest, *_] = fc.history(dest)
    assert (newest.uri, newest.generation, newest.step) == (dest, 1, 2)
    assert newest.digest == f"crc32:{zlib.crc32(b'state of B'):08x}"


def test_a_save_whose_every_create_is_refused_gives_up_with_a_warning(caplog):
    """Every create refused (other savers taking each generation first): after CLAIM_TRIES
    tries the save gives up, with a WARNING naming the destination; the checkpoint stays."""
    from flyte_checkpoint.history import recording

    dest = f"memory://race-refused-{id(caplog)}/0/ckpt"
    store = store_for(dest)
    store.write_bytes(dest, b"committed")

    class Refusing(Held):
        def write_bytes_if_absent(self, uri: str, data: bytes) -> bool:
            self.creates.append((uri.rsplit("/", 1)[-1], False))
            return False

    refusing = Refusing(store)
    caplog.set_level("WARNING", logger="flyte_checkpoint")
    assert record_save(refusing, SaveRecord(dest, step=1)) is None  # type: ignore[arg-type]
    assert len(refusing.creates) == recording.CLAIM_TRIES
    assert [c[0] for c in refusing.creates[:2]] == ["g00000000.json", "g00000001.json"]
    assert any(
        "manifest could not be written" in r.getMessage() and "different destinations" in r.getMessage()
        for r in caplog.records
    )
    assert store.read_bytes(dest) == b"committed"
