"""adv36: a sharded save commits a union that a load in the same environment refuses.

docs/contract.md: "A save never stores an object that a load refuses" and "The load limits
(FLYTE_CHECKPOINT_MAX_MEMBERS, FLYTE_CHECKPOINT_MAX_UNPACKED_BYTES) apply to a save as a load in
the same environment would apply them". A plain save of the union is refused; a sharded save,
each rank's shard within the limit, commits the union over the previous good checkpoint, and the
next load raises UnsafeArchiveError: the previous checkpoint is gone and nothing loads.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.sharded import save_sharded

CASES = {
    # variable, limit, files of each rank (name -> size): each rank fits, the union does not
    "members": ("FLYTE_CHECKPOINT_MAX_MEMBERS", "10", {f"f{i}": 1 for i in range(7)}),
    "bytes": ("FLYTE_CHECKPOINT_MAX_UNPACKED_BYTES", str(1 << 20), {"f.bin": 700_000}),
}


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("scheme", ["file", "memory"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_sharded_union_over_the_load_limits_is_not_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scheme: str, case: str
) -> None:
    variable, limit, files = CASES[case]
    uri = (
        str(tmp_path / "store" / "ckpt")
        if scheme == "file"
        else f"memory://adv36-limits-{case}-{tmp_path.name}/ckpt"
    )
    good = tmp_path / "good"
    good.mkdir()
    (good / "state").write_bytes(b"the previous good checkpoint")
    with fc.Checkpoint(uri) as cp:
        cp.save_sync(good)
    monkeypatch.setenv(variable, limit)
    shards = []
    for r in range(2):
        d = tmp_path / f"r{r}"
        d.mkdir()
        for name, size in files.items():
            (d / f"r{r}-{name}").write_bytes(bytes([r + 1]) * size)
        shards.append(d)
    # each rank's shard alone saves and loads under the limit
    with fc.Checkpoint(uri + "-one") as cp:
        cp.save_sync(shards[0])
    with fc.Checkpoint(uri + "-one.next", uri + "-one") as cp:
        assert cp.load_sync() is not None
    outcomes: list[object] = [None, None]

    def rank(r: int) -> None:
        try:
            save_sharded(uri, shards[r], rank=r, world_size=2, job="j", timeout=60)
            outcomes[r] = "ok"
        except Exception as e:
            outcomes[r] = e

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with fc.Checkpoint(uri + ".next", uri) as cp:
        path = cp.load_sync()  # today: UnsafeArchiveError (more than 10 members / beyond the limit)
        assert path is not None
        restored = _tree(path)
    if outcomes == ["ok", "ok"]:
        union = {**_tree(shards[0]), **_tree(shards[1])}
        assert restored == union
    else:
        assert all(isinstance(o, Exception) for o in outcomes), outcomes
        assert restored == {"state": b"the previous good checkpoint"}
