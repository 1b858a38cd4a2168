"""Flyte's own tests of ``flyte.Checkpoint``, adapted to flyte_checkpoint.

Upstream: https://github.com/flyteorg/flyte-sdk, tests/flyte/test_checkpoint.py at commit
7e2d4231b5598b856584a8cc819c990ff02dcf2a (the file last changed in 60563c07d300e91c42a3ac1bf50f0e68768e5adb).
Copyright the flyte-sdk authors (flyteorg). Licensed under the Apache License, Version 2.0
(http://www.apache.org/licenses/LICENSE-2.0); this file is a modified copy: every assertion is
Flyte's, and each change is a comment on its line ("adapted: ..."). Tests that cannot apply are
left out with a comment saying why, where they stood.
"""

from __future__ import annotations

import asyncio  # adapted: async tests run with asyncio.run (the suite has no pytest-asyncio)
import io
import json
import pathlib
import tarfile
import tempfile

from flyte_checkpoint import (  # adapted: imports swapped from flyte._checkpoint / flyte.models
    Checkpoint,
    CheckpointPaths,
    TaskContext,
    latest_checkpoint,
)
from flyte_checkpoint.errors import (  # adapted: documented errors
    InvalidURIError,
    NoCheckpointDestinationError,
)
from flyte_checkpoint.format.restore import PAYLOAD as _PAYLOAD_BASENAME  # adapted: flyte's _PAYLOAD_BASENAME

from .differences import documented_difference  # adapted: strict xfail the CI rule accepts

# adapted: flyte.report.Report, flyte.models.ActionID/RawDataPath and
# flyte.storage._parallel_reader.DownloadQueueEmpty are not imported: this library's TaskContext
# takes attempt_number and checkpoint_paths only, and has no download queue to mock.


def _write_dir_checkpoint_tar(
    tar_path: pathlib.Path,
    *,
    inner_name: str,
    text: str,
) -> None:
    """Write a gzip tar at *tar_path* with one text member *inner_name*."""
    with tarfile.open(tar_path, "w:gz") as tar:
        data = text.encode("utf-8")
        ti = tarfile.TarInfo(name=inner_name)
        ti.size = len(data)
        tar.addfile(ti, io.BytesIO(data))


def _read_state_step(workspace: pathlib.Path) -> int:
    return json.loads((workspace / "state.json").read_text(encoding="utf-8"))["step"]


def test_checkpoint_prev_exists() -> None:
    cp = Checkpoint("s3://bucket/out", None)
    assert not cp.prev_exists()
    cp2 = Checkpoint("s3://bucket/out", "s3://bucket/prev")
    assert cp2.prev_exists()


def test_latest_checkpoint_prefers_newest_mtime() -> None:
    with tempfile.TemporaryDirectory() as td:
        root = pathlib.Path(td)
        old = root / "a" / "last.ckpt"
        new = root / "b" / "last.ckpt"
        old.parent.mkdir(parents=True)
        new.parent.mkdir(parents=True)
        old.write_text("x", encoding="utf-8")
        new.write_text("y", encoding="utf-8")
        got = latest_checkpoint(root)
        assert got == new


def test_latest_checkpoint_custom_glob() -> None:
    with tempfile.TemporaryDirectory() as td:
        root = pathlib.Path(td)
        (root / "a.ckpt").write_text("a", encoding="utf-8")
        assert latest_checkpoint(root, "*.ckpt") == root / "a.ckpt"


def test_latest_checkpoint_custom_sort_key() -> None:
    with tempfile.TemporaryDirectory() as td:
        root = pathlib.Path(td)
        low = root / "ckpt_step0.ckpt"
        high = root / "ckpt_step9.ckpt"
        low.write_text("a", encoding="utf-8")
        high.write_text("b", encoding="utf-8")
        got = latest_checkpoint(root, "*.ckpt", key=lambda p: int(p.stem.split("step")[-1]))
        assert got == high


# --- load_sync / save_sync (file URIs) ---


