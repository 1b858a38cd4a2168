"""flyte-checkpoint: save task state to object storage and resume from it after a retry.

Importing this package loads no plugin and no cloud SDK: a backend's code is imported
when a URI of its scheme is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import uri as _uri
from .checkpoint import BaseCheckpoint, Checkpoint
from .context import ctx, task
from .history.retention import Retention
from .lifecycle import preemption as preemption  # fc.preemption, as the docs spell it
from .lifecycle.preemption import preempt
from .taskcontext import CheckpointPaths, TaskContext
from .util.paths import latest_checkpoint, repair_union_prev_checkpoint_uri

__all__ = [
    "BaseCheckpoint",
    "Checkpoint",
    "CheckpointPaths",
    "Retention",
    "TaskContext",
    "configure_store",
    "ctx",
    "history",
    "latest_checkpoint",
    "preempt",
    "register_store",
    "repair_union_prev_checkpoint_uri",
    "task",
    "unregister_store",
]
__version__ = "0.1.0"


def _scheme_names() -> set[str]:
    """The schemes a relative path ``NAME//rest`` is refused for (``uri.normalize``): the shipped
    plugins' and every registered backend's. The registry (and pluggy) is imported on the first
    path of that shape, never at import."""
    from .storage import registry

    names = set(registry.KNOWN_SCHEMES)
    try:
        names.update(s for backend in registry.get_registry().backends() for s in backend.schemes)
    except Exception:  # a broken plugin is reported when its scheme is used, not here
        pass
    return names


_uri.scheme_names_from = _scheme_names


if TYPE_CHECKING:  # a type checker sees the registry's own signatures
    from .history.listing import history
    from .storage.registry import configure_store, register_store, unregister_store
else:
    # fc.history(uri_or_run): the package flyte_checkpoint.history, which is callable (a
    # function of that name would be replaced by the package as soon as it is imported).
    from . import history
    # Plain functions that import the registry (and pluggy) when called, not at import.

    def register_store(*args, **kwargs):
        """Register a store at runtime: see :func:`flyte_checkpoint.storage.registry.register_store`."""
        from .storage import registry

        return registry.register_store(*args, **kwargs)

    def unregister_store(name):
        """Undo :func:`register_store`: see :func:`flyte_checkpoint.storage.registry.unregister_store`."""
        from .storage import registry

        registry.unregister_store(name)

    def configure_store(target, /, **settings):
        """Configure a backend in code, per process (``"s3"``) or per URI prefix (``"s3://onprem/"``):
        see :func:`flyte_checkpoint.storage.registry.configure_store`."""
        from .storage import registry

        registry.configure_store(target, **settings)
