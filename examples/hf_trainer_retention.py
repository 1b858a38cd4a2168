"""Hugging Face Trainer with ``save_total_limit``, mirrored by this library with a retention policy.

The Trainer writes ``checkpoint-<step>/`` folders into ``output_dir`` and, with
``save_total_limit=2``, deletes all but the two newest (locally). A ``TrainerCallback`` saves
``output_dir`` as this attempt's checkpoint after each of the Trainer's saves, with
``step=`` and the last logged loss as ``metrics=``; ``Retention(keep_last=1)`` keeps no older
copy of the folder beside it, so the remote copy holds exactly the folders the Trainer keeps.

Attempt 0 crashes after step 6; attempt 1 restores the folder and resumes the Trainer from
its newest ``checkpoint-*``. Run it::

    python examples/hf_trainer_retention.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

import flyte_checkpoint as fc

MAX_STEPS = 10
CRASH_AT = 6


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        out = self.layer(x)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


def dataset() -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 3, generator=g)
    return [{"x": row, "labels": row.sum().reshape(1)} for row in x]


class MirrorSaves(TrainerCallback):
    """After each of the Trainer's saves: ``output_dir`` as this attempt's checkpoint."""

    def __init__(self, cp: fc.Checkpoint, output_dir: Path) -> None:
        self.cp, self.output_dir = cp, output_dir

    def on_save(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        losses = [e["loss"] for e in state.log_history if "loss" in e]
        metrics = {"loss": float(losses[-1])} if losses else {}
        self.cp.save_sync(self.output_dir, step=state.global_step, metrics=metrics)


class CrashOnce(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        if fc.ctx().attempt_number == 0 and state.global_step == CRASH_AT:
            raise RuntimeError(f"crash after step {state.global_step}")


@fc.task(retries=1, run_name="hf-trainer", retention=fc.Retention(keep_last=1))
def train() -> list[str]:
    cp = fc.ctx().checkpoint
    work = Path(tempfile.mkdtemp(prefix="hf-"))
    restored = cp.load_sync()
    resume = None
    if restored is not None:
        folders = sorted(restored.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        resume = str(folders[-1]) if folders else None
        print(f"attempt {fc.ctx().attempt_number}: resuming from {Path(resume).name if resume else None}")
        work = restored  # the Trainer goes on writing into the restored folder
    else:
        print(f"attempt {fc.ctx().attempt_number}: starting fresh")
    args = TrainingArguments(
        output_dir=str(work),
        max_steps=MAX_STEPS,
        per_device_train_batch_size=4,
        save_strategy="steps",
        save_steps=2,
        save_total_limit=2,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    trainer = Trainer(model=Tiny(), args=args, train_dataset=dataset(), callbacks=[CrashOnce()])
    trainer.add_callback(MirrorSaves(cp, work))
    trainer.train(resume_from_checkpoint=resume)
    cp.wait()
    local = sorted(p.name for p in work.glob("checkpoint-*"))
    import tarfile

    from flyte_checkpoint.storage.registry import store_for

    dest = cp.remote_destination
    with store_for(dest).open_read(dest) as raw, tarfile.open(fileobj=raw, mode="r|gz") as tar:
        remote = sorted({m.name.removeprefix("./").split("/")[0] for m in tar if m.name.count("checkpoint-")})
    print(f"local:  {local}")
    print(f"remote: {remote}")
    print(f"history: {[e.step for e in fc.history(dest)]}")
    return local


if __name__ == "__main__":
    kept = train()
    print(f"trained {MAX_STEPS} steps with 1 crash; kept {kept}")
