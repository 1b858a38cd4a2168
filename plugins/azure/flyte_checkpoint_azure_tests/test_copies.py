"""Put Block From URL (``flyte_checkpoint_azure.copies``): how the service is let read the
source for each credential, and what a copy the service could not make raises."""

from __future__ import annotations

import random
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from flyte_checkpoint_azure import copies
from flyte_checkpoint_azure.store import AzureStore

from flyte_checkpoint.errors import CheckpointPermissionError, CopySourceChangedError, StoreError

from .helpers import BUCKET, config
from .server import ACCOUNT_KEY, ACCOUNT_NAME
from .test_credentials import container_sas

pytestmark = pytest.mark.integration

MiB = 1024 * 1024


class FakeToken:
    """An Azure AD credential (what ``get_token`` gives); Azurite over http takes none."""

    def __init__(self) -> None:
        self.scopes: list[str] = []

    def get_token(self, *scopes: str, **_kw: Any) -> Any:
        self.scopes.extend(scopes)
        return type("AccessToken", (), {"token": "t0ken-value", "expires_on": 2**40})()


def _copied(store: Any, root: str, data: bytes) -> bytes:
    """An object made of a 1 MiB copy from ``root/src`` (holding ``data``), read back."""
    src, dest = f"{root}/src", f"{root}/dest"
    store.write_bytes(src, data)
    source = store.copy_source(src)
    with store.open_write(dest) as w:
        w.write(b"head")
        w.copy(source, 1000, MiB)
        assert w.bytes_copied == MiB
    return store.read_bytes(dest)


def test_a_key_credential_lets_the_service_read_by_a_read_only_sas(make_store, prefix: str) -> None:
    store = make_store()
    root = f"az://{BUCKET}/{prefix}"
    data = random.Random(1).randbytes(2 * MiB)
    assert _copied(store, root, data) == b"head" + data[1000 : 1000 + MiB]
    url, kwargs = copies.source_access(store, store.copy_source(f"{root}/src"))
    query = parse_qs(urlsplit(url).query)
    assert query["sp"] == ["r"] and query["sr"] == ["b"] and "sig" in query and kwargs == {}


def test_a_sas_credential_lends_its_own_token(make_store, prefix: str) -> None:
    sas = container_sas(read=True, write=True, delete=True, list=True, create=True)
    store = make_store(account_name=ACCOUNT_NAME, sas_token=sas)
    root = f"az://{BUCKET}/{prefix}"
    data = random.Random(2).randbytes(2 * MiB)
    assert _copied(store, root, data) == b"head" + data[1000 : 1000 + MiB]
    url, kwargs = copies.source_access(store, store.copy_source(f"{root}/src"))
    assert urlsplit(url).query == sas and kwargs == {}


def test_a_token_credential_sends_a_bearer_token_as_copy_source_authorization() -> None:
    """Not against Azurite (the SDK sends no bearer token over http): the arguments only,
    for an https endpoint that is never contacted."""
    token = FakeToken()
    store = AzureStore(
        config(account_name=ACCOUNT_NAME, endpoint_url="https://127.0.0.1:9/x", credential=token)
    )
    source = copies.CopySource(f"az://{BUCKET}/p/src", 10, '"0x1"')
    url, kwargs = copies.source_access(store, source)
    assert urlsplit(url).query == "" and url.endswith(f"/{BUCKET}/p/src")
    assert kwargs == {"source_authorization": "Bearer t0ken-value"}
    assert token.scopes == ["https://storage.azure.com/.default"]
    store.close()


def test_a_source_the_service_may_not_read_is_a_permission_error(make_store, prefix, monkeypatch) -> None:
    """The source URL without authorization: Azurite's own read of it is refused (403
    CannotVerifyCopySource), which is a CheckpointPermissionError saying how copies authorize."""
    store = make_store()
    root = f"az://{BUCKET}/{prefix}"
    monkeypatch.setattr(
        copies, "source_access", lambda s, src: (s.client.blob(copies.parse(src.uri)).url, {})
    )
    with pytest.raises(CheckpointPermissionError) as info:
        _copied(store, root, random.Random(3).randbytes(2 * MiB))
    text = str(info.value)
    assert f"cannot copy a range of az://{BUCKET}/{prefix}/src into" in text
    assert "SAS made from the account key" in text and "CannotVerifyCopySource" in text
    assert store.stat(f"{root}/dest") is None


def test_an_unchanged_source_the_service_cannot_find_is_not_called_replaced(make_store, prefix, monkeypatch):
    """The service reads another URL than the source's (absent: Azurite answers 412 to its
    If-Match there, Azure 404) while the source is unchanged: a StoreError naming the source
    URL, not a CopySourceChangedError that the retry layer would retry; the SAS made for the
    request is in no message or cause."""
    store = make_store()
    root = f"az://{BUCKET}/{prefix}"
    real = copies.source_access
    made: list[str] = []

    def elsewhere(s: Any, src: Any) -> tuple[str, dict[str, Any]]:
        url, kwargs = real(s, copies.CopySource(f"{root}/missing", src.size, src.version))
        made.extend(copies._signatures(url))
        return url, kwargs

    monkeypatch.setattr(copies, "source_access", elsewhere)
    with pytest.raises(StoreError) as info:
        _copied(store, root, random.Random(4).randbytes(2 * MiB))
    assert not isinstance(info.value, CopySourceChangedError)
    text = str(info.value)
    assert "could not read the source (HTTP 412 SourceConditionNotMet) although it is unchanged" in text
    assert f"/{BUCKET}/{prefix}/src must be reachable from the service" in text
    seen, exc = [], info.value  # the message and every cause
    while exc is not None:
        seen.append(f"{exc} {exc.args!r}")
        exc = exc.__cause__ or exc.__context__
    assert made and not any(sig in t for sig in made for t in seen)
    assert ACCOUNT_KEY not in " ".join(seen)
