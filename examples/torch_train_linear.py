"""train_linear: PyTorch training that saves model, optimizer and epoch every epoch, and resumes.

Fits ``y = 3x + 2`` with a one-weight linear model and SGD with momentum, on CPU. After each
epoch the model's and the optimizer's state and the epoch number go into one file
(``torch.save``), saved as this attempt's checkpoint. Simulated crashes (default: at epochs 3
and 6) end an attempt; the next one restores model, optimizer (momentum included) and epoch,
and carries on, so the result is exactly that of a run without crashes.

Two ways to save: ``save_sync`` (the loop waits for the upload), or with ``--background``
``save_background`` (the file is snapshotted and the loop goes on at once while it uploads;
the end of the attempt, and a crash, wait for the upload in flight).

The same function runs unchanged inside a Flyte task (``fc.ctx()`` is then Flyte's).

Run: python examples/torch_train_linear.py [--epochs 8] [--crash-at 3,6] [--background]
Needs: pip install torch
"""

from __future__ import annotations

import argparse

import torch

import flyte_checkpoint as fc

CRASHED: set[int] = set()


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.linspace(-1, 1, 64).unsqueeze(1)
    return x, 3 * x + 2 + 0.05 * torch.randn(x.shape, generator=g)


def train_linear(epochs: int, crash_at: set[int], background: bool = False) -> torch.nn.Linear:
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    cp = fc.ctx().checkpoint
    start = 0
    restored = cp.load_sync()
    if restored is not None:
        state = torch.load(restored, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
    print(f"attempt {fc.ctx().attempt_number}: starting at epoch {start}")
    x, y = make_data()
    for epoch in range(start, epochs):
        if epoch in crash_at and epoch not in CRASHED:
            CRASHED.add(epoch)
            print(f"  CRASH in epoch {epoch} (simulated)")
            raise RuntimeError(f"simulated crash in epoch {epoch}")
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        state_file = cp.path / "state.pt"  # the checkpoint's private workspace
        torch.save(
            {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, state_file
        )
        if background:
            cp.save_background(state_file)  # snapshotted: the next epoch may overwrite the file
            print(f"  epoch {epoch}: loss {loss.item():.6f}, checkpoint saving in the background")
        else:
            cp.save_sync(state_file)
            print(f"  epoch {epoch}: loss {loss.item():.6f}, checkpoint saved")
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--crash-at", default="3,6", help="comma-separated epochs ('' for none)")
    parser.add_argument("--background", action="store_true", help="save with save_background")
    args = parser.parse_args()
    crash_at = {int(e) for e in args.crash_at.split(",") if e.strip()}
    run = fc.task(retries=len(crash_at))(train_linear)
    model = run(args.epochs, crash_at, args.background)
    w, b = model.weight.item(), model.bias.item()
    print(f"trained {args.epochs} epochs with {len(CRASHED)} crashes")
    print(f"final weights: w={w!r} b={b!r}")


if __name__ == "__main__":
    main()
