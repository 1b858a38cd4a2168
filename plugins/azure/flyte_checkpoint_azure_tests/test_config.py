"""Configuration: the order of precedence, settings from the environment, secrets kept out."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import pytest
from flyte_checkpoint_azure.config import (
    DEV_ACCOUNT,
    DEV_ENDPOINT,
    AzureConfig,
    account_from_endpoint,
    parse_connection_string,
)
from flyte_checkpoint_azure.locations import parse
from flyte_checkpoint_azure.settings import AzureSettings, MiB, parse_size
from flyte_checkpoint_azure.store import AzureBlobStore

from flyte_checkpoint.errors import StoreError

from .conftest import require

KEY = "c2VjcmV0LWtleS1ub2JvZHktc2hvdWxkLXNlZQ=="
SAS = "sv=2024-08-04&ss=b&srt=co&sp=rwdl&se=2030-01-01T00%3A00%3A00Z&sig=SIGNATURE%2Bsecret%3D"
CS_KEY = f"DefaultEndpointsProtocol=https;AccountName=csacct;AccountKey={KEY};EndpointSuffix=core.windows.net"


def _needs_identity() -> None:
    """azure-identity is in the plugin's test extra: a skip without it (a failure with CI=true)."""
    have = importlib.util.find_spec("azure.identity") is not None
    require(have, "azure-identity is not installed (pip install -e 'plugins/azure[test]')")


def _cfg(env: dict[str, str] | None = None, **kwargs) -> AzureConfig:
    return AzureConfig(environ=env or {}, **kwargs)


def test_connection_string_from_env() -> None:
    c = _cfg({"AZURE_STORAGE_CONNECTION_STRING": CS_KEY})
    assert (c.kind, c.source, c.account_name) == ("key", "AZURE_STORAGE_CONNECTION_STRING", "csacct")
    assert c.endpoint_for("csacct", parse("az://c/x")) == "https://csacct.blob.core.windows.net"


def test_connection_string_wins_over_key_and_sas_in_env() -> None:
    env = {
        "AZURE_STORAGE_CONNECTION_STRING": CS_KEY,
        "AZURE_STORAGE_ACCOUNT_KEY": "b3RoZXI=",
        "AZURE_STORAGE_SAS_TOKEN": SAS,
    }
    assert _cfg(env).source == "AZURE_STORAGE_CONNECTION_STRING"


def test_key_wins_over_sas_and_service_principal_in_env() -> None:
    env = {
        "AZURE_STORAGE_ACCOUNT_NAME": "acct",
        "AZURE_STORAGE_ACCOUNT_KEY": KEY,
        "AZURE_STORAGE_SAS_TOKEN": SAS,
        "AZURE_TENANT_ID": "t",
        "AZURE_CLIENT_ID": "c",
        "AZURE_CLIENT_SECRET": "s3cr3t-value",
    }
    c = _cfg(env)
    assert (c.kind, c.account_name) == ("key", "acct")
    del env["AZURE_STORAGE_ACCOUNT_KEY"]
    assert _cfg(env).kind == "sas"
    del env["AZURE_STORAGE_SAS_TOKEN"]
    assert _cfg(env).kind == "service-principal"


def test_az_cli_variable_names_are_read_too() -> None:
    c = _cfg({"AZURE_STORAGE_ACCOUNT": "acct", "AZURE_STORAGE_KEY": KEY})
    assert (c.kind, c.account_name) == ("key", "acct")


def test_arguments_win_over_the_environment() -> None:
    env = {"AZURE_STORAGE_CONNECTION_STRING": CS_KEY, "AZURE_STORAGE_ACCOUNT_NAME": "envacct"}
    c = _cfg(env, sas_token=SAS, account_name="argacct")
    assert (c.kind, c.source, c.account_name) == ("sas", "the sas_token argument", "argacct")
    c = _cfg(env, account_key=KEY, sas_token=SAS)
    assert c.kind == "key"  # among arguments, a key comes before a SAS token
    c = _cfg(env, blob_endpoint="http://127.0.0.1:9/acct")
    assert c.blob_endpoint == "http://127.0.0.1:9/acct"


def test_explicit_credential_object_is_used_for_any_account() -> None:
    token = object()
    c = _cfg({"AZURE_STORAGE_ACCOUNT_KEY": KEY}, credential=token)
    assert c.credential_for("any", "az://c/x") is token


def test_sas_token_with_a_question_mark() -> None:
    c = _cfg(account_name="acct", sas_token="?" + SAS)
    cred = c.credential_for("acct", "az://c/x")
    assert cred.signature == SAS


def test_sas_and_blob_endpoint_in_a_connection_string() -> None:
    cs = f"BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;SharedAccessSignature={SAS}"
    c = _cfg(connection_string=cs)
    assert (c.kind, c.account_name) == ("sas", "devstoreaccount1")
    assert c.blob_endpoint == "http://127.0.0.1:10000/devstoreaccount1"


def test_use_development_storage() -> None:
    c = _cfg({"AZURE_STORAGE_CONNECTION_STRING": "UseDevelopmentStorage=true"})
    assert (c.kind, c.account_name, c.blob_endpoint) == ("key", DEV_ACCOUNT, DEV_ENDPOINT)


@pytest.mark.parametrize("bad", ["just-a-secret-value", "=novalue", "BlobEndpoint="])
def test_malformed_connection_string_is_not_echoed(bad: str) -> None:
    with pytest.raises(StoreError, match="is malformed") as info:
        _cfg({"AZURE_STORAGE_CONNECTION_STRING": bad})
    assert "AZURE_STORAGE_CONNECTION_STRING" in str(info.value)
    assert bad not in str(info.value)