def test_checkpoint_directory_checkpoint_roundtrip_file_uris() -> None:
    """Directory layout: tar on remote; ``load_sync`` / ``save_sync`` roundtrip via ``file://`` URIs."""
    with tempfile.TemporaryDirectory() as td:
        base = pathlib.Path(td)
        prev_blob = base / "prev_sync"
        out_blob = base / "out_sync"
        _write_dir_checkpoint_tar(
            prev_blob,
            inner_name="state.json",
            text=json.dumps({"step": 1}),
        )
        cp = Checkpoint(out_blob.as_uri(), prev_blob.as_uri())
        assert cp.load_sync() is not None
        assert _read_state_step(cp.path) == 1
        (cp.path / "state.json").write_text(json.dumps({"step": 2}), encoding="utf-8")
        cp.save_sync(cp.path)
        cp2 = Checkpoint(base / "out_sync_2", out_blob.as_uri())
        assert cp2.load_sync() is not None
        assert _read_state_step(cp2.path) == 2


def test_checkpoint_tar_roundtrip() -> None:
    """Remote checkpoint is a single tar object; prev/next URIs are concrete file paths."""
    with tempfile.TemporaryDirectory() as td:
        base = pathlib.Path(td)
        prev_blob = base / "prev_flytecheckpoints"
        out_blob = base / "out_flytecheckpoints"
        out2_blob = base / "out2_flytecheckpoints"

        _write_dir_checkpoint_tar(
            prev_blob,
            inner_name="state.json",
            text=json.dumps({"step": 3}),
        )

        cp = Checkpoint(out_blob.as_uri(), prev_blob.as_uri())
        assert cp.load_sync() is not None
        state_file = cp.path / "state.json"
        assert state_file.is_file()
        assert _read_state_step(cp.path) == 3

        state_file.write_text(json.dumps({"step": 4}), encoding="utf-8")
        cp.save_sync(cp.path)

        cp2 = Checkpoint(out2_blob.as_uri(), out_blob.as_uri())
        assert cp2.load_sync() is not None
        assert _read_state_step(cp2.path) == 4


def test_checkpoint_single_non_tar_object_roundtrip() -> None:
    """Raw (non-tar) remote object is moved to ``path / payload``; :meth:`load_sync` returns that path."""
    with tempfile.TemporaryDirectory() as td:
        base = pathlib.Path(td)
        prev_blob = base / "prev_raw"
        out_blob = base / "out_raw"
        prev_blob.write_bytes(b"hello-checkpoint")

        cp = Checkpoint(out_blob.as_uri(), prev_blob.as_uri())
        payload_path = cp.load_sync()
        assert payload_path is not None
        assert payload_path == cp.path / _PAYLOAD_BASENAME
        assert payload_path.is_file()
        assert payload_path.read_bytes() == b"hello-checkpoint"

        cp.save_sync(b"next")

        cp2 = Checkpoint(base / "unused_out", out_blob.as_uri())
        p2 = cp2.load_sync()
        assert p2 is not None
        assert p2.read_bytes() == b"next"


# --- load / save (async) ---


def test_checkpoint_load_treats_empty_remote_as_no_checkpoint() -> None:  # adapted: sync (asyncio.run)
    """Download with zero bytes or missing listing is recoverable on load."""
    with tempfile.TemporaryDirectory() as td:  # adapted: no patch of flyte.storage.get (DownloadQueueEmpty);
        missing = pathlib.Path(td) / "prev_checkpoint_file"  # adapted: previous URI names no object
        cp = Checkpoint((pathlib.Path(td) / "out").as_uri(), missing.as_uri())  # adapted: file:// for s3://
        restored = asyncio.run(cp.load())  # adapted: asyncio.run for await
        assert restored is None


# Left out: test_checkpoint_load_treats_exception_group_download_queue_empty. It checks that
# flyte unwraps obstore's TaskGroup ExceptionGroup(DownloadQueueEmpty) raised by a mocked
# flyte.storage.get; this library has neither, and the case it stands for (no previous object)
# is the test above and the next one.


