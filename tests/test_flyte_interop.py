"""Checkpoints move both ways between ``flyte.Checkpoint`` (flyte 2.12.1) and ours, on file:// URIs.

Bytes and files are stored as they are, so the objects themselves are compared byte for byte;
a directory is a gzip-compressed tar whose compressed bytes depend on the compressor, so for
those the tar members (names, types, link targets, contents) and the restored trees are.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import os
import random
import tarfile
import tempfile
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from conftest import require

from .helpers import tree

try:
    import flyte
except ImportError:
    flyte = None


@pytest.fixture(autouse=True)
def _need_flyte():
    require(flyte is not None, "flyte is not installed (pip install flyte==2.12.1)")


def uri(path: Path) -> str:
    return f"file://{path}"


def make_tree(root: Path, *, big: int = 0) -> Path:
    """A folder with nesting, an empty file, an empty folder, binary data, a link, a unicode name."""
    rng = random.Random(7)
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "empty-dir").mkdir()
    (root / "model.bin").write_bytes(bytes(rng.getrandbits(8) for _ in range(70_000)))
    (root / "sub" / "state.json").write_text('{"epoch": 3}')
    (root / "sub" / "deeper" / "empty.txt").write_bytes(b"")
    (root / "sub" / "naïve ünïcode.txt").write_text("ok")
    (root / "last.ckpt").symlink_to("model.bin")
    if big:
        (root / "big.bin").write_bytes(rng.randbytes(big))
    return root


def members(obj: bytes) -> dict[str, object]:
    """The tar members of a gzip-compressed tar: name -> contents, ("dir",) or ("link", target)."""
    assert obj[:2] == b"\x1f\x8b", "a directory checkpoint is gzip-compressed"
    out: dict[str, object] = {}
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(obj)), mode="r:") as tar:
        for m in tar.getmembers():
            name = m.name.rstrip("/")
            if m.issym():
                out[name] = ("link", m.linkname)
            elif m.isdir():
                out[name] = ("dir",)
            else:
                f = tar.extractfile(m)
                out[name] = f.read() if f else b""
    return out


# -- Flyte writes, we load ------------------------------------------------------------------


def test_bytes_from_flyte_load_with_ours(tmp_path):
    data = b"\x00step=41\xff" * 1000
    flyte.Checkpoint(uri(tmp_path / "obj")).save_sync(data)
    assert (tmp_path / "obj").read_bytes() == data
    with fc.Checkpoint(uri(tmp_path / "next"), uri(tmp_path / "obj")) as ours:
        got = ours.load_sync()
        assert got == ours.path / "payload" and got.read_bytes() == data


def test_file_from_flyte_loads_with_ours(tmp_path):
    src = tmp_path / "weights.pt"
    src.write_bytes(random.Random(1).randbytes(300_000))
    flyte.Checkpoint(uri(tmp_path / "obj")).save_sync(src)
    assert (tmp_path / "obj").read_bytes() == src.read_bytes()
    with fc.Checkpoint(str(tmp_path / "next"), str(tmp_path / "obj")) as ours:
        assert ours.load_sync().read_bytes() == src.read_bytes()


def test_directory_from_flyte_loads_with_ours(tmp_path):
    src = make_tree(tmp_path / "src")
    flyte.Checkpoint(uri(tmp_path / "obj")).save_sync(src)
    assert members((tmp_path / "obj").read_bytes()) == tree(src)
    with fc.Checkpoint(uri(tmp_path / "next"), uri(tmp_path / "obj")) as ours:
        got = ours.load_sync()
        assert got == ours.path
        assert tree(got) == tree(src)


# -- we write, Flyte loads ------------------------------------------------------------------


def test_bytes_from_ours_load_with_flyte(tmp_path):
    data = bytes(range(256)) * 513
    fc.Checkpoint(uri(tmp_path / "obj")).save_sync(data)
    assert (tmp_path / "obj").read_bytes() == data
    theirs = flyte.Checkpoint(uri(tmp_path / "next"), uri(tmp_path / "obj"))
    got = theirs.load_sync()
    assert got == theirs.path / "payload" and got.read_bytes() == data


def test_file_from_ours_loads_with_flyte(tmp_path):
    src = tmp_path / "weights.pt"
    src.write_bytes(random.Random(2).randbytes(300_000))
    fc.Checkpoint(str(tmp_path / "obj")).save_sync(src)
    assert (tmp_path / "obj").read_bytes() == src.read_bytes()
    theirs = flyte.Checkpoint(uri(tmp_path / "next"), uri(tmp_path / "obj"))
    assert theirs.load_sync().read_bytes() == src.read_bytes()


@pytest.mark.parametrize("big", [0, 9 * 1024 * 1024], ids=["small", "several-gzip-members"])
def test_directory_from_ours_loads_with_flyte(tmp_path, big):
    src = make_tree(tmp_path / "src", big=big)
    fc.Checkpoint(uri(tmp_path / "obj")).save_sync(src)
    assert members((tmp_path / "obj").read_bytes()) == tree(src)
    theirs = flyte.Checkpoint(uri(tmp_path / "next"), uri(tmp_path / "obj"))
    got = theirs.load_sync()
    assert got == theirs.path
    assert tree(got) == tree(src)


def test_both_write_the_same_objects(tmp_path):
    src = make_tree(tmp_path / "src")
    for name, data in [("bytes", b"abc" * 99), ("file", src / "model.bin"), ("dir", src)]:
        flyte.Checkpoint(uri(tmp_path / f"flyte-{name}")).save_sync(data)
        fc.Checkpoint(uri(tmp_path / f"ours-{name}")).save_sync(data)
        theirs, ours = (tmp_path / f"flyte-{name}").read_bytes(), (tmp_path / f"ours-{name}").read_bytes()
        if name == "dir":
            assert members(theirs) == members(ours)
        else:
            assert theirs == ours


def test_both_restore_the_same_tree_from_either_object(tmp_path):
    src = make_tree(tmp_path / "src")
    flyte.Checkpoint(uri(tmp_path / "a")).save_sync(src)
    fc.Checkpoint(uri(tmp_path / "b")).save_sync(src)
    for obj in ("a", "b"):
        flyte_cp = flyte.Checkpoint(uri(tmp_path / "x"), uri(tmp_path / obj))  # keeps its workspace
        theirs = flyte_cp.load_sync()
        with fc.Checkpoint(uri(tmp_path / "y"), uri(tmp_path / obj)) as ours:
            assert tree(ours.load_sync()) == tree(theirs) == tree(src)


# -- "no checkpoint" means the same to both ---------------------------------------------------


def test_no_checkpoint_both_ways(tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    for src in (None, uri(tmp_path / "missing"), uri(tmp_path / "empty")):
        assert flyte.Checkpoint(uri(tmp_path / "d"), src).load_sync() is None
        assert fc.Checkpoint(uri(tmp_path / "d"), src).load_sync() is None
    # A zero-byte checkpoint saved by either is "none yet" for the other.
    flyte.Checkpoint(uri(tmp_path / "zf")).save_sync(b"")
    fc.Checkpoint(uri(tmp_path / "zo")).save_sync(b"")
    assert fc.Checkpoint(uri(tmp_path / "d"), uri(tmp_path / "zf")).load_sync() is None
    assert flyte.Checkpoint(uri(tmp_path / "d"), uri(tmp_path / "zo")).load_sync() is None


def test_async_both_ways(tmp_path):
    src = make_tree(tmp_path / "src")

    async def go() -> None:
        await flyte.Checkpoint(uri(tmp_path / "f")).save(src)
        await fc.Checkpoint(uri(tmp_path / "o")).save(b"from ours")
        with fc.Checkpoint(uri(tmp_path / "n"), uri(tmp_path / "f")) as ours:
            assert tree(await ours.load()) == tree(src)
        theirs = flyte.Checkpoint(uri(tmp_path / "n2"), uri(tmp_path / "o"))
        assert (await theirs.load()).read_bytes() == b"from ours"

    asyncio.run(go())


def test_a_chain_of_attempts_alternating_between_the_two(tmp_path):
    """Attempt k loads attempt k-1's object and saves its own, Flyte and ours in turn."""
    prev = None
    for attempt in range(4):
        dest = uri(tmp_path / str(attempt) / "_flytecheckpoints")
        cls = flyte.Checkpoint if attempt % 2 == 0 else fc.Checkpoint
        cp = cls(dest, prev)
        path = cp.load_sync()
        state = path / "state" if path else None
        count = int(state.read_text()) if state else 0
        assert count == attempt
        work = tmp_path / f"work{attempt}"
        work.mkdir()
        (work / "state").write_text(str(count + 1))
        cp.save_sync(work)
        prev = dest


