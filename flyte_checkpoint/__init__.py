"""flyte-checkpoint: save task state to object storage and resume from it after a retry.

Importing this package loads no plugin and no cloud SDK: a backend's code is imported
when a URI of its scheme is first used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .checkpoint import BaseCheckpoint, Checkpoint
from .context import CheckpointPaths, TaskContext, ctx, task
from .paths import latest_checkpoint, repair_union_prev_checkpoint_uri

if TYPE_CHECKING:
    from .storage.blobstore import BlobStore
    from .storage.kit.settings import StoreConfig
    from .storage.registry import StoreSpec

__all__ = [
    "BaseCheckpoint",
    "Checkpoint",
    "CheckpointPaths",
    "TaskContext",
    "configure_store",
    "ctx",
    "latest_checkpoint",
    "register_store",
    "repair_union_prev_checkpoint_uri",
    "task",
    "unregister_store",
]
__version__ = "0.1.0"

# The three functions below import the registry (and pluggy) when called, not at import.


def register_store(
    name: str,
    schemes: str | tuple[str, ...] | list[str],
    factory: str | Callable[..., BlobStore],
    description: str = "",
    *,
    priority: int = 0,
    config: str | type[StoreConfig] | None = None,
) -> StoreSpec:
    """Register a store at runtime; see :func:`flyte_checkpoint.storage.registry.register_store`."""
    from .storage import registry

    return registry.register_store(name, schemes, factory, description, priority=priority, config=config)


def unregister_store(name: str) -> None:
    """Undo :func:`register_store`; see :func:`flyte_checkpoint.storage.registry.unregister_store`."""
    from .storage import registry

    registry.unregister_store(name)


def configure_store(target: str, /, **settings: Any) -> None:
    """Configure a backend in code, per process (``"s3"``) or per URI prefix (``"s3://onprem/"``).

    See :func:`flyte_checkpoint.storage.registry.configure_store` for the rules and what it raises.
    """
    from .storage import registry

    registry.configure_store(target, **settings)
