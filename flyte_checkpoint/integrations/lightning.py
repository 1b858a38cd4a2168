"""PyTorch Lightning: keep Lightning's own checkpoint folder in our checkpoint, and resume from it.

::

    from flyte_checkpoint.integrations.lightning import CheckpointMirror, resume_path

    @fc.task(retries=3)                      # or a Flyte task
    def fit() -> None:
        trainer = L.Trainer(
            max_epochs=10,
            callbacks=[ModelCheckpoint(dirpath=workdir, save_last=True), CheckpointMirror()],
        )
        trainer.fit(model, data, ckpt_path=resume_path())   # None on the first attempt

:class:`CheckpointMirror` saves the folder of the trainer's ``ModelCheckpoint`` (``last.ckpt``,
``epoch=...ckpt``...) as this attempt's checkpoint (a directory checkpoint: one gzip tarball)
each time ``ModelCheckpoint`` has written something new: in the background by default
(``Checkpoint.save_background``: training goes on while it uploads; the end of training
waits). :func:`resume_path` restores the
previous attempt's checkpoint and returns its newest ``last.ckpt`` for ``ckpt_path``.

Importing this module imports Lightning (``lightning.pytorch``, else ``pytorch_lightning``);
``import flyte_checkpoint`` never does.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from ..checkpoint import BaseCheckpoint
from ..util.paths import latest_checkpoint
from ..util.workfiles import is_working_file

try:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
except ImportError:  # the standalone distribution
    try:
        import pytorch_lightning as pl  # type: ignore[no-redef]
        from pytorch_lightning.callbacks import ModelCheckpoint  # type: ignore[assignment]
    except ImportError as exc:
        raise ImportError(
            "flyte_checkpoint.integrations.lightning needs PyTorch Lightning: "
            "pip install lightning (or pytorch-lightning)"
        ) from exc

log = logging.getLogger("flyte_checkpoint")

#: What :func:`resume_path` looks for in a restored tree.
LAST_CKPT = "**/last.ckpt"


def _task_checkpoint() -> BaseCheckpoint | None:
    """The running task attempt's checkpoint; ``None`` outside a task or without a destination."""
    from ..context import ctx
    from ..errors import NoCheckpointDestinationError

    current = ctx()
    try:
        return current.checkpoint if current else None
    except NoCheckpointDestinationError:
        return None


def _current_checkpoint(what: str) -> BaseCheckpoint:
    cp = _task_checkpoint()
    if cp is None:
        raise RuntimeError(
            f"{what}: no checkpoint to use. Pass checkpoint=fc.Checkpoint(dest, src), or run "
            "inside @fc.task or a Flyte task (where fc.ctx().checkpoint is this attempt's)."
        )
    return cp


class CheckpointMirror(pl.Callback):
    """Mirror the folder ``ModelCheckpoint`` writes into ``checkpoint`` after each of its saves.

    Args:
        checkpoint: where to save; default ``fc.ctx().checkpoint`` when training starts.
        dirpath: the folder to mirror; default the ``dirpath`` of the trainer's
            ``ModelCheckpoint`` (there must then be exactly one folder among them).
        carry_forward: when training starts from a restored directory checkpoint, save it at
            once as this attempt's checkpoint, so that an attempt that fails before its first
            save still leaves its destination holding the state. The local runner, and the
            Flyte adapter within Flyte's attempt layout, resume past such an attempt anyway
            (from the newest earlier checkpoint); a reader that takes only the previous
            attempt's (Flyte's own ``flyte.Checkpoint``) needs this.
        background: upload with ``save_background`` (the folder is snapshotted, training goes
            on; at most one upload runs and one waits, a newer one replacing the waiting one),
            and wait for the uploads when training ends, raises, and at teardown. ``False``
            saves synchronously (``save_sync``), as does a checkpoint without ``save_background``.

    ``ModelCheckpoint`` always runs after other callbacks in a hook, so the folder is
    mirrored at the next hook: the start of the next training batch or epoch, the end of
    training, and (as a last effort, errors logged) when training raises. Only the global
    rank zero process saves. A background upload's error is raised at the next save or at
    the end of training (logged when training raised).

    Raises (when training starts):
        RuntimeError: no ``checkpoint`` and no task context; or no folder to mirror.
        ValueError: several ``ModelCheckpoint`` folders and no ``dirpath``.
    """

    def __init__(
        self,
        checkpoint: BaseCheckpoint | None = None,
        dirpath: str | os.PathLike[str] | None = None,
        *,
        carry_forward: bool = True,
        background: bool = True,
    ) -> None:
        super().__init__()
        self.background = background
        self._given = checkpoint
        self._dirpath = Path(dirpath) if dirpath is not None else None
        self.carry_forward = carry_forward
        self.checkpoint: BaseCheckpoint | None = None
        self.folder: Path | None = None
        self.saves = 0
        self._seen: dict[str, tuple[int, int]] | None = None

    # -- hooks -----------------------------------------------------------------------------

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.checkpoint = self._given or _current_checkpoint("CheckpointMirror")
        self.folder = self._dirpath or _model_checkpoint_folder(trainer)
        self._seen = _snapshot(self.folder)
        if self.carry_forward and trainer.is_global_zero:
            restored = self.checkpoint.load_sync()
            if restored is not None and restored.is_dir() and any(restored.iterdir()):
                self.checkpoint.save_sync(restored)
                log.info("carried the restored Lightning checkpoint forward to this attempt")

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.mirror(trainer)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.mirror(trainer)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.mirror(trainer)
        self.wait()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        try:
            self.mirror(trainer)
            self.wait()
        except Exception as exc:  # never hide the training error behind ours
            log.error("could not mirror the Lightning checkpoint folder after an error: %s", exc)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        try:
            self.wait()
        except Exception as exc:  # the end of training already raised any error it could
            log.error("a background save of the Lightning checkpoint folder failed: %s", exc)

    # -- the work --------------------------------------------------------------------------

    def mirror(self, trainer: Any | None = None) -> bool:
        """Save the folder if its files changed since the last save; True if it saved."""
        if self.checkpoint is None or self.folder is None:
            return False
        if trainer is not None and not trainer.is_global_zero:
            return False
        now = _snapshot(self.folder)
        if not now or now == self._seen:
            return False
        save_background = getattr(self.checkpoint, "save_background", None)
        if self.background and save_background is not None:
            save = save_background  # returns once the folder is snapshotted
        else:
            save = self.checkpoint.save_sync
        save(self.folder, **_history_args(save, trainer))
        self._seen = now
        self.saves += 1
        return True

    def wait(self) -> None:
        """Wait for the background uploads started (their errors are raised here, once)."""
        wait = getattr(self.checkpoint, "wait", None)
        if self.background and wait is not None:
            wait()