def test_latest_checkpoint_agrees_with_flytes(tmp_path):
    for name, mtime in [("a/last.ckpt", 3000), ("b/last.ckpt", 1000), ("c/d/last.ckpt", 2000)]:
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(name)
        os.utime(p, (mtime, mtime))
    assert fc.latest_checkpoint(tmp_path) == flyte.latest_checkpoint(tmp_path) == tmp_path / "a" / "last.ckpt"
    by_depth = {"key": lambda p: len(p.parts)}
    assert fc.latest_checkpoint(tmp_path, **by_depth) == flyte.latest_checkpoint(tmp_path, **by_depth)


# -- on the S3 test server (moto), with Flyte pointed at it -----------------------------------


@pytest.fixture(scope="module")
def s3_bucket():
    """A bucket on moto's S3 server on 127.0.0.1, with Flyte and our S3 backend both pointed at it."""
    try:
        import boto3
        from flyte_checkpoint_s3_tests.server import run_server, server_installed
    except ImportError:
        boto3 = None
    require(
        boto3 is not None and server_installed(), "the S3 plugin, its test server module or moto is missing"
    )
    require(flyte is not None, "flyte is not installed (pip install flyte==2.12.1)")
    from flyte.storage import S3

    keys = {"access_key_id": "testing", "secret_access_key": "testing"}
    with run_server() as server, pytest.MonkeyPatch.context() as mp:
        endpoint = server.endpoint
        mp.setenv("FLYTE_AWS_ENDPOINT", endpoint)
        mp.setenv("FLYTE_AWS_ACCESS_KEY_ID", keys["access_key_id"])
        mp.setenv("FLYTE_AWS_SECRET_ACCESS_KEY", keys["secret_access_key"])
        mp.setenv("FLYTE_AWS_S3_ADDRESSING_STYLE", "path")
        mp.setenv("AWS_REGION", "us-east-1")
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=keys["access_key_id"],
            aws_secret_access_key=keys["secret_access_key"],
        )
        client.create_bucket(Bucket="fc-interop")
        flyte.init(storage=S3(endpoint=endpoint, addressing_style="path", **keys))
        try:
            yield "s3://fc-interop"
        finally:
            flyte.init()  # back to Flyte's default storage for the tests that follow


