"""torch_sharded_dcp: 4 CPU ranks (torchrun, gloo) save with torch.distributed.checkpoint, one
checkpoint object for all of them; a rank is killed, the job restarts and resumes exactly.

Each rank trains the same small linear model on its own slice of the data (gradients averaged
with ``all_reduce``, as DDP does) and keeps a per-rank counter. After every epoch each rank
writes ``torch.distributed.checkpoint`` files into its own folder (rank r writes
``__r_0.distcp``, rank 0 also ``.metadata``), and ``save_sharded`` makes the union of the
four folders one gzip tar at ``--dest``, committed once every rank has written its part.
With ``--kill-at N``, rank 1 SIGKILLs itself after epoch N's save in the first attempt, and
torchrun ends the job; the script then starts the job again (as a retried Flyte task would),
each rank restores the whole tree with ``load_sharded`` and ``dcp.load`` and carries on, so
the final weights equal those of a run that was never killed.

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

WORLD = 4


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    import flyte_checkpoint as fc
    from flyte_checkpoint.sharded import load_sharded, save_sharded

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    attempt = int(os.environ.get("EXAMPLE_ATTEMPT", "0"))
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(256, 8, generator=g)
    y = x @ torch.arange(1.0, 9.0).unsqueeze(1) + 0.5
    state = {"model": model.state_dict(), "epoch": torch.tensor(-1), f"seen.{rank}": torch.zeros(1)}

    with fc.Checkpoint(args.dest, args.dest) as cp:
        restored = load_sharded(cp)  # the whole tree, on every rank
        if restored is not None:
            dcp.load(state, checkpoint_id=str(restored))
            model.load_state_dict(state["model"])
        start = int(state["epoch"]) + 1
        if rank == 0:
            print(f"attempt {attempt}: starting at epoch {start}", flush=True)
        folder = cp.path.parent / "dcp"  # this rank's own folder (the workspace is restored into)
        for epoch in range(start, args.epochs):
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
            if epoch == args.kill_at and attempt == 0 and rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)  # torchrun restarts every rank
    if rank == 0:
        weights = [round(v, 6) for v in model.weight.flatten().tolist() + model.bias.tolist()]
        print(f"weights: {weights}", flush=True)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", default=None, help="the checkpoint's URI (default: a temporary folder)")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument(
        "--kill-at", type=int, default=3, help="epoch after which rank 1 is killed (-1: never)"
    )
    args = parser.parse_args()
    if "RANK" in os.environ:
        worker(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        dest = args.dest or os.path.join(tmp, "ckpt")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={WORLD}"]
        cmd += [__file__, "--dest", dest, "--epochs", str(args.epochs), "--kill-at", str(args.kill_at)]
        for attempt in range(2):
            code = subprocess.call(
                cmd, env={**os.environ, "OMP_NUM_THREADS": "1", "EXAMPLE_ATTEMPT": str(attempt)}
            )
            if code == 0:
                return
            print(f"attempt {attempt} failed (exit code {code}): starting the job again", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
