"""flyte_sharded_dcp: torch_sharded_dcp.py's 4 CPU ranks inside a Flyte task (Flyte's local
mode): one sharded checkpoint; a rank is killed, Flyte retries the task, the ranks resume exactly.

The task's body takes its checkpoint from ``fc.ctx().checkpoint`` (the destination Flyte gave
the attempt, and what to resume from) and starts the job of examples/torch_sharded_dcp.py
with torchrun: 4 gloo ranks on this machine, each saving its ``torch.distributed.checkpoint``
shard with ``save_sharded`` into that one checkpoint. In the first attempt rank 1 SIGKILLs
itself after epoch ``--kill-at``'s save, torchrun ends the job and the task raises; **Flyte's
local mode retries the task** (``retries=flyte.RetryStrategy(count=1)``; our ``fc.task`` is
not used: inside a Flyte task it leaves the retries to Flyte). The retry's
``fc.ctx().checkpoint`` resumes from the object the killed attempt committed (in local mode
every attempt saves to the same destination), and the ranks restore it with ``load_sharded``
and carry on to the weights of a run that was never killed. Then Flyte's own reader,
``flyte.Checkpoint(...).load_sync()``, restores the object (one gzip tar of the union of the
ranks' folders, also listed with ``tarfile``) and DCP loads the final weights from that tree.

Why the task starts the ranks itself: Flyte's multi-rank tasks come from the plugin
flyteplugins-pytorch (2.12.1 for flyte 2.12.1, ``Elastic(nnodes=1, nproc_per_node=4)``). On
a cluster its task runs torch's ``elastic_launch`` with ``nproc_per_node`` processes, but in
local mode (``TaskContext.mode == "local"``) its ``execute`` calls the function once, in the
calling process: run this way, such a task's body saw no ``RANK`` or ``WORLD_SIZE`` and ran in
the caller's own process. So local mode gives one process, and this body launches the 4 ranks
(torchrun is the command-line face of ``elastic_launch``). The ranks are processes of their
own, where Flyte's task context does not reach: the body hands them the checkpoint's two URIs.

Run: python examples/flyte_sharded_dcp.py [--raw /tmp/flyte-raw] [--epochs 6] [--kill-at 3]
Needs: pip install torch flyte==2.12.1
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import tarfile
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path

import flyte
from torch_sharded_dcp import launch, make_model, weights

import flyte_checkpoint as fc

env = flyte.TaskEnvironment(name="flyte_sharded_dcp")


@env.task(retries=flyte.RetryStrategy(count=1, backoff=flyte.Backoff(base=timedelta(0))))
def train_sharded(epochs: int, kill_at: int) -> str:
    """One attempt: the 4 ranks train from this attempt's checkpoint; returns its destination."""
    cp = fc.ctx().checkpoint
    assert cp is not None, "Flyte gave this attempt no checkpoint destination"
    print(f"task attempt: checkpoint source {cp.remote_source}", flush=True)
    code = launch(cp.remote_destination, cp.remote_source, epochs, kill_at)
    if code != 0:
        raise RuntimeError(f"the ranks failed (torchrun exit code {code}); Flyte retries the task")
    return cp.remote_destination


def read_with_flyte(dest: str, work: Path) -> None:
    """Flyte's own reader on the object: its tar members, the tree ``flyte.Checkpoint`` restores,
    and the weights ``torch.distributed.checkpoint`` loads from that tree."""
    import torch
    import torch.distributed.checkpoint as dcp

    body = Path(dest.removeprefix("file://")).read_bytes()
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:  # one gzip tar
        names = sorted(m.name for m in tar.getmembers() if m.isfile())
    print(f"tar members: {names}", flush=True)
    theirs = flyte.Checkpoint(str(work / "next"), dest)  # its workspace lives as long as it does
    restored = theirs.load_sync()
    assert restored is not None and restored.is_dir(), restored
    print(f"flyte.Checkpoint restored: {sorted(str(p.relative_to(restored)) for p in restored.rglob('*'))}")
    model = make_model()
    state = {"model": model.state_dict(), "epoch": torch.tensor(-1)}
    dcp.load(state, checkpoint_id=str(restored))  # one process, no process group
    model.load_state_dict(state["model"])
    print(f"weights read through flyte.Checkpoint: {weights(model)} (epoch {int(state['epoch'])})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw", default=None, help="Flyte's raw data path (default: a temporary folder)")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument(
        "--kill-at", type=int, default=3, help="epoch after which rank 1 is killed (-1: never)"
    )
    args = parser.parse_args()
    flyte.init()
    name = f"flyte-sharded-dcp-{uuid.uuid4().hex[:12]}"
    with tempfile.TemporaryDirectory() as tmp:
        raw = args.raw or os.path.join(tmp, "raw")
        run_ctx = flyte.with_runcontext(
            mode="local",
            name=name,
            raw_data_path=raw,
            run_base_dir=os.path.join(tmp, "meta"),
            disable_run_cache=True,
        )
        try:
            dest = run_ctx.run(train_sharded, args.epochs, args.kill_at).outputs()[0]
        finally:  # Flyte's local mode keeps each run's metadata here, whatever run_base_dir says
            shutil.rmtree(Path("/tmp/flyte/metadata") / name, ignore_errors=True)
        print(f"checkpoint: {dest}", flush=True)
        read_with_flyte(dest, Path(tmp))


if __name__ == "__main__":
    main()
