"""Configuration: the order of precedence, settings from the environment, secrets kept out."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from flyte_checkpoint_azure.client import AzureClient
from flyte_checkpoint_azure.config import (
    DEV_ACCOUNT,
    DEV_ENDPOINT,
    AzureConfig,
    account_from_endpoint,
    parse_connection_string,
)
from flyte_checkpoint_azure.store import AzureStore
from flyte_checkpoint_azure.uris import parse

from flyte_checkpoint.errors import ConfigurationError
from flyte_checkpoint.storage.kit.settings import MiB, markdown_table

from .conftest import require
from .helpers import config

KEY = "c2VjcmV0LWtleS1ub2JvZHktc2hvdWxkLXNlZQ=="
SAS = "sv=2024-08-04&ss=b&srt=co&sp=rwdl&se=2030-01-01T00%3A00%3A00Z&sig=SIGNATURE%2Bsecret%3D"
CS_KEY = f"DefaultEndpointsProtocol=https;AccountName=csacct;AccountKey={KEY};EndpointSuffix=core.windows.net"


def _needs_identity() -> None:
    """azure-identity is in the plugin's test extra: a skip without it (a failure with CI=true)."""
    have = importlib.util.find_spec("azure.identity") is not None
    require(have, "azure-identity is not installed (pip install -e 'plugins/azure[test]')")


def _cfg(env: dict[str, str] | None = None, **kwargs) -> AzureConfig:
    return config(env, **kwargs)


def _credential(c: AzureConfig, account: str = "acct"):
    return AzureClient(c).credential_for(account, parse("az://c/x"))


def test_connection_string_from_env() -> None:
    c = _cfg({"AZURE_STORAGE_CONNECTION_STRING": CS_KEY})
    assert (c.auth.kind, c.auth.source, c.account_name) == (
        "key",
        "AZURE_STORAGE_CONNECTION_STRING",
        "csacct",
    )
    assert c.endpoint_for("csacct", parse("az://c/x")) == "https://csacct.blob.core.windows.net"


def test_a_connection_strings_account_and_endpoint_go_with_its_key() -> None:
    cs = f"AccountName=csacct;AccountKey={KEY};BlobEndpoint=http://127.0.0.1:9/csacct"
    env = {
        "AZURE_STORAGE_CONNECTION_STRING": cs,
        "AZURE_STORAGE_ACCOUNT_NAME": "envacct",
        "AZURE_STORAGE_ENDPOINT": "http://127.0.0.1:8/envacct",
    }
    c = _cfg(env)
    assert (c.account_name, c.endpoint_url) == ("csacct", "http://127.0.0.1:9/csacct")
    c = _cfg(env, account_name="argacct", endpoint_url="http://127.0.0.1:7/argacct")
    assert (c.account_name, c.endpoint_url) == ("argacct", "http://127.0.0.1:7/argacct")


def test_connection_string_wins_over_key_and_sas_in_env() -> None:
    env = {
        "AZURE_STORAGE_CONNECTION_STRING": CS_KEY,
        "AZURE_STORAGE_ACCOUNT_KEY": "b3RoZXI=",
        "AZURE_STORAGE_SAS_TOKEN": SAS,
    }
    assert _cfg(env).auth.source == "AZURE_STORAGE_CONNECTION_STRING"


def test_the_chain_key_sas_storage_principal_anonymous_default_in_env() -> None:
    env = {
        "AZURE_STORAGE_ACCOUNT_NAME": "acct",
        "AZURE_STORAGE_ACCOUNT_KEY": KEY,
        "AZURE_STORAGE_SAS_TOKEN": SAS,
        "AZURE_STORAGE_TENANT_ID": "t",
        "AZURE_STORAGE_CLIENT_ID": "c",
        "AZURE_STORAGE_CLIENT_SECRET": "s3cr3t-value",
        "FLYTE_CHECKPOINT_AZURE_ANONYMOUS": "true",
    }
    c = _cfg(env)
    assert (c.auth.kind, c.account_name) == ("key", "acct")
    del env["AZURE_STORAGE_ACCOUNT_KEY"]
    assert _cfg(env).auth.kind == "sas"
    del env["AZURE_STORAGE_SAS_TOKEN"]
    assert _cfg(env).auth.kind == "service-principal"
    del env["AZURE_STORAGE_CLIENT_SECRET"]
    assert _cfg(env).auth.kind == "anonymous"


def test_azure_identitys_own_variables_are_left_to_default_azure_credential() -> None:
    """AZURE_CLIENT_* are DefaultAzureCredential's (EnvironmentCredential): the plugin reads only
    the storage-scoped AZURE_STORAGE_CLIENT_* names itself."""
    _needs_identity()
    c = _cfg({"AZURE_TENANT_ID": "t", "AZURE_CLIENT_ID": "c", "AZURE_CLIENT_SECRET": "s3cr3t-value"})
    assert (c.auth.kind, c.auth.source) == ("default", "DefaultAzureCredential")


def test_az_cli_variable_names_are_read_too() -> None:
    c = _cfg({"AZURE_STORAGE_ACCOUNT": "acct", "AZURE_STORAGE_KEY": KEY})
    assert (c.auth.kind, c.account_name) == ("key", "acct")


