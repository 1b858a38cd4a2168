"""The entry point: names the S3 store without importing boto3."""

from __future__ import annotations

from collections.abc import Callable

from flyte_checkpoint.storage.hookspecs import hookimpl
from flyte_checkpoint.storage.registry import StoreSpec

from .uris import SCHEMES


@hookimpl
def register_stores(register: Callable[[StoreSpec], None]) -> None:
    """Register the ``s3`` backend for ``s3://`` and ``s3a://`` URIs (boto3, imported on first use)."""
    register(
        StoreSpec(
            name="s3",
            schemes=SCHEMES,
            factory="flyte_checkpoint_s3.store:make_store",
            config="flyte_checkpoint_s3.config:S3Config",
            description="Amazon S3 and S3-compatible stores (boto3); multipart, CRC32 checked",
        )
    )
