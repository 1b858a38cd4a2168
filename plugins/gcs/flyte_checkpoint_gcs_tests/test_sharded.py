"""Sharded saves on GCS (issue 19): rank processes each write a temporary object, which the
committing rank composes into the checkpoint; the bytes that go up are counted at a proxy in
front of the emulator."""

from __future__ import annotations

import io
import json
import os
import random
import tarfile
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from flyte_checkpoint_gcs import shards
from flyte_checkpoint_gcs.store import GCSStore

from flyte_checkpoint.testing import FaultProxy

from .helpers import BUCKET, RecordingSession, make_store
from .server import GCSServer

try:
    from tests import shardranks as sr
except ImportError:  # pragma: no cover - the repository's tests are needed
    pytest.skip("run from the repository root", allow_module_level=True)

pytestmark = pytest.mark.integration

WORLD = 4


@pytest.fixture
def proxy(gcs_server: GCSServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    """A FaultProxy in front of the emulator; the rank processes' stores go through it."""
    from flyte_checkpoint.storage.registry import get_registry

    with FaultProxy(gcs_server.endpoint) as p:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", p.url)
        get_registry().close()
        yield p
    get_registry().close()


@pytest.fixture
def raw(gcs_server: GCSServer) -> Iterator[GCSStore]:
    """A store on the emulator itself, to look at what the ranks left."""
    s = make_store(gcs_server.endpoint)
    yield s
    s.close()


@pytest.fixture
def dest(gcs_server: GCSServer) -> str:
    return f"gs://{BUCKET}/{uuid.uuid4().hex}/ckpt"


def untar(store: GCSStore, uri: str) -> dict[str, bytes]:
    out = {}
    with tarfile.open(fileobj=io.BytesIO(store.read_bytes(uri))) as tar:
        for m in tar.getmembers():
            if m.isfile():
                out[m.name] = tar.extractfile(m).read()  # type: ignore[union-attr]
    return out


def leftovers(store: GCSStore, uri: str) -> list[str]:
    """Coordination objects but the session marker and the last result: pieces, tails, joins."""
    names = [u.rsplit("/", 1)[1] for u in store.list(uri + ".fcp-shard/")]
    return [n for n in names if n != "open" and not n.endswith(".result")]


def sent(proxy: FaultProxy) -> int:
    return sum(r.up for r in proxy.records)


def test_four_ranks_send_their_bytes_once_and_rank_0_composes(tmp_path, proxy, raw, dest):
    folders = sr.make_folders(tmp_path, WORLD)
    for rank, folder in enumerate(folders):  # incompressible: the object is about 8 MiB
        (folder / f"weights-{rank}.bin").write_bytes(random.Random(rank).randbytes(2 * 1024 * 1024))
    assert sr.run(dest, folders) == ["OK"] * WORLD
    expected = sr.union(folders)
    assert untar(raw, dest) == expected
    size = raw.stat(dest)
    assert size is not None
    # The gathering fallback uploads every byte twice (the pieces, then rank 0's copy).
    assert sent(proxy) < 1.3 * size, f"{sent(proxy)} bytes sent for a {size}-byte object"
    assert any("/compose" in line for r in proxy.records for line in r.requests)
    assert leftovers(raw, dest) == []
    import flyte_checkpoint as fc

    with fc.Checkpoint(str(tmp_path / "next"), dest) as cp:
        assert sr.tree(cp.load_sync()) == expected


def test_more_pieces_than_one_compose_takes_are_composed_in_rounds(gcs_server, dest, monkeypatch):
    session = RecordingSession()
    store = make_store(gcs_server.endpoint, session=session)
    monkeypatch.setattr(shards, "MAX_SOURCES", 3)  # 11 pieces and the tail: 12 -> 4 -> 2 -> 1
    writes = store.sharded_writes(dest)
    assert isinstance(writes, shards.GCSShardedWrites)
    token = uuid.uuid4().hex
    state = {"token": token, **writes.begin(token)}
    datas = [random.Random(i).randbytes(1000 + i) for i in range(11)]
    pieces = []
    for rank, data in enumerate(datas):
        seg = writes.segment(state, rank, len(datas), "j")
        assert seg.padding_needed() == 0
        seg.write(data)
        pieces.append(json.loads(json.dumps(seg.finish())))  # what a rank reports is JSON
    writes.commit(state, pieces, b"the tail")
    assert store.read_bytes(dest) == b"".join(datas) + b"the tail"
    # 12 sources -> 4 joins; 4 -> 1 join and the 4th passed on; 2 -> the object
    assert len(session.find("POST", "/compose")) == 4 + 1 + 1
    assert leftovers(store, dest) == []
    store.close()


def test_each_compose_source_is_pinned_to_its_generation(gcs_server, dest):
    """GCS refuses (412) a source whose generation is not the one its rank wrote; the emulator
    ignores ``ifGenerationMatch``, so the requests are checked."""
    bodies: list[dict[str, Any]] = []

    def keep(call: Any, data: Any) -> Any:
        if call.url.endswith("/compose") or "/compose?" in call.url:
            bodies.append(json.loads(data))
        return data

    store = make_store(gcs_server.endpoint, session=RecordingSession(fault=keep))
    writes = store.sharded_writes(dest)
    state = {"token": uuid.uuid4().hex}
    pieces = []
    for rank in range(2):
        seg = writes.segment(state, rank, 2, "j")
        seg.write(b"x" * (rank + 1))
        pieces.append(seg.finish())
    writes.commit(state, pieces, b"t")
    (body,) = bodies
    sources = body["sourceObjects"]
    assert len(sources) == 3  # the two pieces and the tail
    assert [int(s["objectPreconditions"]["ifGenerationMatch"]) for s in sources[:2]] == [
        p["generation"] for p in pieces
    ]
    assert int(sources[2]["objectPreconditions"]["ifGenerationMatch"]) > 0
    store.close()


def test_a_failed_rank_commits_nothing_and_the_next_save_leaves_no_piece(tmp_path, gcs_server, raw, dest):
    first = sr.make_folders(tmp_path, WORLD, tag="first")
    assert sr.run(dest, first) == ["OK"] * WORLD
    results = sr.run(dest, sr.make_folders(tmp_path, WORLD, tag="second"), fail={1: True})
    assert all("rank 1: OSError: this rank's disk is on fire" in r for r in results), results
    assert untar(raw, dest) == sr.union(first)
    # A rank that finished its piece after rank 0 aborted leaves it to the next save's sweep.
    assert sr.run(dest, first) == ["OK"] * WORLD
    assert leftovers(raw, dest) == []


@pytest.mark.parametrize("seed", range(int(os.environ.get("FCP_SHARD_KILLS", "3"))))
def test_sigkill_of_a_random_rank_never_leaves_a_mix_or_a_piece(tmp_path, gcs_server, raw, dest, seed):
    sr.check_random_kill(dest, tmp_path, 200 + seed, lambda: untar(raw, dest), lambda: leftovers(raw, dest))


def test_a_parallel_inflate_restores_a_composed_object(tmp_path, gcs_server, dest, monkeypatch):
    """The segments joined by compose, no padding between them: the parallel load (forced on
    this machine's cores) restores the union and verifies every file."""
    folders = sr.make_folders(tmp_path, WORLD)
    for rank, folder in enumerate(folders):  # 36 MB that does not compress: over the parallel threshold
        (folder / f"weights{rank}.bin").write_bytes(os.urandom(9_000_000))
    assert sr.run(dest, folders) == ["OK"] * WORLD
    assert sr.parallel_restore(dest, tmp_path, monkeypatch) == sr.union(folders)


def test_an_empty_rank_composes_an_empty_piece(tmp_path, raw, dest):
    """Part plans (issue 36): an empty folder writes no gzip member; its piece is empty."""
    import shutil

    folders = sr.make_folders(tmp_path, 3, size=1000)
    shutil.rmtree(folders[1])
    folders[1].mkdir()
    assert sr.save_threads(dest, folders) == []
    assert untar(raw, dest) == sr.union(folders)
    assert sr.restore(dest, tmp_path) == sr.union(folders)


def test_segments_past_the_largest_object_are_refused_before_compose(tmp_path, raw, dest, monkeypatch):
    """Part plans (issue 36): each rank's piece fits, but their sum is past GCS's largest object
    (made 64 KiB here): rank 0 refuses the commit naming the limit, and every rank raises."""
    from flyte_checkpoint_gcs import shards

    from flyte_checkpoint.errors import ShardedSaveError

    monkeypatch.setattr(shards, "MAX_OBJECT_SIZE", 64 * 1024)
    folders = sr.make_folders(tmp_path, 2, size=1000)
    for rank, folder in enumerate(folders):
        (folder / f"weights{rank}.bin").write_bytes(os.urandom(40_000))  # 80 KB that does not compress
    errors = sr.save_threads(dest, folders)
    assert len(errors) == 2 and all(isinstance(e, ShardedSaveError) for e in errors), errors
    assert all("GCS's largest object" in str(e) and "nothing was committed" in str(e) for e in errors)
    assert dest not in list(raw.list(dest))
    assert [n for n in leftovers(raw, dest) if ".piece-" in n] == []  # the pieces were deleted
