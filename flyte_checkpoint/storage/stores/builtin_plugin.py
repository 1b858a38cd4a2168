"""Registers the built-in ``file`` and ``memory`` stores, as a plugin would."""

from __future__ import annotations

from collections.abc import Callable

from ..hookspecs import StoreSpec, hookimpl


@hookimpl
def register_stores(register: Callable[[StoreSpec], None]) -> None:
    register(
        StoreSpec(
            name="file",
            schemes=("file",),
            factory="flyte_checkpoint.storage.stores.local:LocalStore",
            description="local files and bare paths; atomic writes by rename",
        )
    )
    register(
        StoreSpec(
            name="memory",
            schemes=("memory",),
            factory="flyte_checkpoint.storage.stores.memory:MemoryStore",
            description="process-local, in memory; for tests",
        )
    )
