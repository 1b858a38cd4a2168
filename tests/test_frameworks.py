"""PyTorch, Lightning and scikit-learn: the examples, and the Lightning callback, on CPU.

Each example crashes on purpose and resumes; its final model must equal that of a run
without crashes, which only holds if every bit of training state came back.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from conftest import require

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def need(module: str, pip: str) -> None:
    require(importlib.util.find_spec(module) is not None, f"{module} is not installed (pip install {pip})")


def run_example(name: str, tmp_path: Path, *args: str) -> str:
    # Kept after the run (a finished run's checkpoints are removed by default), to be looked at.
    env = dict(os.environ, FLYTE_CHECKPOINT_ROOT=str(tmp_path / "root"), FLYTE_CHECKPOINT_KEEP_RUNS="1")
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name[:-3]}", EXAMPLES / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the examples -----------------------------------------------------------------------------


@pytest.mark.parametrize("how", [[], ["--background"]], ids=["save_sync", "save_background"])
def test_torch_train_linear_resumes_model_optimizer_and_epoch(how, tmp_path):
    """Proves: the example resumes exactly, saving synchronously or in the background (where
    each crash's attempt close waits for the upload in flight, so the next attempt resumes at
    the epoch after the last one saved)."""
    need("torch", "torch==2.13.0")
    out = run_example("torch_train_linear.py", tmp_path, *how)
    assert ("in the background" in out) == bool(how)
    assert re.findall(r"attempt (\d+): starting at epoch (\d+)", out) == [("0", "0"), ("1", "3"), ("2", "6")]
    assert "trained 8 epochs with 2 crashes" in out
    # The same training without crashes, here: identical weights, to the last bit.
    example = load_example("torch_train_linear.py")
    model = fc.task(checkpoint_root=str(tmp_path / "ref"))(example.train_linear)(8, set())
    assert f"final weights: w={model.weight.item()!r} b={model.bias.item()!r}" in out


def test_sklearn_partial_fit_resumes_estimator_and_progress(tmp_path):
    need("sklearn", "scikit-learn")
    out = run_example("sklearn_partial_fit.py", tmp_path)
    assert re.findall(r"starting at batch (\d+)", out) == ["0", "4", "9"]
    assert "learned 12 batches with 2 crashes" in out
    example = load_example("sklearn_partial_fit.py")
    model = fc.task(checkpoint_root=str(tmp_path / "ref"))(example.learn)(12, set())
    coef, intercept = model.coef_.ravel().tolist(), model.intercept_.tolist()
    assert f"final coefficients: {coef!r} intercept: {intercept!r}" in out


def test_lightning_resume_example(tmp_path):
    need("lightning", "lightning")
    out = run_example("lightning_resume.py", tmp_path)
    assert re.findall(r"training starts at epoch (\d+)", out) == ["0", "3"]
    assert "attempt 1: resuming from last.ckpt" in out
    assert "trained 6 epochs with 1 crash(es)" in out
    # Each attempt's object holds the ModelCheckpoint folder of that attempt's machine.
    objects = sorted((tmp_path / "root").rglob("_flytecheckpoints"))
    assert [o.parent.name for o in objects] == ["0", "1"]
    for obj, epochs in zip(objects, [range(3), range(3, 6)], strict=True):
        with fc.Checkpoint(str(tmp_path / "unused"), str(obj)) as cp:
            names = sorted(p.name for p in cp.load_sync().rglob("*.ckpt"))
        assert names == [f"epoch={e}-step={4 * (e + 1)}.ckpt" for e in epochs] + ["last.ckpt"]


# -- the Lightning callback, in this process ----------------------------------------------------


def tiny_lightning():
    """A one-layer Lightning model class and a factory of its seeded 24-row data (CPU)."""
    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=0.05)

    def loader():
        g = torch.Generator().manual_seed(1)
        x = torch.randn(24, 3, generator=g)
        return DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=8)

    return Tiny, loader


def lightning_trainer(work: Path, epochs: int, callbacks: list):
    """A quiet CPU trainer whose ModelCheckpoint writes ``work / "ckpts"`` (with ``last.ckpt``)."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint

    return pl.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        default_root_dir=str(work),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[ModelCheckpoint(dirpath=str(work / "ckpts"), save_last=True), *callbacks],
    )