def test_azure_storage_endpoint_is_the_endpoint_variable() -> None:
    c = _cfg(
        {"AZURE_STORAGE_ENDPOINT": "http://127.0.0.1:9/acct", "AZURE_STORAGE_BLOB_ENDPOINT": "http://x:1/y"}
    )
    assert (c.endpoint_url, c.sources["endpoint_url"]) == (
        "http://127.0.0.1:9/acct",
        "AZURE_STORAGE_ENDPOINT",
    )
    assert c.account_for(parse("az://c/x")) == "acct"
    assert _cfg({"AZURE_STORAGE_BLOB_ENDPOINT": "http://127.0.0.1:9/acct"}).endpoint_url is None


def test_arguments_win_over_the_environment() -> None:
    env = {"AZURE_STORAGE_CONNECTION_STRING": CS_KEY, "AZURE_STORAGE_ACCOUNT_NAME": "envacct"}
    c = _cfg(env, sas_token=SAS, account_name="argacct")
    assert (c.auth.kind, c.auth.source, c.account_name) == ("sas", "the sas_token argument", "argacct")
    c = _cfg(env, account_key=KEY, sas_token=SAS)
    assert c.auth.kind == "key"  # among arguments, a key comes before a SAS token
    c = _cfg(env, endpoint_url="http://127.0.0.1:9/acct")
    assert c.endpoint_url == "http://127.0.0.1:9/acct"
    assert _cfg(env, anonymous=True).auth.kind == "anonymous"  # given in code: before the variables


def test_explicit_credential_object_is_used_for_any_account() -> None:
    token = object()
    c = _cfg({"AZURE_STORAGE_ACCOUNT_KEY": KEY}, credential=token)
    assert _credential(c, "any") is token


def test_sas_token_with_a_question_mark() -> None:
    c = _cfg(account_name="acct", sas_token="?" + SAS)
    assert _credential(c).signature == SAS


def test_sas_and_blob_endpoint_in_a_connection_string() -> None:
    cs = f"BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;SharedAccessSignature={SAS}"
    c = _cfg(connection_string=cs)
    assert (c.auth.kind, c.default_account) == ("sas", "devstoreaccount1")
    assert c.endpoint_url == "http://127.0.0.1:10000/devstoreaccount1"


def test_use_development_storage() -> None:
    c = _cfg({"AZURE_STORAGE_CONNECTION_STRING": "UseDevelopmentStorage=true"})
    assert (c.auth.kind, c.account_name, c.endpoint_url) == ("key", DEV_ACCOUNT, DEV_ENDPOINT)


@pytest.mark.parametrize("bad", ["just-a-secret-value", "=novalue", "BlobEndpoint="])
def test_malformed_connection_string_is_not_echoed(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="is malformed") as info:
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
    with pytest.raises(
        ConfigurationError, match="AZURE_STORAGE_TENANT_ID and AZURE_STORAGE_CLIENT_ID"
    ) as info:
        _cfg({"AZURE_STORAGE_CLIENT_SECRET": "s3cr3t-value"})
    assert "s3cr3t-value" not in str(info.value)


def test_service_principal_builds_a_client_secret_credential_lazily() -> None:
    _needs_identity()
    c = _cfg(tenant_id="tenant", client_id="client", client_secret="s3cr3t-value")
    assert c.auth.kind == "service-principal"
    clients = AzureClient(c)
    cred = clients.credential_for("acct", parse("az://c/x"))
    assert type(cred).__name__ == "ClientSecretCredential"
    assert clients.credential_for("other", parse("az://c/x")) is cred  # one identity, any account
    assert "s3cr3t-value" not in repr(c) + repr(c.auth)
    clients.close()


def test_default_credential_when_nothing_is_configured() -> None:
    _needs_identity()
    c = _cfg()
    assert (c.auth.kind, c.auth.source) == ("default", "DefaultAzureCredential")
    clients = AzureClient(c)
    assert type(clients.credential_for("acct", parse("az://c/x"))).__name__ == "DefaultAzureCredential"
    clients.close()


def test_anonymous_sends_no_credential_even_with_azure_identity() -> None:
    _needs_identity()
    for c in (_cfg(anonymous=True), _cfg({"FLYTE_CHECKPOINT_AZURE_ANONYMOUS": "yes"})):
        assert c.auth.kind == "anonymous"
        assert _credential(c) is None


