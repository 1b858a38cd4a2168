"""torch_sharded_dcp: 4 CPU ranks (torchrun, gloo) save with torch.distributed.checkpoint, one
checkpoint object for all of them; a rank is killed, the job restarts and resumes exactly.

Each rank trains the same small linear model on its own slice of the data (gradients averaged
with ``all_reduce``, as DDP does) and keeps a per-rank counter. After every epoch each rank
writes ``torch.distributed.checkpoint`` files into its own folder (rank r writes
``__r_0.distcp``, rank 0 also ``.metadata``), and ``save_sharded`` makes the union of the
four folders one gzip tar at ``--dest``, committed once every rank has written its part.
With ``--kill-at N``, rank 1 of a job that started from scratch SIGKILLs itself after epoch
N's save, and torchrun ends the job; the script then starts the job again (as a retried Flyte
task would), each rank restores the whole tree with ``load_sharded`` and ``dcp.load`` and
carries on, so the final weights equal those of a run that was never killed.
examples/flyte_sharded_dcp.py runs the same ranks (:func:`worker`) in a Flyte task, started by
:func:`launch` or by Flyte's pytorch plugin.

Run: python examples/torch_sharded_dcp.py [--dest /tmp/sharded/ckpt] [--epochs 6] [--kill-at 3]
(it starts torchrun itself). Needs: pip install torch
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from typing import Any

WORLD = 4


def make_model() -> Any:
    """The model every rank trains (and a reader loads the checkpoint into): seeded, so each
    rank and each run starts from the same weights."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Linear(8, 1)


def weights(model: Any) -> list[float]:
    """The model's weights and bias, exactly (a float's repr round-trips): what runs compare."""
    return model.weight.flatten().tolist() + model.bias.tolist()


def worker(dest: str, source: str | None, epochs: int, kill_at: int) -> None:
    """One rank (started by torchrun or elastic_launch): train ``epochs`` epochs, resuming from
    the sharded checkpoint at ``source``, saving to ``dest`` after each; in a job that started
    from scratch, rank 1 SIGKILLs itself after epoch ``kill_at``'s save."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    import flyte_checkpoint as fc
    from flyte_checkpoint.sharded import load_sharded, save_sharded

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(256, 8, generator=g)
    y = x @ torch.arange(1.0, 9.0).unsqueeze(1) + 0.5
    state = {"model": model.state_dict(), "epoch": torch.tensor(-1), f"seen.{rank}": torch.zeros(1)}

    with fc.Checkpoint(dest, source) as cp:
        restored = load_sharded(cp)  # the whole tree, on every rank
        if restored is not None:
            dcp.load(state, checkpoint_id=str(restored))
            model.load_state_dict(state["model"])
        start = int(state["epoch"]) + 1
        if rank == 0:
            print(f"starting at epoch {start}", flush=True)
        folder = cp.path.parent / "dcp"  # this rank's own folder (the workspace is restored into)
        for epoch in range(start, epochs):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
            optimizer.step()
            state["epoch"] = torch.tensor(epoch)
            state[f"seen.{rank}"] += len(x)
            state["model"] = model.state_dict()
            dcp.save(state, checkpoint_id=str(folder))
            save_sharded(cp, folder)
            if rank == 0:
                print(f"  epoch {epoch}: loss {loss.item():.6f}, sharded checkpoint saved", flush=True)
            if epoch == kill_at and start == 0 and rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)  # torchrun ends every rank
    if rank == 0:
        print(f"weights: {weights(model)}", flush=True)
    dist.destroy_process_group()


def launch(dest: str, source: str | None, epochs: int, kill_at: int) -> int:
    """Run the job once: torchrun starts :data:`WORLD` ranks of this script on this machine
    (gloo, CPU); returns torchrun's exit code (not 0 when a rank died)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={WORLD}"]
    cmd += [os.path.abspath(__file__), "--dest", dest, "--source", source or ""]
    cmd += ["--epochs", str(epochs), "--kill-at", str(kill_at)]
    return subprocess.call(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", default=None, help="the checkpoint's URI (default: a temporary folder)")
    parser.add_argument(
        "--source", default=None, help="the checkpoint to resume from (default: --dest; '': none)"
    )
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument(
        "--kill-at", type=int, default=3, help="epoch after which rank 1 is killed (-1: never)"
    )
    args = parser.parse_args()
    if "RANK" in os.environ:  # started by torchrun: one rank
        source = args.dest if args.source is None else args.source or None
        worker(args.dest, source, args.epochs, args.kill_at)
        return
    with tempfile.TemporaryDirectory() as tmp:
        dest = args.dest or os.path.join(tmp, "ckpt")
        for attempt in range(2):
            print(f"attempt {attempt}", flush=True)
            code = launch(dest, dest, args.epochs, args.kill_at)
            if code == 0:
                return
            print(f"attempt {attempt} failed (exit code {code}): starting the job again", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