@pytest.fixture
def lit():
    """Lightning parts: a tiny model, its data, and a trainer factory."""
    need("lightning", "lightning")
    import lightning.pytorch as pl
    import torch

    Tiny, loader = tiny_lightning()

    class Crash(pl.Callback):
        def __init__(self, plan: dict[int, int]) -> None:
            self.plan = plan

        def on_train_epoch_start(self, trainer, pl_module):
            if self.plan.get(fc.ctx().attempt_number) == trainer.current_epoch:
                raise RuntimeError(f"crash in epoch {trainer.current_epoch}")

    class Starts(pl.Callback):
        def __init__(self, seen: list[int]) -> None:
            self.seen = seen

        def on_train_start(self, trainer, pl_module):
            self.seen.append(trainer.current_epoch)

    trainer = lightning_trainer

    def train(root: Path, plan: dict[int, int], *, retries: int, carry_forward: bool = True, epochs: int = 5):
        from flyte_checkpoint.integrations.lightning import CheckpointMirror, resume_path

        seen: list[int] = []
        mirrors: list[CheckpointMirror] = []

        @fc.task(retries=retries, checkpoint_root=str(root), run_name="lit")
        def fit():
            torch.manual_seed(0)
            model = Tiny()
            mirror = CheckpointMirror(carry_forward=carry_forward)
            mirrors.append(mirror)
            work = root / f"work-{fc.ctx().attempt_number}"
            t = trainer(work, epochs, [mirror, Crash(plan), Starts(seen)])
            t.fit(model, loader(), ckpt_path=resume_path())
            return model.layer.weight.detach().clone(), t.current_epoch

        weights, epoch = fit()
        return weights, epoch, seen, mirrors

    return train


def test_lightning_crash_and_resume_continues_from_the_right_epoch(lit, tmp_path):
    ref_weights, ref_epoch, ref_seen, _ = lit(tmp_path / "ref", {}, retries=0)
    assert (ref_epoch, ref_seen) == (5, [0])
    # Attempt 0 dies in epoch 2; attempt 1 dies in epoch 2 again before saving anything;
    # attempt 2 still resumes at epoch 2 (attempt 1 carried the restored folder forward).
    weights, epoch, seen, mirrors = lit(tmp_path / "run", {0: 2, 1: 2}, retries=2)
    assert seen == [0, 2, 2] and epoch == 5
    assert weights.tolist() == ref_weights.tolist()
    assert [m.saves for m in mirrors] == [2, 0, 3]  # one save per finished epoch


def test_without_carry_forward_an_attempt_that_saves_nothing_still_does_not_cost_the_progress(lit, tmp_path):
    """Attempt 1 dies before its first save and, without carry_forward, leaves its destination
    empty; attempt 2 still resumes at epoch 2, from attempt 0's checkpoint, since every attempt
    resumes from the newest checkpoint any earlier one committed (it restarted at 0 before)."""
    _, epoch, seen, mirrors = lit(tmp_path, {0: 2, 1: 2}, retries=2, carry_forward=False)
    assert seen == [0, 2, 2] and epoch == 5
    assert [m.saves for m in mirrors] == [2, 0, 3]


def test_resume_path(lit, tmp_path):
    from flyte_checkpoint.integrations.lightning import resume_path

    assert resume_path() is None  # outside a task: nothing to resume
    assert resume_path(fc.Checkpoint(str(tmp_path / "d"))) is None  # no previous checkpoint
    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    (tree / "a" / "last.ckpt").write_text("old")
    (tree / "b").mkdir()
    (tree / "b" / "last.ckpt").write_text("new")
    (tree / "b" / "epoch=9.ckpt").write_text("")
    os.utime(tree / "a" / "last.ckpt", (1000, 1000))
    fc.Checkpoint(str(tmp_path / "dir-obj")).save_sync(tree)
    with fc.Checkpoint(str(tmp_path / "d"), str(tmp_path / "dir-obj")) as cp:
        assert Path(resume_path(cp)).read_text() == "new"
        assert Path(resume_path(cp, "**/epoch=*.ckpt")).name == "epoch=9.ckpt"
        assert resume_path(cp, "**/none.ckpt") is None
    fc.Checkpoint(str(tmp_path / "file-obj")).save_sync(tree / "b" / "last.ckpt")
    with fc.Checkpoint(str(tmp_path / "d"), str(tmp_path / "file-obj")) as cp:
        assert resume_path(cp) == str(cp.path / "payload")


