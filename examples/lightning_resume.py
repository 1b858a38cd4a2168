"""PyTorch Lightning: mirror ModelCheckpoint's folder into our checkpoint and resume from last.ckpt.

A tiny regression model trains for 6 epochs on CPU. Lightning's own ``ModelCheckpoint``
writes ``last.ckpt`` (and one file per epoch) into a folder; ``CheckpointMirror`` saves that
folder as this attempt's checkpoint after each of its saves. A simulated crash in epoch 3
ends the first attempt; the second restores the folder, and ``resume_path()`` hands its
``last.ckpt`` to ``Trainer.fit(ckpt_path=...)``, so Lightning carries on at epoch 3 with
model, optimizer and loop state restored.

Run: python examples/lightning_resume.py [--epochs 6] [--crash-at 3]
Needs: pip install torch lightning
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import warnings

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

import flyte_checkpoint as fc
from flyte_checkpoint.integrations.lightning import CheckpointMirror, resume_path

CRASHED: set[int] = set()


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


class CrashAt(pl.Callback):
    """Raises once at the start of the given epoch: a stand-in for a pre-empted machine."""

    def __init__(self, epoch: int | None) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.current_epoch == self.epoch and self.epoch not in CRASHED:
            CRASHED.add(self.epoch)
            print(f"  CRASH in epoch {self.epoch} (simulated)")
            raise RuntimeError(f"simulated crash in epoch {self.epoch}")


class Report(pl.Callback):
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        print(f"attempt {fc.ctx().attempt_number}: training starts at epoch {trainer.current_epoch}")

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        print(f"  epoch {trainer.current_epoch} done")


def data() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1
    return DataLoader(TensorDataset(x, y), batch_size=16, shuffle=False)


def fit(epochs: int, crash_at: int | None) -> Regression:
    torch.manual_seed(0)
    model = Regression()
    ckpt_path = resume_path()  # None on the first attempt
    if ckpt_path:
        print(f"attempt {fc.ctx().attempt_number}: resuming from {ckpt_path.rsplit('/', 1)[-1]}")
    with tempfile.TemporaryDirectory() as work:  # a fresh machine's local disk
        trainer = pl.Trainer(
            max_epochs=epochs,
            accelerator="cpu",
            devices=1,
            default_root_dir=work,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[
                ModelCheckpoint(dirpath=f"{work}/checkpoints", save_last=True, save_top_k=-1),
                CheckpointMirror(),
                CrashAt(crash_at),
                Report(),
            ],
        )
        trainer.fit(model, data(), ckpt_path=ckpt_path)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--crash-at", default="3", help="the epoch to crash in ('' for none)")
    args = parser.parse_args()
    crash_at = int(args.crash_at) if args.crash_at.strip() else None
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")
    model = fc.task(retries=1)(fit)(args.epochs, crash_at)
    print(f"trained {args.epochs} epochs with {len(CRASHED)} crash(es)")
    print(f"final weights: {model.layer.weight.detach().ravel().tolist()!r}")


if __name__ == "__main__":
    main()