def test_s3_both_ways(s3_bucket, tmp_path):
    src = make_tree(tmp_path / "src")
    data = b"\x00s3 payload\xff" * 5000
    flyte.Checkpoint(f"{s3_bucket}/flyte/bytes").save_sync(data)
    flyte.Checkpoint(f"{s3_bucket}/flyte/dir").save_sync(src)
    fc.Checkpoint(f"{s3_bucket}/ours/bytes").save_sync(data)
    fc.Checkpoint(f"{s3_bucket}/ours/dir").save_sync(src)
    for writer in ("flyte", "ours"):
        with fc.Checkpoint(f"{s3_bucket}/unused", f"{s3_bucket}/{writer}/bytes") as ours:
            assert ours.load_sync().read_bytes() == data
        with fc.Checkpoint(f"{s3_bucket}/unused", f"{s3_bucket}/{writer}/dir") as ours:
            assert tree(ours.load_sync()) == tree(src)
        theirs = flyte.Checkpoint(str(tmp_path / "unused"), f"{s3_bucket}/{writer}/bytes")
        assert theirs.load_sync().read_bytes() == data
        theirs = flyte.Checkpoint(str(tmp_path / "unused"), f"{s3_bucket}/{writer}/dir")
        assert tree(theirs.load_sync()) == tree(src)
    # Objects of bytes are the same bytes whoever wrote them.
    with (
        fc.Checkpoint(f"{s3_bucket}/unused", f"{s3_bucket}/flyte/bytes") as a,
        fc.Checkpoint(f"{s3_bucket}/unused", f"{s3_bucket}/ours/bytes") as b,
    ):
        assert a.load_sync().read_bytes() == b.load_sync().read_bytes()


def test_local_runner_on_s3_loads_each_previous_attempt(s3_bucket):
    """Attempt k reads attempt k-1's object, also past attempt 2 (a blind URI repair would not)."""
    seen = []

    @fc.task(retries=3, checkpoint_root=f"{s3_bucket}/runs", run_name="chain")
    def count(n: int) -> int:
        cp = fc.ctx().checkpoint
        path = cp.load_sync()
        start = int(path.read_bytes()) if path else 0
        seen.append((cp.remote_source, start))
        for i in range(start, n):
            if i > start and i % 3 == 0:
                raise RuntimeError(f"crash at {i}")
            cp.save_sync(str(i + 1).encode())
        return n

    assert count(10) == 10
    base = f"{s3_bucket}/runs/chain/count"
    assert seen == [(None, 0)] + [(f"{base}/{k}/_flytecheckpoints", 3 * (k + 1)) for k in range(3)]


def test_workspace_folder_tells_which_library_restored_it(tmp_path):
    """A traceback through a restored file names the library: our prefix, not Flyte's."""
    flyte.Checkpoint(uri(tmp_path / "obj")).save_sync(b"state")
    theirs = flyte.Checkpoint(uri(tmp_path / "a"), uri(tmp_path / "obj"))
    with fc.Checkpoint(uri(tmp_path / "b"), uri(tmp_path / "obj")) as ours:
        restored = ours.load_sync()
        folder = restored.relative_to(tempfile.gettempdir()).parts[0]
        flyte_folder = theirs.load_sync().relative_to(tempfile.gettempdir()).parts[0]
        assert flyte_folder.startswith("flyte-cp-")  # Flyte's own prefix (flyte 2.12.1)
        assert folder.startswith("flyte-checkpoint-ws-")