def test_checkpoint_load_sync_treats_sync_get_errors_as_no_checkpoint() -> None:
    with tempfile.TemporaryDirectory() as td:  # adapted: no patch of File.download_sync (DownloadQueueEmpty);
        missing = pathlib.Path(td) / "prev_checkpoint_file"  # adapted: previous URI names no object
        cp = Checkpoint((pathlib.Path(td) / "out").as_uri(), missing.as_uri())  # adapted: file:// for s3://
        assert cp.load_sync() is None


# Left out: test_checkpoint_load_sync_treats_exception_group_download_queue_empty, for the reason
# given above its async twin.


def test_checkpoint_load_save_async_on_task_loop() -> None:  # adapted: sync, body runs in asyncio.run
    async def body() -> None:  # adapted: Flyte's test body, unchanged, in a coroutine
        with tempfile.TemporaryDirectory() as td:
            base = pathlib.Path(td)
            remote_out = base / "checkpoint_out"
            remote_prev = base / "checkpoint_prev"
            _write_dir_checkpoint_tar(
                remote_prev,
                inner_name="state.json",
                text=json.dumps({"step": 7}),
            )
            cp = Checkpoint(remote_out.as_uri(), remote_prev.as_uri())
            assert await cp.load() is not None
            assert _read_state_step(cp.path) == 7
            await cp.save(cp.path / "state.json")

    asyncio.run(body())  # adapted: asyncio.run for the pytest-asyncio mark


def test_checkpoint_save_empty_directory_uploads_tar() -> None:
    with tempfile.TemporaryDirectory() as td:
        base = pathlib.Path(td)
        out_blob = base / "empty_dir_chkpt"
        cp = Checkpoint(out_blob.as_uri(), None)
        cp.save_sync(cp.path)

        cp2 = Checkpoint(base / "out2", out_blob.as_uri())
        assert cp2.load_sync() is not None
        assert list(cp2.path.iterdir()) == []


# --- TaskContext.checkpoint ---


def test_task_context_checkpoint_property_cached() -> None:
    with tempfile.TemporaryDirectory() as td:
        base = pathlib.Path(td)
        out = (base / "out").as_uri()
        prev = (base / "prev").as_uri()
        tctx = TaskContext(
            attempt_number=0,  # adapted: this TaskContext takes the attempt, not action/version/report/paths
            action_name="a0",  # adapted: for action=ActionID(name="a0")
            checkpoint_paths=CheckpointPaths(checkpoint_path=out, prev_checkpoint_path=prev),
        )
        assert tctx.checkpoint is not None
        assert tctx.checkpoint is tctx.checkpoint
        # adapted (next two): Flyte caches in tctx.data[CHECKPOINT_CACHE_KEY], we in tctx._checkpoint
        assert tctx._checkpoint is not None  # adapted: for CHECKPOINT_CACHE_KEY in tctx.data
        assert isinstance(tctx._checkpoint, Checkpoint)  # adapted: for tctx.data[CHECKPOINT_CACHE_KEY]


@documented_difference(  # adapted: Flyte's None is a documented difference
    "ctx().checkpoint in an attempt given no destination: raises NoCheckpointDestinationError",
    NoCheckpointDestinationError,
)
def test_task_context_checkpoint_none_without_prefix() -> None:
    tctx = TaskContext(
        attempt_number=0,  # adapted: this TaskContext takes the attempt, not action/version/report/paths
        action_name="a0",  # adapted: for action=ActionID(name="a0")
        checkpoint_paths=None,  # type: ignore[arg-type]  # adapted: Flyte's None, accepted at run time
    )
    assert tctx.checkpoint is None


@documented_difference(  # adapted: Flyte's None is a documented difference
    'Checkpoint("") (a blank destination): raises InvalidURIError',
    InvalidURIError,
)
def test_task_context_checkpoint_none_empty_dest() -> None:
    tctx = TaskContext(
        attempt_number=0,  # adapted: this TaskContext takes the attempt, not action/version/report/paths
        action_name="a0",  # adapted: for action=ActionID(name="a0")
        checkpoint_paths=CheckpointPaths(checkpoint_path="  ", prev_checkpoint_path=None),
    )
    assert tctx.checkpoint is None
