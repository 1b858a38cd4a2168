"""adv36: a second process reporting as a rank whose save was committed is told so.

save_sharded's docstring: ShardedSaveError "also when two processes reported as this rank and
the other's part was committed: this call's files are not in the checkpoint". Today the error
says "rank 0 did not open the sharded save ... raise the timeout", after the whole timeout,
though rank 0 opened and committed that very save (its session and outcome markers remain).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from flyte_checkpoint.errors import ShardedSaveError
from flyte_checkpoint.sharded import save_sharded


def _folder(root: Path, name: str, files: dict[str, bytes]) -> Path:
    d = root / name
    d.mkdir()
    for k, v in files.items():
        (d / k).write_bytes(v)
    return d


@pytest.mark.timeout(120)
@pytest.mark.parametrize("scheme", ["file", "memory"])
def test_late_duplicate_rank_is_told_the_save_was_committed(tmp_path: Path, scheme: str) -> None:
    uri = str(tmp_path / "store" / "ckpt") if scheme == "file" else f"memory://adv36-dup-{tmp_path.name}/ckpt"
    a = _folder(tmp_path, "r0", {"a.bin": b"A" * 1000})
    b = _folder(tmp_path, "r1", {"b.bin": b"B" * 1000})
    x = _folder(tmp_path, "r1x", {"x.bin": b"X" * 1000})
    errors: list[BaseException] = []

    def rank(folder: Path, r: int) -> None:
        try:
            save_sharded(uri, folder, rank=r, world_size=2, job="j", step=5, timeout=3)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(a, 0)), threading.Thread(target=rank, args=(b, 1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    # the same job's same save (step 5), a second process claiming rank 1, after the commit
    with pytest.raises(ShardedSaveError) as info:
        save_sharded(uri, x, rank=1, world_size=2, job="j", step=5, timeout=3)
    message = str(info.value)
    assert "did not open" not in message, message
    assert "committed" in message or "already" in message, message