@pytest.mark.parametrize("link_form", ["as Lightning writes it", "absolute"])
def test_save_last_link_resolves_after_save_and_load(link_form, tmp_path):
    """``ModelCheckpoint(save_last="link")``'s ``last.ckpt`` link, saved with its folder and
    loaded, leads to the newest checkpoint; also in the absolute form older Lightning releases
    and other frameworks write (which a save used to store as a link every load refused)."""
    need("lightning", "lightning")
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint

    Tiny, loader = tiny_lightning()
    ckpts = tmp_path / "run" / "checkpoints"
    trainer = pl.Trainer(
        max_epochs=2,
        accelerator="cpu",
        devices=1,
        default_root_dir=str(tmp_path / "run"),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[ModelCheckpoint(dirpath=str(ckpts), save_last="link", save_top_k=-1)],
    )
    trainer.fit(Tiny(), loader())
    last = ckpts / "last.ckpt"
    newest = last.resolve()
    assert last.is_symlink() and newest.parent == ckpts.resolve() and newest.name.startswith("epoch=1")
    if link_form == "absolute":
        last.unlink()
        last.symlink_to(newest)
    obj = str(tmp_path / "obj")
    with fc.Checkpoint(obj) as cp:
        cp.save_sync(ckpts)
    with fc.Checkpoint(str(tmp_path / "unused"), obj) as cp:
        path = cp.load_sync()
        link = path / "last.ckpt"
        assert link.is_symlink()
        assert link.resolve() == (path / newest.name).resolve()
        assert link.read_bytes() == newest.read_bytes()
        assert fc.latest_checkpoint(path) == link


