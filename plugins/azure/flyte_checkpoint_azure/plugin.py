"""The entry point: names the Azure store without importing the Azure SDK."""

from __future__ import annotations

from collections.abc import Callable

from flyte_checkpoint.storage.hookspecs import hookimpl
from flyte_checkpoint.storage.registry import StoreSpec

from .uris import SCHEMES


@hookimpl
def register_stores(register: Callable[[StoreSpec], None]) -> None:
    """Register the ``azure`` backend for ``abfs://``, ``abfss://`` and ``az://`` URIs."""
    register(
        StoreSpec(
            name="azure",
            schemes=SCHEMES,
            factory="flyte_checkpoint_azure.store:make_store",
            config="flyte_checkpoint_azure.config:AzureConfig",
            description="Azure Blob Storage (azure-storage-blob); block-list commits",
        )
    )
