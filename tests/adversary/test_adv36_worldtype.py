"""adv36: world_size=2.0 and world_size=True are not refused as a bad world size.

save_sharded's docstring: "ConfigurationError: a bad rank, world size, timeout, job or step";
step=True and step=1.5 are refused so ("give save_sharded a whole number"). world_size=2.0
(a world size read as a float) makes rank 0 raise a bare TypeError after it opened the save,
and rank 1 waits out its whole timeout ("rank 0 announced no outcome"); world_size=True is
taken as a world of 1: rank 0 commits its own folder alone over the previous checkpoint and
returns, while rank 1 is refused ("outside a world of True").
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from flyte_checkpoint.errors import ConfigurationError
from flyte_checkpoint.sharded import save_sharded


@pytest.mark.timeout(180)
@pytest.mark.parametrize("world", [2.0, True], ids=["float", "bool"])
def test_world_size_of_the_wrong_type_is_refused_on_every_rank(tmp_path: Path, world: object) -> None:
    uri = str(tmp_path / "store" / "ckpt")
    outcomes: dict[int, object] = {}
    folders = []
    for r in range(2):
        d = tmp_path / f"r{r}"
        d.mkdir()
        (d / f"f{r}").write_bytes(b"x")
        folders.append(d)

    def rank(r: int) -> None:
        try:
            save_sharded(uri, folders[r], rank=r, world_size=world, job="j", timeout=5)  # type: ignore[arg-type]
            outcomes[r] = "ok"
        except Exception as e:
            outcomes[r] = e

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(outcomes[r], ConfigurationError) for r in range(2)), outcomes
    assert not (tmp_path / "store" / "ckpt").exists()