def _without_identity(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where azure.identity cannot be imported."""
    prelude = "import sys\nsys.modules['azure.identity'] = None\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True, check=False
    )


def test_without_azure_identity_nothing_configured_is_anonymous() -> None:
    done = _without_identity(
        """
        from flyte_checkpoint_azure.client import AzureClient
        from flyte_checkpoint_azure.config import AzureConfig
        from flyte_checkpoint_azure.uris import parse
        c = AzureConfig.resolve(env={})
        assert c.auth.kind == "none", c.auth
        assert AzureClient(c).credential_for("acct", parse("az://c/x")) is None
        """
    )
    assert done.returncode == 0, done.stderr


def test_without_azure_identity_a_service_principal_says_what_to_install() -> None:
    done = _without_identity(
        """
        from flyte_checkpoint.errors import ConfigurationError
        from flyte_checkpoint_azure.client import AzureClient
        from flyte_checkpoint_azure.config import AzureConfig
        from flyte_checkpoint_azure.uris import parse
        c = AzureConfig.resolve(env={"AZURE_STORAGE_TENANT_ID": "t", "AZURE_STORAGE_CLIENT_ID": "c",
                                     "AZURE_STORAGE_CLIENT_SECRET": "s3cr3t-value"})
        try:
            AzureClient(c).credential_for("acct", parse("az://c/x"))
        except ConfigurationError as exc:
            print(exc)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'flyte-checkpoint-azure[identity]'" in done.stdout
    assert "s3cr3t-value" not in done.stdout


def test_repr_names_sources_not_secrets() -> None:
    store = AzureStore(_cfg(connection_string=CS_KEY))
    assert "csacct" in repr(store) and "connection_string argument" in repr(store)
    sas_store = AzureStore(_cfg(account_name="acct", sas_token=SAS))
    for text in (repr(store), repr(sas_store), repr(store.config), repr(sas_store.config)):
        assert KEY not in text and SAS not in text and "SIGNATURE" not in text
    assert KEY in store.config.secrets() and "SIGNATURE%2Bsecret%3D" in sas_store.config.secrets()


# -- settings ----------------------------------------------------------------------


def test_readme_settings_table_is_the_configs() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert markdown_table(AzureConfig.settings_table()) in readme


def test_defaults_are_the_shared_ones_and_md5() -> None:
    c = _cfg()
    assert (c.part_size, c.max_concurrency, c.read_range_size, c.read_concurrency) == (8 * MiB, 8, 8 * MiB, 8)
    assert (c.checksum, c.verify_checksums, c.request_attempts, c.connect_timeout, c.read_timeout) == (
        "MD5",
        True,
        3,
        10.0,
        60.0,
    )
    assert c.max_connections == 32


def test_settings_from_env_then_arguments() -> None:
    env = {
        "FLYTE_CHECKPOINT_AZURE_PART_SIZE": "4MiB",
        "FLYTE_CHECKPOINT_AZURE_READ_CONCURRENCY": "2",
        "FLYTE_CHECKPOINT_AZURE_CHECKSUM": "none",
        "FLYTE_CHECKPOINT_AZURE_READ_TIMEOUT": "7500ms",
    }
    c = _cfg(env, read_concurrency=5)
    assert (c.part_size, c.read_concurrency, c.checksum, c.read_timeout) == (4 * MiB, 5, "NONE", 7.5)


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("FLYTE_CHECKPOINT_AZURE_PART_SIZE", "big"),
        ("FLYTE_CHECKPOINT_AZURE_MAX_CONCURRENCY", "1.5"),
        ("FLYTE_CHECKPOINT_AZURE_CHECKSUM", "maybe"),
        ("FLYTE_CHECKPOINT_AZURE_PART_SIZE", "5000MiB"),
        ("AZURE_STORAGE_ENDPOINT", "ftp://x"),
    ],
)
def test_a_bad_setting_is_a_configuration_error_naming_the_variable(var: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=var):
        AzureStore(_cfg({var: value}))


def test_bad_arguments_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="4000MiB"):
        AzureStore(part_size=5000 * MiB)
    with pytest.raises(ConfigurationError, match="max_concurrency"):
        AzureStore(max_concurrency=0)
    with pytest.raises(ConfigurationError, match="no setting 'blocksize'"):
        AzureStore(blocksize=1)


def test_sdk_retries_are_bounded_by_request_attempts() -> None:
    from .server import ACCOUNT_KEY, ACCOUNT_NAME

    for attempts in (1, 3):
        c = _cfg(account_name=ACCOUNT_NAME, account_key=ACCOUNT_KEY, request_attempts=attempts)
        clients = AzureClient(c)
        policy = clients.service(parse("az://c/x"))._config.retry_policy
        assert (type(policy).__name__, policy.total_retries) == ("ExponentialRetry", attempts - 1)
        clients.close()


def test_configure_store_reaches_the_azure_store_per_process_and_per_prefix() -> None:
    """``configure_store`` knows AzureConfig (StoreSpec.config): a prefix gets its own settings,
    the other containers the per-process ones, and a bad value is refused at the call."""
    from flyte_checkpoint.storage.registry import Registry

    reg = Registry()  # the installed plugins, through their entry points
    try:
        reg.configure("azure", {"read_timeout": "7s", "account_name": "devstoreaccount1"})
        reg.configure("az://special/", {"read_timeout": "9s"})
        special = reg.store_for("az://special/k")
        other = reg.store_for("az://other/k")
        assert isinstance(special, AzureStore) and isinstance(other, AzureStore)
        assert special is not other
        assert special.config.read_timeout == 9 and other.config.read_timeout == 7
        refused = r"configure_store\('azure', part_size='8 megs'\) is not a size"
        with pytest.raises(ConfigurationError, match=refused):
            reg.configure("azure", {"part_size": "8 megs"})
    finally:
        reg.close()