@pytest.mark.parametrize("background", [True, False])
def test_the_mirror_uploads_in_the_background_by_default_and_waits_at_fit_end(background, tmp_path):
    """Proves (issue 17): by default the mirror's uploads run outside the training thread and
    training goes on while one is held (the first upload waits until epoch 2 has started, which
    would never happen if training waited for it); with ``background=False`` the training thread
    uploads. Either way, when ``fit`` returns the last ``last.ckpt`` has been stored."""
    need("lightning", "lightning")
    import threading

    import lightning.pytorch as pl

    from flyte_checkpoint.integrations.lightning import CheckpointMirror
    from tests.reliability.gates import HANG
    from tests.spystore import spying

    Tiny, loader = tiny_lightning()
    epoch_two = threading.Event()
    uploaders: list[threading.Thread] = []

    def hook(op: str, uri: str) -> None:
        if op != "open_write":
            return
        uploaders.append(threading.current_thread())
        if background and len(uploaders) == 1:
            assert epoch_two.wait(HANG), "training did not go on while the first upload was held"

    class Epochs(pl.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            if trainer.current_epoch == 2:
                epoch_two.set()

    obj = tmp_path / "obj"
    with spying("file", hook) as spy:
        mirror = CheckpointMirror(fc.Checkpoint(spy.uri_for(str(obj))), background=background)
        lightning_trainer(tmp_path, 4, [mirror, Epochs()]).fit(Tiny(), loader())
    main = threading.current_thread()
    assert uploaders and all((t is not main) == background for t in uploaders)
    with fc.Checkpoint(str(tmp_path / "unused"), str(obj)) as cp:
        restored = cp.load_sync()
        assert restored is not None
        assert (restored / "last.ckpt").read_bytes() == (tmp_path / "ckpts" / "last.ckpt").read_bytes()


def test_the_mirror_does_not_count_working_files_as_changes(tmp_path):
    """Proves (leftovers, item 3): working files of this library that come and go inside the
    mirrored folder (another actor's staging copy of a file there, a writer's or download's
    temporary file, a sharded save's folder, partial restores' and pulls' staging, at the top
    and deeper) are no change: the mirror saves only when a file of the folder changes, and
    what it saves holds none of them."""
    need("lightning", "lightning")
    from types import SimpleNamespace

    from flyte_checkpoint.integrations.lightning import CheckpointMirror
    from tests.test_staging import every_working_file

    folder = tmp_path / "ckpts"
    (folder / "sub").mkdir(parents=True)
    (folder / "last.ckpt").write_bytes(b"epoch 1")
    trainer = SimpleNamespace(is_global_zero=True)
    mirror = CheckpointMirror(fc.Checkpoint(str(tmp_path / "obj")), dirpath=folder, background=False)
    mirror.on_train_start(trainer, None)
    assert mirror.mirror(trainer) is False
    holds: list = []
    try:
        made = every_working_file(folder, holds) + every_working_file(folder / "sub", holds)
        assert mirror.mirror(trainer) is False, "another actor's working files were taken for a change"
        for path in made:  # they change as their saves run
            target = Path(path) / "piece" if Path(path).is_dir() else Path(path)
            target.write_bytes(b"grown" * 1000)
        assert mirror.mirror(trainer) is False
        assert mirror.saves == 0
        (folder / "last.ckpt").write_bytes(b"epoch 2")
        assert mirror.mirror(trainer) is True and mirror.saves == 1
        assert mirror.mirror(trainer) is False
    finally:
        for held in holds:
            held.release()
    with fc.Checkpoint(str(tmp_path / "reader"), str(tmp_path / "obj")) as cp:
        restored = cp.load_sync()
        assert restored is not None
        assert sorted(str(p.relative_to(restored)) for p in restored.rglob("*")) == ["last.ckpt", "sub"]
        assert (restored / "last.ckpt").read_bytes() == b"epoch 2"


def test_mirror_needs_a_checkpoint_and_one_folder(lit, tmp_path):
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader, TensorDataset

    from flyte_checkpoint.integrations.lightning import CheckpointMirror

    class M(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = DataLoader(TensorDataset(torch.ones(2, 1)), batch_size=2)
    kw = {"max_epochs": 1, "logger": False, "enable_progress_bar": False, "enable_model_summary": False}
    with pytest.raises(RuntimeError, match=r"no checkpoint to use.*@fc\.task"):
        pl.Trainer(default_root_dir=str(tmp_path), callbacks=[CheckpointMirror()], **kw).fit(M(), data)
    two = [
        ModelCheckpoint(dirpath=str(tmp_path / "a")),
        ModelCheckpoint(dirpath=str(tmp_path / "b"), every_n_train_steps=1),
    ]
    mirror = CheckpointMirror(fc.Checkpoint(str(tmp_path / "obj")))
    with pytest.raises(ValueError, match="several ModelCheckpoint folders"):
        pl.Trainer(default_root_dir=str(tmp_path), callbacks=[*two, mirror], **kw).fit(M(), data)
    # An explicit folder settles it, and the folder arrives in the store.
    mirror = CheckpointMirror(fc.Checkpoint(str(tmp_path / "obj")), dirpath=tmp_path / "b")
    pl.Trainer(default_root_dir=str(tmp_path), callbacks=[*two, mirror], **kw).fit(M(), data)
    assert mirror.saves == 1
    with fc.Checkpoint(str(tmp_path / "x"), str(tmp_path / "obj")) as cp:
        assert [p.name for p in cp.load_sync().iterdir()] == ["epoch=0-step=1.ckpt"]


def test_integrations_import_no_framework_until_used():
    code = (
        "import sys, json, flyte_checkpoint as fc\n"
        "import flyte_checkpoint.integrations, flyte_checkpoint.integrations.flyte\n"
        "fc.ctx()\n"
        "print(json.dumps([m for m in ('flyte', 'torch', 'lightning', 'pytorch_lightning', 'sklearn')"
        " if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
