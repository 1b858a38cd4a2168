"""adv36: rank 0 raises a bare store error after it committed the sharded save.

docs/sharded.md: save_sharded "returns once committed, or raises on every rank"; its docstring:
when it raises (ShardedSaveError) "nothing was committed and the previous checkpoint is
unchanged". When rank 0 cannot write the outcome marker after the commit (a 403 or a 503 that
outlasts the retries on `<uri>.fcp-shard/<session>.result`), the new object is committed, yet
rank 0 raises the marker write's error (CheckpointPermissionError "permission denied to write
...result"), not a ShardedSaveError and without a word that the checkpoint was committed: a
caller takes the previous checkpoint for the current one. (Seen on S3 through moto and the fault
proxy: probes/p32_outcome_fail.py result 403 / 503; here on the memory store, the counting
wrapper taking the one object from many writers as S3 does.)
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import CheckpointPermissionError
from flyte_checkpoint.sharded import save_sharded
from flyte_checkpoint.storage.blobstore import BlobWriter
from flyte_checkpoint.testing.counting import CountingLatencyStore


class _NoOutcome(CountingLatencyStore):
    """Refuses every write of a sharded save's outcome marker (`*.fcp-shard/*.result`)."""

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


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.timeout(180)
def test_rank0_error_after_the_commit_says_it_committed(tmp_path: Path) -> None:
    store = _NoOutcome()
    fc.register_store("adv36nooutcome", ("adv36nooutcome",), lambda: store)
    uri = f"adv36nooutcome://b/{tmp_path.name}/ckpt"
    prev = tmp_path / "prev"
    prev.mkdir()
    (prev / "prev").write_bytes(b"the previous good checkpoint")
    with fc.Checkpoint(uri) as cp:
        cp.save_sync(prev)
    folders = []
    for r in range(2):
        d = tmp_path / f"r{r}"
        d.mkdir()
        (d / f"r{r}").write_bytes(bytes([r]) * 100)
        folders.append(d)
    outcomes: dict[int, Any] = {}

    def rank(r: int) -> None:
        try:
            save_sharded(uri, folders[r], rank=r, world_size=2, job="j", timeout=5)
            outcomes[r] = "ok"
        except Exception as e:
            outcomes[r] = e

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with fc.Checkpoint(uri + ".next", uri) as cp:
        path = cp.load_sync()
        assert path is not None
        committed = _tree(path) == {"r0": bytes(100), "r1": bytes([1]) * 100}
    assert committed  # the new object is there
    first = outcomes[0]
    if first != "ok":
        message = str(first)
        assert "committed" in message and "Nothing was committed" not in message, repr(first)