def resume_path(checkpoint: BaseCheckpoint | None = None, glob_pattern: str = LAST_CKPT) -> str | None:
    """The file to pass as ``Trainer.fit(..., ckpt_path=...)``, or ``None`` to start fresh.

    Restores ``checkpoint`` (default ``fc.ctx().checkpoint``; outside a task without one,
    ``None``) and returns its newest file matching ``glob_pattern`` (by modification time,
    :func:`flyte_checkpoint.latest_checkpoint`). A checkpoint saved as a single file is
    returned as it is (``path / "payload"``).

    Raises:
        whatever ``load()`` raises: a damaged or unreadable checkpoint is never "start fresh".
    """
    if checkpoint is None:
        checkpoint = _task_checkpoint()
        if checkpoint is None:
            return None
    restored = checkpoint.load_sync()
    if restored is None:
        return None
    if restored.is_file():
        return str(restored)
    found = latest_checkpoint(restored, glob_pattern)
    return str(found) if found is not None else None


def _history_args(save: Any, trainer: Any | None) -> dict[str, Any]:
    """``step=`` (the trainer's global step) and ``metrics=`` (its scalar ``callback_metrics``:
    what ``ModelCheckpoint(monitor=...)`` ranks by) for a save that records them in its manifest
    (so ``fc.history`` lists them and a ``Retention(keep_best=...)`` ranks remotely as
    ``save_top_k`` does locally); nothing for a save that takes neither."""
    if trainer is None:
        return {}
    import inspect

    try:
        params = inspect.signature(save).parameters
    except (TypeError, ValueError):
        return {}
    if "step" not in params or "metrics" not in params:
        return {}
    metrics: dict[str, float] = {}
    for name, value in dict(getattr(trainer, "callback_metrics", {}) or {}).items():
        try:
            if getattr(value, "numel", lambda: 1)() == 1:
                metrics[str(name)] = float(value)
        except (TypeError, ValueError, RuntimeError):
            continue
    return {"step": int(getattr(trainer, "global_step", 0) or 0), "metrics": metrics}


def _model_checkpoint_folder(trainer: Any) -> Path:
    folders = []
    for cb in trainer.checkpoint_callbacks:
        if isinstance(cb, ModelCheckpoint) and cb.dirpath:
            folder = Path(cb.dirpath)
            if folder not in folders:
                folders.append(folder)
    if not folders:
        raise RuntimeError(
            "CheckpointMirror: the trainer has no ModelCheckpoint with a folder to mirror; "
            "add ModelCheckpoint(dirpath=..., save_last=True) or pass CheckpointMirror(dirpath=...)"
        )
    if len(folders) > 1:
        names = ", ".join(str(f) for f in folders)
        raise ValueError(f"CheckpointMirror: several ModelCheckpoint folders ({names}); pass dirpath=")
    return folders[0]


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """relative name -> (size, mtime in ns) of every file and link under ``folder``, but this
    library's working files (another actor's staging copy or temporary file, which come and
    go, are no change: a save leaves them out)."""
    out: dict[str, tuple[int, int]] = {}
    if not folder.is_dir():
        return out
    for dirpath, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not is_working_file(d)]
        for name in files:
            if is_working_file(name):
                continue
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except FileNotFoundError:  # removed while we looked (save_top_k)
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), folder)
            out[rel] = (st.st_size, st.st_mtime_ns)
    return out


__all__ = ["LAST_CKPT", "CheckpointMirror", "resume_path"]
