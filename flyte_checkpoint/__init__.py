"""flyte-checkpoint: save task state to object storage and resume from it after a retry."""

from .registry import register_store, unregister_store

__all__ = ["register_store", "unregister_store"]
__version__ = "0.1.0"
