"""The main job, end to end: a task that crashes twice and resumes from its checkpoint.

Everything happens on the local file backend, under a temporary folder (or under
$FLYTE_CHECKPOINT_ROOT if it is set). Run: make demo   (or: python examples/demo.py)
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile

import flyte_checkpoint as fc

STEPS = 12
CRASHES = {4: "simulated spot-instance pre-emption", 9: "simulated out-of-memory kill"}


@fc.task(retries=2)
def long_job(steps: int) -> int:
    c = fc.ctx()
    cp = c.checkpoint
    print(f"\n== attempt {c.attempt_number} ==")
    print(f"   saving to:    {cp.remote_destination}")
    print(f"   resuming from: {cp.remote_source or '(nothing: first attempt)'}")
    path = cp.load_sync()
    done = int(path.read_bytes()) if path else 0
    print(f"   restored progress: {done} of {steps} steps" if path else "   no checkpoint yet: from 0")
    for step in range(done + 1, steps + 1):
        if step in CRASHES:
            reason = CRASHES.pop(step)
            print(f"   step {step}: CRASH ({reason})")
            raise RuntimeError(reason)
        cp.save_sync(str(step).encode())
        print(f"   step {step}: done, checkpoint saved")
    return steps


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="   [log] %(message)s")
    given = os.environ.get("FLYTE_CHECKPOINT_ROOT")
    root = given or tempfile.mkdtemp(prefix="flyte-checkpoint-demo-")
    os.environ["FLYTE_CHECKPOINT_ROOT"] = root
    print(f"flyte-checkpoint demo: a {STEPS}-step job that crashes twice, checkpoints under {root}")
    try:
        result = long_job(STEPS)
    finally:
        if not given:  # a folder of our own: leave nothing behind in the temp directory
            shutil.rmtree(root, ignore_errors=True)
    print(f"\nfinished all {result} steps in 3 attempts; no step ran twice after its checkpoint was saved")
    if not given:
        print(
            f"(removed {root}; to keep the checkpoints, set FLYTE_CHECKPOINT_ROOT to a folder and"
            " FLYTE_CHECKPOINT_KEEP_RUNS=1: a run that succeeds removes its own)"
        )


if __name__ == "__main__":
    main()
