"""The entry point: names the GCS store without importing the Google SDK."""

from __future__ import annotations

from collections.abc import Callable

from flyte_checkpoint.storage.hookspecs import hookimpl
from flyte_checkpoint.storage.registry import StoreSpec

from .uris import SCHEMES


@hookimpl
def register_stores(register: Callable[[StoreSpec], None]) -> None:
    """Register the ``gcs`` backend for ``gs://`` and ``gcs://`` URIs (built lazily)."""
    register(
        StoreSpec(
            name="gcs",
            schemes=SCHEMES,
            factory="flyte_checkpoint_gcs.store:make_store",
            config="flyte_checkpoint_gcs.config:GCSConfig",
            description="Google Cloud Storage via google-cloud-storage; resumable uploads, "
            "parallel ranged reads, CRC32C checked",
        )
    )