def test_parse_connection_string_keeps_padding_of_keys() -> None:
    parts = parse_connection_string(f"AccountName=a;AccountKey={KEY};")
    assert parts == {"accountname": "a", "accountkey": KEY}


def test_account_from_endpoint() -> None:
    assert account_from_endpoint("http://127.0.0.1:10000/devstoreaccount1") == "devstoreaccount1"
    assert account_from_endpoint("http://localhost:10000/acct/") == "acct"
    assert account_from_endpoint("https://acct.blob.core.windows.net") == "acct"


def test_service_principal_needs_all_three() -> None:
    with pytest.raises(StoreError, match="AZURE_TENANT_ID and AZURE_CLIENT_ID") as info:
        _cfg({"AZURE_CLIENT_SECRET": "s3cr3t-value"})
    assert "s3cr3t-value" not in str(info.value)


def test_service_principal_builds_a_client_secret_credential_lazily() -> None:
    _needs_identity()
    c = _cfg(tenant_id="tenant", client_id="client", client_secret="s3cr3t-value")
    assert c.kind == "service-principal"
    cred = c.credential_for("acct", "az://c/x")
    assert type(cred).__name__ == "ClientSecretCredential"
    assert c.credential_for("other", "az://c/x") is cred  # one identity, any account
    assert "s3cr3t-value" not in repr(c)
    c.close()


def test_default_credential_when_nothing_is_configured() -> None:
    _needs_identity()
    c = _cfg()
    assert (c.kind, c.source) == ("default", "DefaultAzureCredential")
    assert type(c.credential_for("acct", "az://c/x")).__name__ == "DefaultAzureCredential"
    c.close()


def _without_identity(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where azure.identity cannot be imported."""
    prelude = "import sys\nsys.modules['azure.identity'] = None\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True, check=False
    )


def test_without_azure_identity_nothing_configured_is_anonymous() -> None:
    done = _without_identity(
        """
        from flyte_checkpoint_azure.config import AzureConfig
        c = AzureConfig(environ={})
        assert c.kind == "anonymous", c.kind
        assert c.credential_for("acct", "az://c/x") is None
        """
    )
    assert done.returncode == 0, done.stderr


def test_without_azure_identity_a_service_principal_says_what_to_install() -> None:
    done = _without_identity(
        """
        from flyte_checkpoint.errors import StoreError
        from flyte_checkpoint_azure.config import AzureConfig
        c = AzureConfig(environ={"AZURE_TENANT_ID": "t", "AZURE_CLIENT_ID": "c",
                                 "AZURE_CLIENT_SECRET": "s3cr3t-value"})
        try:
            c.credential_for("acct", "az://c/x")
        except StoreError as exc:
            print(exc)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'flyte-checkpoint-azure[identity]'" in done.stdout
    assert "s3cr3t-value" not in done.stdout


def test_repr_names_sources_not_secrets() -> None:
    store = AzureBlobStore(connection_string=CS_KEY, environ={})
    assert "csacct" in repr(store) and "connection_string argument" in repr(store)
    sas_store = AzureBlobStore(account_name="acct", sas_token=SAS, environ={})
    for text in (repr(store), repr(sas_store), repr(store.config), repr(sas_store.config)):
        assert KEY not in text and SAS not in text and "SIGNATURE" not in text
    assert KEY in store.config.secrets() and "SIGNATURE%2Bsecret%3D" in sas_store.config.secrets()


# -- tuning knobs -----------------------------------------------------------------


def test_settings_defaults_suit_the_cloud() -> None:
    s = AzureSettings()
    assert (s.block_size, s.upload_concurrency, s.read_chunk_size, s.read_concurrency) == (
        8 * MiB,
        8,
        8 * MiB,
        8,
    )
    assert s.checksum and s.retries == 3 and s.connect_timeout > 0 and s.read_timeout > 0


def test_settings_from_env_then_arguments() -> None:
    env = {
        "FLYTE_CHECKPOINT_AZURE_BLOCK_SIZE": "4MiB",
        "FLYTE_CHECKPOINT_AZURE_READ_CONCURRENCY": "2",
        "FLYTE_CHECKPOINT_AZURE_CHECKSUM": "none",
        "FLYTE_CHECKPOINT_AZURE_READ_TIMEOUT": "7.5",
    }
    s = AzureSettings.from_env(env, read_concurrency=5)
    assert (s.block_size, s.read_concurrency, s.checksum, s.read_timeout) == (4 * MiB, 5, False, 7.5)


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("FLYTE_CHECKPOINT_AZURE_BLOCK_SIZE", "big"),
        ("FLYTE_CHECKPOINT_AZURE_UPLOAD_CONCURRENCY", "1.5"),
        ("FLYTE_CHECKPOINT_AZURE_CHECKSUM", "maybe"),
    ],
)
def test_bad_setting_names_the_variable(var: str, value: str) -> None:
    with pytest.raises(StoreError, match=var):
        AzureSettings.from_env({var: value})


def test_out_of_range_settings_are_refused() -> None:
    with pytest.raises(StoreError, match="block_size"):
        AzureSettings(block_size=5000 * MiB)
    with pytest.raises(StoreError, match="upload_concurrency"):
        AzureSettings(upload_concurrency=0)
    with pytest.raises(TypeError, match="blocksize"):
        AzureBlobStore(environ={}, blocksize=1)


def test_parse_size() -> None:
    assert [parse_size(t) for t in ("1", "2k", "3MiB", "1 GiB")] == [1, 2048, 3 * MiB, 1024 * MiB]
    with pytest.raises(ValueError):
        parse_size("3 parsecs")
