"""Staging on every backend (issue 32, items 7 and 14): what a folder save stores while another
save's staging copy sits in the folder, and what a background save cut by ``close()``'s timeout
reports, on file, S3, GCS and Azure (their test servers on 127.0.0.1, see backends.py).

The upload that must be in flight is held by a spy-store hook at a call it makes (the whole-file
upload, or the writer's opening); nothing waits on time.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import OperationCancelledError, SaveTimeoutError
from flyte_checkpoint.uri import scheme_of
from tests import test_staging
from tests.reliability import backends
from tests.reliability.backends import Backend, s3_open_uploads
from tests.reliability.gates import HANG
from tests.spystore import spying
from tests.test_staging import Hold, loaded_bytes, loaded_tree, staging_in

backend = backends.backend
backend_pool = backends.backend_pool
temp_elsewhere = test_staging.temp_elsewhere
private_tmp = test_staging.private_tmp


def test_a_folder_save_leaves_out_another_saves_staging_copy(
    backend: Backend, tmp_path: Path, temp_elsewhere: Path
):
    """Proves (item 7), on every backend: with the temp folder on another file system, a
    background save of ``run/model.pt`` held mid-upload has its staging copy in ``run/``; a
    folder save of ``run/`` then (synchronous and background) stores ``run/`` as it is."""
    run = tmp_path / "run"
    run.mkdir()
    weights = os.urandom(300_000)
    (run / "model.pt").write_bytes(weights)
    (run / "step.txt").write_text("3")
    real = backend.fresh("model")
    hold = Hold("upload_file")
    with spying(scheme_of(real), hold.hook) as spy:
        cp = fc.Checkpoint(spy.uri_for(real))
        handle = cp.save_background(run / "model.pt")
        hold.wait_reached()
        assert len(staging_in(run)) == 1
        sync, background = backend.fresh("sync"), backend.fresh("background")
        fc.Checkpoint(sync).save_sync(run)
        with fc.Checkpoint(background) as other:
            other.save_background(run).result(timeout=HANG)
        hold.release.set()
        handle.result(timeout=HANG)
        cp.close()
    want = {"model.pt": weights, "step.txt": b"3"}
    assert loaded_tree(sync, tmp_path) == want
    assert loaded_tree(background, tmp_path) == want
    assert loaded_bytes(real, tmp_path) == weights
    assert staging_in(run) == []


def test_a_save_cut_by_closes_timeout_reports_cancelled_and_keeps_the_previous(
    backend: Backend, tmp_path: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch
):
    """Proves (item 14), on every backend: a background save of a folder held before its
    upload begins when ``close()`` times out (close() removes its staging copy) raises
    OperationCancelledError from its handle; the previous checkpoint stays (S3: no multipart
    upload left open). (A file, and other points: tests/test_staging.py.)"""
    data = tmp_path / "model"
    data.mkdir()
    (data / "weights.bin").write_bytes(os.urandom(1 << 20))
    real = backend.fresh("cut")
    fc.Checkpoint(real).save_sync(b"previous")
    hold = Hold("open_write")
    with spying(scheme_of(real), hold.hook) as spy:
        cp = fc.Checkpoint(spy.uri_for(real))
        handle = cp.save_background(data)
        hold.wait_reached()
        assert staging_in(Path(cp.path).parent), "the staging copy is not under the local root"
        monkeypatch.setenv("FLYTE_CHECKPOINT_CLOSE_TIMEOUT", "0")
        with pytest.raises(SaveTimeoutError):
            cp.close()
        hold.release.set()
        with pytest.raises(OperationCancelledError):
            handle.result(timeout=HANG)
    assert loaded_bytes(real, tmp_path) == b"previous"
    if backend.name == "s3":
        assert s3_open_uploads(backend, real) == []
