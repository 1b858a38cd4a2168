"""The entry point: names the store and its config class, importing neither."""

from __future__ import annotations

from collections.abc import Callable

from flyte_checkpoint.storage import StoreSpec, hookimpl

from .uris import SCHEMES


@hookimpl
def register_stores(register: Callable[[StoreSpec], None]) -> None:
    """Register the ``folder`` backend for ``folder://`` URIs."""
    register(
        StoreSpec(
            name="folder",
            schemes=SCHEMES,
            factory="fc_example_store.store:make_store",  # imported on the first folder:// URI
            config="fc_example_store.config:FolderConfig",  # checks configure_store's settings
            description="objects as files under one root folder (an example)",
        )
    )
