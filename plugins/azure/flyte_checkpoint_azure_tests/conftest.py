"""Fixtures: one Azurite for the whole session, its containers, and stores that use it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from .server import INSTALL_HINT, AzuriteServer, AzuriteUnavailable, azurite, find_executable

try:  # the repository's root conftest, when pytest runs from the repository
    from conftest import require
except ImportError:  # pragma: no cover - run from elsewhere

    def require(condition: bool, why: str) -> None:
        """Skip when something is missing, but fail when CI=true."""
        if not condition:
            if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
                pytest.fail(f"CI=true and {why}: CI must run every test", pytrace=False)
            pytest.skip(why)


#: The container every test writes under (each test in its own unique prefix).
CONTAINER = "checkpoints"
#: Small blocks and ranges, so a few MiB cross many block and range boundaries. Blocks stay
#: above the suite's 256 KiB concurrent-writer payloads: concurrent multi-block writers of
#: one blob conflict on Azure (see test_writes.py), single-request writers do not.
SMALL = {
    "FLYTE_CHECKPOINT_AZURE_BLOCK_SIZE": "320KiB",
    "FLYTE_CHECKPOINT_AZURE_UPLOAD_CONCURRENCY": "4",
    "FLYTE_CHECKPOINT_AZURE_READ_CHUNK_SIZE": "192KiB",
    "FLYTE_CHECKPOINT_AZURE_READ_CONCURRENCY": "4",
    "FLYTE_CHECKPOINT_AZURE_READ_TIMEOUT": "30",
}
#: Every variable the store reads for credentials and accounts.
AZURE_VARS = (
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_BLOB_ENDPOINT",
    "AZURE_TENANT_ID",
    "AZURE_CLIENT_ID",
    "AZURE_CLIENT_SECRET",
)


@pytest.fixture(scope="session")
def azurite_server() -> Iterator[AzuriteServer]:
    """Azurite's blob service on 127.0.0.1, in memory, for the whole session.

    Not installed: the test skips (a failure with CI=true). Installed but not started: the
    test fails, CI or not, with Azurite's output.
    """
    require(find_executable() is not None, f"azurite-blob is not installed: {INSTALL_HINT}")
    try:
        cm = azurite()
        server = cm.__enter__()
    except AzuriteUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        from azure.storage.blob import BlobServiceClient

        with BlobServiceClient.from_connection_string(server.connection_string) as svc:
            svc.create_container(CONTAINER)
        yield server
    finally:
        cm.__exit__(None, None, None)


@pytest.fixture(scope="module")
def azure_env(azurite_server: AzuriteServer) -> Iterator[AzuriteServer]:
    """The process environment pointing at Azurite by connection string, with small blocks,
    and the registry's stores rebuilt from it; restored after the test module."""
    from flyte_checkpoint.storage.registry import get_registry

    saved = {k: os.environ.get(k) for k in (*AZURE_VARS, *SMALL)}
    for k in AZURE_VARS:
        os.environ.pop(k, None)
    os.environ.update(SMALL)
    os.environ["AZURE_STORAGE_CONNECTION_STRING"] = azurite_server.connection_string
    get_registry().close()  # stores are rebuilt, from this environment, on next use
    try:
        yield azurite_server
    finally:
        get_registry().close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def clean_env() -> dict[str, str]:
    """An environment without any Azure variable, for stores built with ``environ=``."""
    return {
        k: v
        for k, v in os.environ.items()
        if k not in AZURE_VARS and not k.startswith("FLYTE_CHECKPOINT_AZURE_")
    }


@pytest.fixture
def prefix() -> str:
    """A fresh folder name under the test container."""
    return uuid.uuid4().hex


@pytest.fixture(scope="session")
def blob_service(azurite_server: AzuriteServer):
    """A plain SDK client of Azurite, to look at what the store did."""
    from azure.storage.blob import BlobServiceClient

    with BlobServiceClient.from_connection_string(azurite_server.connection_string) as svc:
        yield svc


@pytest.fixture
def make_store(azurite_server: AzuriteServer, clean_env: dict[str, str]):
    """Build stores on Azurite's account by key (overridable), closed after the test."""
    from flyte_checkpoint_azure.store import AzureBlobStore

    from .server import ACCOUNT_KEY, ACCOUNT_NAME

    made: list[AzureBlobStore] = []

    def make(**kwargs) -> AzureBlobStore:
        if not {"connection_string", "account_key", "sas_token", "credential"} & set(kwargs):
            kwargs.setdefault("account_name", ACCOUNT_NAME)
            kwargs.setdefault("account_key", ACCOUNT_KEY)
        if "connection_string" not in kwargs:
            kwargs.setdefault("blob_endpoint", azurite_server.blob_endpoint)
        kwargs.setdefault("environ", clean_env)
        store = AzureBlobStore(**kwargs)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()
