"""Constants and small helpers shared by the Azure plugin's tests."""

from __future__ import annotations

import os
import threading
from typing import Any

#: The bucket every test writes under (each test under its own unique prefix) (Azure: a container).
BUCKET = "fcp-tests"
#: A bucket the test server does not have (the recipes' ``missing_container``).
MISSING_BUCKET = "fcp-no-such-bucket"
#: Small blocks and ranges, so a few MiB cross many block and range boundaries. Blocks stay
#: above the suite's 256 KiB concurrent-writer payloads: concurrent multi-block writers of
#: one blob conflict on Azure (see test_writes.py), single-request writers do not.
SMALL = {
    "FLYTE_CHECKPOINT_AZURE_PART_SIZE": "320KiB",
    "FLYTE_CHECKPOINT_AZURE_MAX_CONCURRENCY": "4",
    "FLYTE_CHECKPOINT_AZURE_READ_RANGE_SIZE": "192KiB",
    "FLYTE_CHECKPOINT_AZURE_READ_CONCURRENCY": "4",
    "FLYTE_CHECKPOINT_AZURE_READ_TIMEOUT": "30",
}
#: Every variable the store reads for credentials, accounts and endpoints.
AZURE_VARS = (
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_ENDPOINT",
    "AZURE_STORAGE_TENANT_ID",
    "AZURE_STORAGE_CLIENT_ID",
    "AZURE_STORAGE_CLIENT_SECRET",
    "AZURE_TENANT_ID",
    "AZURE_CLIENT_ID",
    "AZURE_CLIENT_SECRET",
)


def clean_environ() -> dict[str, str]:
    """``os.environ`` without any Azure variable (for configs resolved with ``env=``)."""
    return {
        k: v
        for k, v in os.environ.items()
        if k not in AZURE_VARS and not k.startswith("FLYTE_CHECKPOINT_AZURE_")
    }


def pool_threads(besides: frozenset[str] = frozenset()) -> list[str]:
    """The names of the Azure stores' pool threads alive now, but for those in ``besides`` (the
    threads of stores other tests left open: names are never reused within a process)."""
    return [
        t.name
        for t in threading.enumerate()
        if t.name.startswith("flyte-checkpoint-azure-") and t.name not in besides
    ]


def config(env: dict[str, str] | None = None, **settings: Any) -> Any:
    """An ``AzureConfig`` from ``settings`` and ``env`` alone (default: no variables)."""
    from flyte_checkpoint_azure.config import AzureConfig

    return AzureConfig.resolve(env=env or {}, **settings)


def fault_store(endpoint: str) -> Any:
    """The store of the fault and crash suites' recipe: Azurite's account by key on ``endpoint``
    (the server or the fault proxy, with the account's path), with the suites'
    ``RECIPE_SETTINGS``. Module level: a crash test's child imports it."""
    from flyte_checkpoint_azure.store import AzureStore

    from flyte_checkpoint.testing import RECIPE_SETTINGS

    from .server import ACCOUNT_KEY, ACCOUNT_NAME

    keys = {"account_name": ACCOUNT_NAME, "account_key": ACCOUNT_KEY}
    return AzureStore(config(endpoint_url=endpoint, **keys, **RECIPE_SETTINGS))
