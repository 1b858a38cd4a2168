"""adv36: save_sharded(timeout=nan) is accepted, and with a rank missing the save never ends.

save_sharded's docstring: "ConfigurationError: a bad rank, world size, timeout, job or step".
FLYTE_CHECKPOINT_SHARD_TIMEOUT='nan' (or '-1', 'inf') is refused with ConfigurationError; the
same values given as ``timeout=`` are taken: nan waits for the missing rank forever (no error,
no progress), -1 fails the save with "rank 1 did not report within -1s".
The thread is joined with a hang guard only (a refusal is immediate, before any request).
"""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

from flyte_checkpoint.errors import ConfigurationError
from flyte_checkpoint.sharded import save_sharded

HANG_GUARD = 60.0


@pytest.mark.timeout(180)
@pytest.mark.parametrize("timeout", [math.nan, -1.0], ids=["nan", "negative"])
def test_bad_timeout_argument_is_refused(tmp_path: Path, timeout: float) -> None:
    folder = tmp_path / "r0"
    folder.mkdir()
    (folder / "a").write_bytes(b"a")
    outcome: list[BaseException | str] = []

    def rank0() -> None:  # rank 1 never comes
        try:
            uri = str(tmp_path / "store" / "ckpt")
            save_sharded(uri, folder, rank=0, world_size=2, job="j", timeout=timeout)
            outcome.append("returned")
        except BaseException as e:
            outcome.append(e)

    t = threading.Thread(target=rank0, daemon=True)
    t.start()
    t.join(HANG_GUARD)
    assert not t.is_alive(), (
        f"save_sharded(timeout={timeout}), a rank missing, still runs after {HANG_GUARD:.0f} s"
    )
    assert len(outcome) == 1 and isinstance(outcome[0], ConfigurationError), outcome
