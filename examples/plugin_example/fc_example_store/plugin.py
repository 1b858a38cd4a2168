"""Tells flyte-checkpoint which store this package provides (imports nothing heavy)."""

from flyte_checkpoint.storage.hookspecs import hookimpl
from flyte_checkpoint.storage.registry import StoreSpec


@hookimpl
def register_stores(register):
    register(
        StoreSpec(
            name="folder",
            schemes=("folder",),
            factory="fc_example_store.store:FolderStore",  # imported on first folder:// URI
            description="objects as files under $FOLDER_STORE_ROOT (an example)",
        )
    )
