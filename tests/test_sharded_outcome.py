"""When rank 0 cannot write a sharded save's outcome marker (issue 36, item 5): the commit (or
the refusal) stands. Rank 0 returns (or raises the save's own error), with a warning naming what
the others will see; the others raise at once, from the session marker, saying whether rank 0
committed, never "Nothing was committed" over a committed checkpoint nor the store's bare error."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import CheckpointPermissionError, ShardedSaveError
from flyte_checkpoint.storage.blobstore import BlobWriter
from flyte_checkpoint.testing.counting import CountingLatencyStore
from tests import shardranks as sr


class NoOutcomeStore(CountingLatencyStore):
    """Refuses every write of a sharded save's outcome marker (``*.fcp-shard/*.result``), as a
    store answering 403 (or 503 past the retries) to that one write does."""

    @staticmethod
    def _refused(uri: str) -> bool:
        return ".fcp-shard/" in uri and uri.endswith(".result")

    def write_bytes(self, uri: str, data: bytes) -> None:
        if self._refused(uri):
            raise CheckpointPermissionError(f"permission denied to write {uri} (the test's store)")
        super().write_bytes(uri, data)

    def open_write(self, uri: str) -> BlobWriter:
        if self._refused(uri):
            raise CheckpointPermissionError(f"permission denied to write {uri} (the test's store)")
        return super().open_write(uri)


def _setup(tmp_path: Path, scheme: str, files: list[dict[str, bytes]]) -> tuple[str, list[Path]]:
    fc.register_store(scheme, (scheme,), NoOutcomeStore)
    uri = f"{scheme}://b/{tmp_path.name}/ckpt"
    sr.save_previous(uri, tmp_path)
    return uri, sr.folders_of(tmp_path, files)


def _save(uri: str, folders: list[Path]) -> list[object]:
    """Both ranks as threads; the timeout far beyond the test's own, so a rank that waited for it
    would fail the test (pytest-timeout) rather than pass slowly."""
    return sr.rank_outcomes(uri, folders, job="outcome", timeout=3600)


@pytest.mark.timeout(120)
def test_an_outcome_not_written_after_the_commit_leaves_rank_0_returning_and_the_others_told_it_committed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Proves: with the outcome's write refused after the commit, rank 0 returns (the save is
    committed) and warns naming what the others see; rank 1 raises at once that rank 0 committed
    (not "Nothing was committed", not the store's error); the new checkpoint loads."""
    uri, folders = _setup(tmp_path, "nooutcome", [{"r0": bytes(100)}, {"r1": bytes([1]) * 100}])
    with caplog.at_level(logging.WARNING, logger="flyte_checkpoint"):
        outcomes = _save(uri, folders)
    assert outcomes[0] == "ok"
    told = outcomes[1]
    assert isinstance(told, ShardedSaveError), told
    assert "rank 0 committed the sharded save" in str(told) and "Nothing was committed" not in str(told)
    assert "was committed, but its outcome could not be written" in caplog.text
    assert "permission denied" in caplog.text and "rank 0 announced no outcome" in caplog.text
    assert sr.restore(uri, tmp_path) == {"r0": bytes(100), "r1": bytes([1]) * 100}


@pytest.mark.timeout(120)
def test_an_outcome_not_written_for_a_failed_save_leaves_every_rank_saying_nothing_was_committed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Proves: when the save fails (two ranks wrote one name) and its outcome cannot be written,
    rank 0 raises the save's own error (not the store's) and rank 1 raises at once that nothing
    was committed; the previous checkpoint stays."""
    uri, folders = _setup(tmp_path, "nooutcomefail", [{"same": b"0"}, {"same": b"1"}])
    with caplog.at_level(logging.WARNING, logger="flyte_checkpoint"):
        outcomes = _save(uri, folders)
    assert isinstance(outcomes[0], ShardedSaveError) and "both wrote 'same'" in str(outcomes[0])
    assert isinstance(outcomes[1], ShardedSaveError), outcomes[1]
    told = str(outcomes[1])
    assert "rank 0 did not commit" in told and "previous checkpoint is unchanged" in told
    assert "was not committed (the previous checkpoint is unchanged), but its outcome" in caplog.text
    assert sr.restore(uri, tmp_path) == {"prev": b"the previous checkpoint"}


class NoSweepStore(CountingLatencyStore):
    """Refuses every listing of a sharded save's whole coordination prefix (what the sweeps after
    the commit list; the gathering writes' sweep among them), as a store whose listing fails
    past the retries does."""

    def list(self, prefix: str):  # type: ignore[override]
        if prefix.endswith(".fcp-shard/"):
            raise CheckpointPermissionError(f"permission denied to list {prefix} (the test's store)")
        return super().list(prefix)


@pytest.mark.timeout(120)
def test_a_sweep_that_fails_after_the_commit_leaves_every_rank_returning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Proves: when removing what earlier saves left fails after the commit, the save still
    returns on every rank (it was committed; a warning says the next save tries again), instead
    of every rank raising "Nothing was committed" over the new checkpoint."""
    fc.register_store("nosweep", ("nosweep",), lambda: NoSweepStore(multipart=False))  # gathers
    uri = f"nosweep://b/{tmp_path.name}/ckpt"
    folders = []
    for r in range(2):
        d = tmp_path / f"r{r}"
        d.mkdir()
        (d / f"r{r}").write_bytes(bytes([r]) * 100)
        folders.append(d)
    with caplog.at_level(logging.WARNING, logger="flyte_checkpoint"):
        outcomes = _save(uri, folders)
    assert outcomes == ["ok", "ok"]
    assert "was committed, but what earlier saves left could not be removed" in caplog.text
    assert sr.restore(uri, tmp_path) == {"r0": bytes(100), "r1": bytes([1]) * 100}


class NoReportsListedStore(CountingLatencyStore):
    """Refuses every listing of a sharded save's reports (``*.fcp-shard/<session>.done-*``), as
    a store answering 403 to rank 0's listing does."""

    def list(self, prefix: str) -> Iterator[str]:
        if ".fcp-shard/" in prefix and ".done-" in prefix:
            raise CheckpointPermissionError(f"permission denied to list {prefix} (the test's store)")
        return super().list(prefix)


@pytest.mark.timeout(120)
def test_rank_0_failing_before_it_decides_tells_the_others_at_once(tmp_path: Path) -> None:
    """Proves: when rank 0 cannot gather the reports (its listing refused), it raises the store's
    error and the other ranks are told at once that nothing was committed, naming the cause,
    instead of waiting for their timeout (3600 s here, far past the test's); the previous
    checkpoint stays. Before: rank 1 waited its whole timeout for an outcome never written."""
    fc.register_store("noreports", ("noreports",), NoReportsListedStore)
    uri = f"noreports://b/{tmp_path.name}/ckpt"
    sr.save_previous(uri, tmp_path)
    folders = sr.make_folders(tmp_path, 2)
    outcomes = _save(uri, folders)
    assert isinstance(outcomes[0], CheckpointPermissionError), outcomes[0]
    assert isinstance(outcomes[1], ShardedSaveError), outcomes[1]
    told = str(outcomes[1])
    assert "rank 0 failed before it could commit" in told and "permission denied to list" in told, told
    assert "nothing was committed" in told, told
    assert sr.restore(uri, tmp_path) == {"prev": b"the previous checkpoint"}
