"""Sharded saves on S3 (issue 19): 4 rank processes write one multipart upload, against a moto
server that enforces AWS's 5 MiB minimum part size (so each rank's padded last part is tested)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import server_env
from .helpers import BUCKET, key_of
from .server import INSTALL_HINT, ServerStartError, run_server, server_installed

try:
    from conftest import require
    from tests import shardranks as sr
except ImportError:  # pragma: no cover - the repository's tests are needed
    pytest.skip("run from the repository root", allow_module_level=True)

WORLD = 4


@pytest.fixture(scope="module")
def aws_sized_server() -> Iterator[str]:
    require(server_installed(), f"moto's S3 server is not installed: {INSTALL_HINT}")
    try:
        with run_server(min_part_size=None) as server:
            yield server.endpoint
    except ServerStartError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def env(aws_sized_server: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    from flyte_checkpoint.storage.registry import get_registry

    values = server_env(aws_sized_server, tmp_path)
    for name in ("AWS_PROFILE", "AWS_REGION", "FLYTE_AWS_ENDPOINT", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    get_registry().close()
    yield values
    # The stores built here point at this module's server, which stops after it: later tests
    # must build theirs from their own settings.
    get_registry().close()


@pytest.fixture
def client(env: dict[str, str]) -> Iterator[Any]:
    import boto3

    c = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL_S3"])
    try:
        c.create_bucket(Bucket=BUCKET)
    except c.exceptions.BucketAlreadyOwnedByYou:
        pass
    yield c
    c.close()


@pytest.fixture
def dest(client: Any) -> str:
    return f"s3://{BUCKET}/{uuid.uuid4().hex}/ckpt"


def uploads(client: Any, uri: str) -> list[Any]:
    return client.list_multipart_uploads(Bucket=BUCKET, Prefix=key_of(uri)).get("Uploads", [])


def leftovers(client: Any, uri: str) -> list[str]:
    """Unfinished uploads and coordination objects, but the session marker and the last result."""
    found = client.list_objects_v2(Bucket=BUCKET, Prefix=key_of(uri) + ".fcp-shard/").get("Contents", [])
    names = [o["Key"].rsplit("/", 1)[1] for o in found]
    return [n for n in names if n != "open" and not n.endswith(".result")] + [
        u["UploadId"] for u in uploads(client, uri)
    ]


def untar(client: Any, uri: str) -> dict[str, bytes]:
    return sr.tar_files(client.get_object(Bucket=BUCKET, Key=key_of(uri))["Body"].read())


def test_four_ranks_write_one_multipart_upload(tmp_path, client, dest):
    folders = sr.make_folders(tmp_path, WORLD, size=300_000)
    assert sr.run(dest, folders) == ["OK"] * WORLD
    expected = sr.union(folders)
    assert untar(client, dest) == expected
    assert sr.restore(dest, tmp_path) == expected
    etag = client.head_object(Bucket=BUCKET, Key=key_of(dest))["ETag"]
    assert etag.strip('"').endswith(
        f"-{WORLD + 1}"
    )  # one multipart upload: a (padded) part per rank, the tail
    assert leftovers(client, dest) == []
    for rank, folder in enumerate(folders):
        import flyte_checkpoint as fc
        from flyte_checkpoint.sharded import load_sharded

        with fc.Checkpoint(str(tmp_path / "own"), dest) as cp:
            assert sr.tree(load_sharded(cp, own=True, rank=rank)) == sr.tree(folder)


def test_a_failed_rank_aborts_the_upload_and_keeps_the_previous_object(tmp_path, client, dest):
    first = sr.make_folders(tmp_path, WORLD, tag="first")
    assert sr.run(dest, first) == ["OK"] * WORLD
    results = sr.run(dest, sr.make_folders(tmp_path, WORLD, tag="second"), fail={1: True})
    assert all("rank 1: OSError: this rank's disk is on fire" in r for r in results), results
    assert untar(client, dest) == sr.union(first)
    assert uploads(client, dest) == []


@pytest.mark.parametrize("seed", range(int(os.environ.get("FCP_SHARD_KILLS", "3"))))
def test_sigkill_of_a_random_rank_never_leaves_a_mix_or_an_upload(tmp_path, client, dest, seed):
    sr.check_random_kill(
        dest, tmp_path, 100 + seed, lambda: untar(client, dest), lambda: leftovers(client, dest)
    )


def test_without_padding_aws_refuses_the_upload(tmp_path, client, dest, monkeypatch):
    """The check that the server really enforces 5 MiB parts (what the padding is for)."""
    from flyte_checkpoint_s3 import shards

    monkeypatch.setattr(shards.S3Segment, "padding_needed", lambda self: 0)
    from flyte_checkpoint.errors import ShardedSaveError
    from flyte_checkpoint.sharded import save_sharded

    folders = sr.make_folders(tmp_path, 1)
    extra = tmp_path / "second"
    extra.mkdir()
    (extra / "x").write_bytes(os.urandom(1000))
    import threading

    errors: list[BaseException] = []

    def rank(r: int, folder: Any) -> None:
        try:
            save_sharded(dest, folder, rank=r, world_size=2, timeout=60)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=rank, args=(r, f)) for r, f in enumerate([folders[0], extra])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 2 and all(isinstance(e, ShardedSaveError) for e in errors)
    assert "EntityTooSmall" in str(errors[0]) or "too small" in str(errors[0]).lower(), errors


def test_torchrun_ranks_write_one_upload_and_a_failure_aborts_it(tmp_path, client, dest):
    sr.torchrun_case(dest, tmp_path, lambda: untar(client, dest))
    assert uploads(client, dest) == []


def test_a_parallel_inflate_restores_a_padded_object(tmp_path, client, dest, monkeypatch):
    """Padding members (empty, listed in the index) between the segments: the parallel load
    (forced on this machine's cores) restores the union and verifies every file."""
    folders = sr.make_folders(tmp_path, WORLD)
    for rank, folder in enumerate(folders):  # 36 MB that does not compress: over the parallel threshold
        (folder / f"weights{rank}.bin").write_bytes(os.urandom(9_000_000))
    assert sr.run(dest, folders) == ["OK"] * WORLD
    assert sr.parallel_restore(dest, tmp_path, monkeypatch) == sr.union(folders)


def test_ranks_that_disagree_on_the_world_size_all_raise(tmp_path, client, dest):
    """Rank 2 outside rank 0's world: rank 0 sees its report in the listing of the session's
    reports (the file store's test also runs two ranks that disagree with rank 0)."""
    sr.check_world_mismatch(dest, tmp_path, lambda: untar(client, dest), (2, 2, 3))
    assert uploads(client, dest) == []


def test_a_late_rank_never_joins_the_next_save(tmp_path, client, dest):
    sr.check_late_rank(dest, tmp_path, lambda: untar(client, dest))
    assert leftovers(client, dest) == []


def test_a_second_job_on_the_same_uri_is_refused_and_never_mixed_in(tmp_path, client, dest):
    sr.check_two_jobs(dest, tmp_path, lambda: untar(client, dest))
    assert leftovers(client, dest) == []


def test_empty_files_at_the_edges_of_padded_segments_stay_with_their_rank(tmp_path, client, dest):
    """Each rank's segment ends with padding members (no data) after its last file."""
    sr.check_empty_files_at_the_edges(dest, tmp_path)


def test_two_processes_reporting_as_one_rank_never_both_return(tmp_path, client, dest):
    """On S3 both send the same part numbers of one upload (see the next test)."""
    sr.check_two_processes_as_one_rank(dest, tmp_path, lambda: untar(client, dest))
    assert uploads(client, dest) == []


def test_a_part_replaced_by_another_process_as_the_same_rank_fails_the_commit(client, dest):
    """Two processes as one rank send the same part numbers: the completion names the parts'
    ETags that the accepted rank reported, so a part the other replaced meanwhile fails it
    (InvalidPart) instead of entering the object."""
    from flyte_checkpoint.errors import CheckpointError
    from flyte_checkpoint.storage.registry import store_for

    writes = store_for(dest).sharded_writes(dest)
    session = {"token": "t", **writes.begin("t")}
    pieces = []
    for joiner in ("first", "second"):
        segment = writes.segment(session, 0, 1, joiner)
        segment.write(os.urandom(5 * 1024 * 1024))  # S3's minimum for a part but the last
        pieces.append(segment.finish())
    with pytest.raises(CheckpointError, match="InvalidPart"):
        writes.commit(session, pieces[:1], b"the tail")
    writes.abort(session)
    assert client.list_objects_v2(Bucket=BUCKET, Prefix=key_of(dest)).get("KeyCount") == 0
    assert uploads(client, dest) == []


# -- part plans (issue 36): refused before any request, and a last part that needs no padding --


@pytest.fixture
def requests(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every S3 API call any boto3 client of this process makes from now on, by name."""
    import botocore.client

    made: list[str] = []
    real = botocore.client.BaseClient._make_api_call

    def counted(self: Any, operation: str, params: Any) -> Any:
        made.append(operation)
        return real(self, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", counted)
    return made


def test_a_world_larger_than_s3s_part_numbers_is_refused_before_any_request(tmp_path, dest, requests):
    from flyte_checkpoint.errors import ShardedSaveError
    from flyte_checkpoint.sharded import save_sharded

    folder = sr.make_folders(tmp_path, 1)[0]
    for rank in (0, 1, 9_999):
        with pytest.raises(ShardedSaveError) as caught:
            save_sharded(dest, folder, rank=rank, world_size=10_000, timeout=60)
        message = str(caught.value)
        assert "10,000 ranks" in message and "S3" in message and "9,999" in message, message
    assert requests == []


def test_a_shard_past_its_ranks_parts_fails_every_rank_and_sends_none_of_its_bytes(
    tmp_path, client, dest, monkeypatch, requests
):
    """Limits made small (3 part numbers of at most 6 MiB for the ranks): rank 1's 12 MiB bound
    cannot fit its one part; it sends no part, and both ranks raise, naming the limit."""
    from flyte_checkpoint_s3 import shards

    from flyte_checkpoint.errors import ShardedSaveError
    from flyte_checkpoint.storage.kit import PartLimits

    small = PartLimits("S3", 5 * 1024 * 1024, 6 * 1024 * 1024, 4, 1 << 40, described="4 parts (test)")
    monkeypatch.setattr(shards.S3ShardedWrites, "limits", small)
    sent: list[int] = []
    real_send = shards.S3Segment._send_part

    def send(self: Any, number: int, data: Any) -> Any:
        sent.append(self.plan.rank)
        return real_send(self, number, data)

    monkeypatch.setattr(shards.S3Segment, "_send_part", send)
    folders = sr.make_folders(tmp_path, 2, size=1000)
    (folders[1] / "big.bin").write_bytes(os.urandom(12 * 1024 * 1024))
    errors = sr.save_threads(dest, folders)
    assert len(errors) == 2 and all(isinstance(e, ShardedSaveError) for e in errors), errors
    for error in errors:
        assert "rank 1's segment" in str(error) and "4 parts (test)" in str(error), error
        assert "2 ranks" in str(error) and "Nothing was sent" in str(error), error
    assert 1 not in sent  # rank 1 sent none of its bytes: every part sent is rank 0's
    assert requests.count("UploadPart") == len(sent)
    assert uploads(client, dest) == []


def test_small_parts_leave_no_padding_and_load_byte_identical(tmp_path, client, dest, monkeypatch):
    """Parts of 5 MiB (the setting's smallest that S3 takes), segments of 17 MiB that do not
    compress: each rank's last part holds the 5 MiB held back and the rest, so nothing is
    padded; the object loads back as the exact union, and tarfile and ``tar xzf`` read it."""
    import shutil
    import subprocess

    from flyte_checkpoint_s3 import shards

    from flyte_checkpoint.storage.registry import get_registry

    monkeypatch.setenv("FLYTE_CHECKPOINT_S3_PART_SIZE", "5MiB")
    get_registry().close()
    padded: list[int] = []
    real_pad = shards.S3Segment.padding_needed

    def pad(self: Any) -> int:
        padded.append(real_pad(self))
        return padded[-1]

    monkeypatch.setattr(shards.S3Segment, "padding_needed", pad)
    folders = sr.make_folders(tmp_path, 3, size=1000)
    for rank, folder in enumerate(folders):
        (folder / f"weights{rank}.bin").write_bytes(os.urandom(17 * 1024 * 1024 + rank))
    assert sr.save_threads(dest, folders) == []
    assert padded == [0, 0, 0]
    expected = sr.union(folders)
    assert untar(client, dest) == expected
    assert sr.restore(dest, tmp_path) == expected
    etag = client.head_object(Bucket=BUCKET, Key=key_of(dest))["ETag"]
    assert etag.strip('"').endswith(f"-{3 * 3 + 1}")  # parts of 5, 5 and 7+ MiB a rank, the tail
    if shutil.which("tar") is not None:
        obj = tmp_path / "object.tar.gz"
        obj.write_bytes(client.get_object(Bucket=BUCKET, Key=key_of(dest))["Body"].read())
        out = tmp_path / "untarred"
        out.mkdir()
        subprocess.run(["tar", "xzf", str(obj), "-C", str(out)], check=True)
        assert sr.tree(out) == expected
    assert uploads(client, dest) == []


def test_an_empty_rank_sends_no_part(tmp_path, client, dest):
    import shutil

    folders = sr.make_folders(tmp_path, 3, size=1000)
    shutil.rmtree(folders[1])
    folders[1].mkdir()
    assert sr.save_threads(dest, folders) == []
    assert untar(client, dest) == sr.union(folders)
    etag = client.head_object(Bucket=BUCKET, Key=key_of(dest))["ETag"]
    assert etag.strip('"').endswith("-3")  # ranks 0 and 2 (each padded to 5 MiB), the tail
    import flyte_checkpoint as fc
    from flyte_checkpoint.sharded import load_sharded

    for rank, folder in enumerate(folders):
        with fc.Checkpoint(str(tmp_path / f"own{rank}"), dest) as cp:
            loaded = load_sharded(cp, own=True, rank=rank)
            assert (sr.tree(loaded) if loaded is not None else {}) == sr.tree(folder)


def test_a_folder_that_grows_past_its_plan_fails_the_save_naming_it(tmp_path, client, dest, monkeypatch):
    """The bound is measured before the save: a folder that then grows can need more parts than
    the rank's plan has (made so here: the bound reported as 0, three numbers of 5 MiB)."""
    from flyte_checkpoint_s3 import shards

    from flyte_checkpoint.errors import ShardedSaveError
    from flyte_checkpoint.sharded import segment
    from flyte_checkpoint.storage.kit import PartLimits

    monkeypatch.setattr(segment, "segment_bound", lambda folder: 0)
    small = PartLimits("S3", 5 * 1024 * 1024, 10 * 1024 * 1024, 4, 1 << 40, described="4 parts (test)")
    monkeypatch.setattr(shards.S3ShardedWrites, "limits", small)
    folder = sr.make_folders(tmp_path, 1, size=1000)[0]
    (folder / "grown.bin").write_bytes(os.urandom(30 * 1024 * 1024))
    errors = sr.save_threads(dest, [folder])
    assert len(errors) == 1 and isinstance(errors[0], ShardedSaveError), errors
    assert "outgrew its plan" in str(errors[0]) and "grew while they were saved" in str(errors[0])
    assert uploads(client, dest) == []


def test_a_save_whose_every_rank_is_empty_is_the_tail_alone(tmp_path, client, dest):
    folders = [tmp_path / f"empty{rank}" for rank in range(3)]
    for folder in folders:
        folder.mkdir()
    assert sr.save_threads(dest, folders) == []
    assert untar(client, dest) == {}
    assert client.head_object(Bucket=BUCKET, Key=key_of(dest))["ETag"].strip('"').endswith("-1")
    assert sr.restore(dest, tmp_path) == {}
    assert uploads(client, dest) == []
