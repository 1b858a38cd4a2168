"""Fixtures: one Azurite per session with the container ``BUCKET``, and stores pointed at it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from .helpers import AZURE_VARS, BUCKET, SMALL, clean_environ
from .server import INSTALL_HINT, AzureServer, ServerStartError, run_server, server_installed

try:  # the repository's root conftest, when pytest runs from the repository
    from conftest import require
except ImportError:  # pragma: no cover - run from elsewhere

    def require(condition: bool, why: str) -> None:
        """Skip when something is missing, but fail when CI=true."""
        if not condition:
            if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
                pytest.fail(f"CI=true and {why}: CI must run every test", pytrace=False)
            pytest.skip(why)


@pytest.fixture(scope="session")
def azure_server() -> Iterator[AzureServer]:
    """Azurite's blob service on 127.0.0.1, in memory, for the whole session, with the
    container ``BUCKET``.

    Not installed: the test skips (a failure with CI=true). Installed but not started: the
    test fails, CI or not, with Azurite's output.
    """
    require(server_installed(), f"azurite-blob is not installed: {INSTALL_HINT}")
    try:
        with run_server() as server:
            server.create_bucket(BUCKET)
            yield server
    except ServerStartError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def azure_env(azure_server: AzureServer) -> Iterator[AzureServer]:
    """The process environment pointing at Azurite by connection string, with small blocks,
    and the registry's stores rebuilt from it; restored after the test module."""
    from flyte_checkpoint.storage.registry import get_registry

    saved = {k: os.environ.get(k) for k in (*AZURE_VARS, *SMALL)}
    for k in AZURE_VARS:
        os.environ.pop(k, None)
    os.environ.update(SMALL)
    os.environ["AZURE_STORAGE_CONNECTION_STRING"] = azure_server.connection_string
    get_registry().close()  # stores are rebuilt, from this environment, on next use
    try:
        yield azure_server
    finally:
        get_registry().close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def clean_env() -> dict[str, str]:
    """An environment without any Azure variable, for configs resolved with ``env=``."""
    return clean_environ()


@pytest.fixture
def prefix() -> str:
    """A fresh folder name under the test container."""
    return uuid.uuid4().hex


@pytest.fixture(scope="session")
def blob_service(azure_server: AzureServer):
    """A plain SDK client of Azurite, to look at what the store did."""
    from azure.storage.blob import BlobServiceClient

    with BlobServiceClient.from_connection_string(azure_server.connection_string) as svc:
        yield svc


@pytest.fixture
def make_store(azure_server: AzureServer, clean_env: dict[str, str]):
    """Build stores on Azurite's account by key (overridable), from their settings and no
    Azure variable, closed after the test."""
    from flyte_checkpoint_azure.config import AzureConfig
    from flyte_checkpoint_azure.store import AzureStore

    from .server import ACCOUNT_KEY, ACCOUNT_NAME

    made: list[AzureStore] = []

    def make(env: dict[str, str] | None = None, **kwargs) -> AzureStore:
        if not {"connection_string", "account_key", "sas_token", "credential", "anonymous"} & set(kwargs):
            kwargs.setdefault("account_name", ACCOUNT_NAME)
            kwargs.setdefault("account_key", ACCOUNT_KEY)
        if "connection_string" not in kwargs:
            kwargs.setdefault("endpoint_url", azure_server.endpoint)
        store = AzureStore(AzureConfig.resolve(env=clean_env | (env or {}), **kwargs))
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()
