"""flyte-checkpoint: save task state to object storage and resume from it after a retry.

Importing this package loads no plugin and no cloud SDK: a backend's code is imported
when a URI of its scheme is first used.
"""

from .checkpoint import BaseCheckpoint, Checkpoint
from .context import CheckpointPaths, TaskContext, ctx, task
from .paths import latest_checkpoint, repair_union_prev_checkpoint_uri

__all__ = [
    "BaseCheckpoint",
    "Checkpoint",
    "CheckpointPaths",
    "TaskContext",
    "ctx",
    "latest_checkpoint",
    "register_store",
    "repair_union_prev_checkpoint_uri",
    "task",
    "unregister_store",
]
__version__ = "0.1.0"


def __getattr__(name: str):
    # The registry (and pluggy) load on first use, not at import.
    if name in ("register_store", "unregister_store"):
        from .storage import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'flyte_checkpoint' has no attribute {name!r}")
