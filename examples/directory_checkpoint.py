"""A directory checkpoint: a training loop keeps its state as files in a folder.

Each epoch writes ``state.json`` and a weights file into the checkpoint workspace and
saves the folder (stored as one gzip tarball). A crash in epoch 2 and another in epoch 4
cost nothing: the next attempt restores the folder and carries on.

Run: python examples/directory_checkpoint.py
"""

from __future__ import annotations

import json
import os
import random

import flyte_checkpoint as fc

CRASH_AT = {2, 4}


@fc.task(retries=2)
def train(epochs: int) -> dict:
    cp = fc.ctx().checkpoint
    restored = cp.load_sync()
    workspace = cp.path  # a private folder; restored state is already in it
    state = json.loads((restored / "state.json").read_text()) if restored else {"epoch": 0, "loss": []}
    print(f"attempt {fc.ctx().attempt_number}: resuming after epoch {state['epoch']}")
    for epoch in range(state["epoch"] + 1, epochs + 1):
        if epoch in CRASH_AT:
            CRASH_AT.discard(epoch)
            raise RuntimeError(f"simulated out-of-memory kill in epoch {epoch}")
        state["epoch"] = epoch
        state["loss"].append(round(1 / epoch + random.random() / 100, 4))
        (workspace / "weights").mkdir(exist_ok=True)
        (workspace / "weights" / "layer0.bin").write_bytes(os.urandom(4096))
        (workspace / "state.json").write_text(json.dumps(state))
        cp.save_sync(workspace)
        print(f"  epoch {epoch} done, checkpoint saved")
    return state


if __name__ == "__main__":
    final = train(5)
    print("trained epochs:", final["epoch"], "losses:", final["loss"])
