"""Each configuration form Azurite supports, end to end against it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from azure.core.credentials import AzureNamedKeyCredential
from azure.storage.blob import (
    AccountSasPermissions,
    ContainerSasPermissions,
    ResourceTypes,
    generate_account_sas,
    generate_container_sas,
)
from flyte_checkpoint_azure.config import AzureConfig
from flyte_checkpoint_azure.store import AzureStore

from flyte_checkpoint.errors import CheckpointError, CheckpointPermissionError

from .helpers import BUCKET
from .server import ACCOUNT_KEY, ACCOUNT_NAME, AzureServer

pytestmark = pytest.mark.integration


def account_sas(**permissions: bool) -> str:
    """An account SAS token made from Azurite's key."""
    perms = permissions or {"read": True, "write": True, "delete": True, "list": True, "create": True}
    return generate_account_sas(
        ACCOUNT_NAME,
        ACCOUNT_KEY,
        resource_types=ResourceTypes(container=True, object=True),
        permission=AccountSasPermissions(**perms),
        expiry=datetime.now(timezone.utc) + timedelta(hours=1),
    )


def container_sas(expiry_hours: float = 1, **permissions: bool) -> str:
    """A container SAS token made from Azurite's key."""
    return generate_container_sas(
        ACCOUNT_NAME,
        BUCKET,
        account_key=ACCOUNT_KEY,
        permission=ContainerSasPermissions(**permissions),
        expiry=datetime.now(timezone.utc) + timedelta(hours=expiry_hours),
    )


def _round_trip(store: AzureStore, prefix: str) -> None:
    root = f"az://{BUCKET}/{prefix}"
    small, large = f"{root}/small", f"{root}/large"
    store.write_bytes(small, b"small")
    data = bytes(range(256)) * 2000  # several blocks with the stores' small block size
    store.write_bytes(large, data)
    assert store.stat(small) == 5
    assert store.read_bytes(small) == b"small"
    assert store.read_bytes(large) == data
    assert list(store.list(root + "/")) == [large, small]
    store.delete(small)
    assert store.stat(small) is None


ENV_FORMS = {
    "connection string": lambda s: {"AZURE_STORAGE_CONNECTION_STRING": s.connection_string},
    "account name + key + endpoint": lambda s: {
        "AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT_NAME,
        "AZURE_STORAGE_ACCOUNT_KEY": ACCOUNT_KEY,
        "AZURE_STORAGE_ENDPOINT": s.endpoint,
    },
    "account name + account SAS + endpoint": lambda s: {
        "AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT_NAME,
        "AZURE_STORAGE_SAS_TOKEN": account_sas(),
        "AZURE_STORAGE_ENDPOINT": s.endpoint,
    },
    "container SAS with '?' + endpoint (account from the endpoint)": lambda s: {
        "AZURE_STORAGE_SAS_TOKEN": "?" + container_sas(read=True, write=True, delete=True, list=True),
        "AZURE_STORAGE_ENDPOINT": s.endpoint,
    },
    "connection string with a SAS": lambda s: {
        "AZURE_STORAGE_CONNECTION_STRING": (
            f"BlobEndpoint={s.endpoint};SharedAccessSignature={account_sas()}"
        )
    },
}


@pytest.mark.parametrize("form", list(ENV_FORMS))
def test_environment_forms(
    azure_server: AzureServer, clean_env: dict[str, str], prefix: str, form: str
) -> None:
    env = clean_env | ENV_FORMS[form](azure_server) | {"FLYTE_CHECKPOINT_AZURE_PART_SIZE": "100000"}
    store = AzureStore(AzureConfig.resolve(env=env))
    try:
        _round_trip(store, prefix)
    finally:
        store.close()


ARG_FORMS = {
    "connection_string": lambda s: {"connection_string": s.connection_string},
    "account_key": lambda s: {"account_name": ACCOUNT_NAME, "account_key": ACCOUNT_KEY},
    "sas_token": lambda s: {"account_name": ACCOUNT_NAME, "sas_token": account_sas()},
    "credential": lambda s: {"credential": AzureNamedKeyCredential(ACCOUNT_NAME, ACCOUNT_KEY)},
}


@pytest.mark.parametrize("form", list(ARG_FORMS))
def test_argument_forms(make_store, azure_server: AzureServer, prefix: str, form: str) -> None:
    _round_trip(make_store(part_size=100_000, **ARG_FORMS[form](azure_server)), prefix)


def test_arguments_win_over_a_broken_environment(
    azure_server: AzureServer, clean_env: dict[str, str], prefix: str
) -> None:
    env = clean_env | {
        "AZURE_STORAGE_CONNECTION_STRING": "BlobEndpoint=http://127.0.0.1:1/nobody;AccountKey=eA=="
    }
    store = AzureStore(AzureConfig.resolve(env=env, connection_string=azure_server.connection_string))
    try:
        _round_trip(store, prefix)
    finally:
        store.close()


def test_anonymous_reads_a_public_container_with_no_credential(
    make_store, blob_service, azure_server: AzureServer, prefix: str
) -> None:
    """``anonymous`` sends no credential even though azure-identity is installed here: nothing
    configured picks DefaultAzureCredential, whose bearer token the SDK refuses to send over
    http, while an anonymous store reads a public container and is refused a private one."""
    public = f"public-{prefix[:12]}"
    blob_service.create_container(public, public_access="container")
    blob_service.get_blob_client(public, "obj").upload_blob(b"for everyone")
    for store in (
        make_store(anonymous=True),
        make_store(
            env={"FLYTE_CHECKPOINT_AZURE_ANONYMOUS": "true", "AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT_NAME},
            credential=None,  # no key of the fixture's either
        ),
    ):
        assert store.config.auth.kind == "anonymous"
        assert store.read_bytes(f"az://{public}/obj") == b"for everyone"
        with pytest.raises(CheckpointPermissionError):
            store.stat(f"az://{BUCKET}/{prefix}/private")
    default = make_store(account_name=ACCOUNT_NAME, credential=None)
    assert default.config.auth.kind == "default"
    with pytest.raises(CheckpointError):
        default.read_bytes(f"az://{public}/obj")
