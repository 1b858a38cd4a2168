"""Lightning's ModelCheckpoint(save_top_k=..., monitor=...) through CheckpointMirror: the
checkpoint keeps remotely the set of files Lightning keeps locally, and a Retention on the
mirror's Checkpoint keeps no more generations than it says."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.history.manifest import read_manifests
from flyte_checkpoint.storage.registry import store_for
from tests.test_frameworks import need

#: The monitored score of each epoch (lower is better): ties and a NaN included.
SCORES = [5.0, 3.0, 4.0, 3.0, float("nan"), 1.0, 6.0]


def fit(tmp_path: Path, cp, *, top_k: int, background: bool):
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader, TensorDataset

    from flyte_checkpoint.integrations.lightning import CheckpointMirror

    class Scored(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            self.log("score", SCORES[self.current_epoch], on_step=False, on_epoch=True)
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    x = torch.randn(8, 3, generator=torch.Generator().manual_seed(1))
    data = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=8)
    folder = tmp_path / "ckpts"
    trainer = pl.Trainer(
        max_epochs=len(SCORES),
        accelerator="cpu",
        devices=1,
        default_root_dir=str(tmp_path),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            ModelCheckpoint(
                dirpath=str(folder), monitor="score", mode="min", save_top_k=top_k, filename="{epoch}"
            ),
            CheckpointMirror(cp, background=background),
        ],
    )
    torch.manual_seed(0)
    trainer.fit(Scored(), data)
    return folder


def remote_names(dest: str) -> set[str]:
    with store_for(dest).open_read(dest) as raw, tarfile.open(fileobj=raw, mode="r|gz") as tar:
        return {m.name.removeprefix("./") for m in tar if m.isfile()}


@pytest.mark.parametrize("background", [False, True], ids=["save_sync", "save_background"])
@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_remote_keeps_the_set_lightning_keeps(tmp_path, top_k, background):
    need("lightning", "lightning")
    dest = str(tmp_path / "store/run/0/ckpt")
    with fc.Checkpoint(dest, retention=fc.Retention(keep_last=1)) as cp:
        folder = fit(tmp_path, cp, top_k=top_k, background=background)
        cp.wait()
    local = {p.name for p in folder.iterdir() if p.is_file()}
    assert len(local) == top_k
    assert remote_names(dest) == local
    # keep_last=1 keeps no older generation beside the object
    assert not [u for u in store_for(dest).list(dest) if u.endswith(".obj")]
    newest = read_manifests(store_for(dest), dest)
    if newest and newest[-1].metrics:  # the saves record step and metrics (wp-history)
        assert "score" in newest[-1].metrics and newest[-1].step is not None
