"""Every URI form: parsed right, and all reaching the same object on Azurite."""

from __future__ import annotations

import pytest
from flyte_checkpoint_azure.uris import parse

from flyte_checkpoint.errors import CheckpointPermissionError, ConfigurationError, InvalidURIError
from flyte_checkpoint.storage.kit.locations import Location

from .helpers import BUCKET, config
from .server import ACCOUNT_KEY, ACCOUNT_NAME


@pytest.mark.parametrize(
    ("uri", "container", "name", "account", "suffix"),
    [
        ("az://ckpts/run/1/state", "ckpts", "run/1/state", None, None),
        ("abfs://ckpts/run/state", "ckpts", "run/state", None, None),
        ("abfss://ckpts/state", "ckpts", "state", None, None),
        ("abfs://ckpts@acct.dfs.core.windows.net/a/b", "ckpts", "a/b", "acct", "core.windows.net"),
        ("abfss://ckpts@acct.dfs.core.windows.net/a/b", "ckpts", "a/b", "acct", "core.windows.net"),
        ("abfss://ckpts@acct.blob.core.windows.net/a", "ckpts", "a", "acct", "core.windows.net"),
        ("abfs://ckpts@acct.dfs.core.chinacloudapi.cn/a", "ckpts", "a", "acct", "core.chinacloudapi.cn"),
        ("az://ckpts@acct/a", "ckpts", "a", "acct", None),
        ("AZ://ckpts/dir with space/é", "ckpts", "dir with space/é", None, None),
        ("az://ckpts", "ckpts", "", None, None),
    ],
)
def test_parse(uri: str, container: str, name: str, account: str | None, suffix: str | None) -> None:
    loc = parse(uri, want_key=False)
    assert (loc.bucket, loc.key, loc.account, loc.endpoint_suffix) == (container, name, account, suffix)
    if name:  # a blob's URI is rebuilt in the same form (scheme in lower case)
        assert loc.uri(name) == loc.scheme + uri[len(loc.scheme) :]


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("s3://bucket/key", "not a URI of Azure Blob Storage"),
        ("az:/ckpts/key", "not a URI of Azure Blob Storage"),
        ("az:///key", "names no container"),
        ("abfs://@acct.dfs.core.windows.net/key", "names no container"),
        ("abfs://ckpts@acct.example.com/key", "not a storage account host"),
        ("az://ckpts", "names a container but no object"),
    ],
)
def test_parse_rejects_other_forms_and_names_the_right_ones(uri: str, words: str) -> None:
    with pytest.raises(InvalidURIError, match=words) as info:
        parse(uri)
    assert "ACCOUNT.dfs.core.windows.net" in str(info.value)  # each message shows a good form


def test_dfs_host_maps_to_the_blob_endpoint() -> None:
    c = config()
    loc = parse("abfss://ckpts@acct.dfs.core.windows.net/a")
    assert c.endpoint_for("acct", loc) == "https://acct.blob.core.windows.net"
    cn = parse("abfs://ckpts@acct.dfs.core.chinacloudapi.cn/a")
    assert c.endpoint_for("acct", cn) == "https://acct.blob.core.chinacloudapi.cn"


def test_endpoint_override_serves_the_configured_account_only() -> None:
    c = config(account_name="acct", endpoint_url="http://127.0.0.1:1/acct/")
    loc = parse("abfs://ckpts@acct.dfs.core.windows.net/a")
    assert c.endpoint_for("acct", loc) == "http://127.0.0.1:1/acct"
    assert c.endpoint_for("other", loc) == "https://other.blob.core.windows.net"


def test_account_comes_from_a_path_style_endpoint() -> None:
    c = config(endpoint_url="http://127.0.0.1:10000/devstoreaccount1")
    assert c.account_for(parse("az://ckpts/a")) == "devstoreaccount1"
    host_style = config(endpoint_url="https://acct.blob.core.windows.net")
    assert host_style.account_for(parse("az://ckpts/a")) == "acct"


def test_short_form_without_an_account_says_how_to_name_one() -> None:
    c = config()
    with pytest.raises(ConfigurationError, match="AZURE_STORAGE_ACCOUNT_NAME") as info:
        c.account_for(parse("az://ckpts/run/a"))
    assert "abfs://ckpts@ACCOUNT.dfs.core.windows.net/run/a" in str(info.value)


def test_key_of_one_account_is_not_sent_to_another(make_store) -> None:
    store = make_store()
    with pytest.raises(CheckpointPermissionError) as info:
        store.stat("abfss://ckpts@otheraccount.dfs.core.windows.net/a")
    text = str(info.value)
    assert "'otheraccount'" in text and f"'{ACCOUNT_NAME}'" in text
    assert ACCOUNT_KEY not in text


def test_a_container_uri_is_not_an_object(make_store) -> None:
    store = make_store()
    with pytest.raises(InvalidURIError, match="names a container but no object"):
        store.open_read(f"az://{BUCKET}")


FORMS = [
    "az://{c}/{p}",
    "abfs://{c}/{p}",
    "abfss://{c}/{p}",
    "abfs://{c}@{a}.dfs.core.windows.net/{p}",
    "abfss://{c}@{a}.dfs.core.windows.net/{p}",
    "abfss://{c}@{a}.blob.core.windows.net/{p}",
    "az://{c}@{a}.blob.core.windows.net/{p}",
]


@pytest.mark.integration
@pytest.mark.parametrize("form", FORMS)
def test_each_form_reaches_the_same_object(make_store, prefix: str, form: str) -> None:
    """Writes through one form are read through every other; listings keep the form."""
    store = make_store()
    store.write_bytes(f"az://{BUCKET}/{prefix}/obj", b"same object")
    uri = form.format(c=BUCKET, a=ACCOUNT_NAME, p=f"{prefix}/obj")
    assert store.stat(uri) == 11
    assert store.read_bytes(uri) == b"same object"
    listed_root = form.format(c=BUCKET, a=ACCOUNT_NAME, p=f"{prefix}/")
    assert list(store.list(listed_root)) == [uri]
    store.write_bytes(uri, b"written back")
    assert store.read_bytes(f"az://{BUCKET}/{prefix}/obj") == b"written back"


def test_location_rebuilds_uris_in_the_form_parsed() -> None:
    loc = parse("abfs://c@a.dfs.core.windows.net/x/y")
    assert loc == Location("abfs", "c@a.dfs.core.windows.net", "c", "x/y", "a", "core.windows.net")
    assert loc.uri("z") == "abfs://c@a.dfs.core.windows.net/z"
