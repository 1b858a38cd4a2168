"""Error mapping and messages: the right class, the URI named, no secret anywhere."""

from __future__ import annotations

import logging
import socket
import traceback
from collections.abc import Iterator

import pytest
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from flyte_checkpoint_azure.errors import map_error
from flyte_checkpoint_azure.redaction import install

from flyte_checkpoint.errors import (
    CheckpointPermissionError,
    ContainerNotFoundError,
    CorruptCheckpointError,
    NotFoundError,
    ObjectReplacedError,
    StoreError,
    TransientError,
)
from flyte_checkpoint.storage.kit.redaction import scrub_values

from .helpers import BUCKET, config
from .server import ACCOUNT_KEY, ACCOUNT_NAME, AzureServer
from .test_credentials import account_sas, container_sas

URI = "az://ckpts/run/attempt-1/state"
CONFIG = config(account_name="acct")


def _http(status: int, code: str | None, message: str = "The service said no.", cls=HttpResponseError):
    exc = cls(message=message)
    exc.status_code = status
    exc.error_code = code
    return exc


@pytest.mark.parametrize(
    ("exc", "expected", "words"),
    [
        (_http(404, "BlobNotFound", cls=ResourceNotFoundError), NotFoundError, "no object at"),
        (_http(404, "ContainerNotFound"), ContainerNotFoundError, "container 'ckpts' does not exist"),
        (_http(403, "AuthorizationPermissionMismatch"), CheckpointPermissionError, "permission denied"),
        (_http(403, "AuthenticationFailed"), CheckpointPermissionError, "AZURE_STORAGE_SAS_TOKEN"),
        (_http(401, "NoAuthenticationInformation"), CheckpointPermissionError, "Storage Blob Data"),
        (_http(429, None), TransientError, "is retried"),
        (_http(500, "InternalError"), TransientError, "HTTP 500: InternalError"),
        (_http(503, "ServerBusy"), TransientError, "busy"),
        (_http(408, "OperationTimedOut"), TransientError, "is retried"),
        (_http(501, "NotImplemented"), StoreError, "HTTP 501"),
        (_http(412, "ConditionNotMet", cls=ResourceModifiedError), ObjectReplacedError, "changed while"),
        (_http(400, "InvalidBlockList"), TransientError, "another writer"),
        (_http(400, "Md5Mismatch"), TransientError, "damaged bytes"),
        (_http(412, "LeaseIdMissing"), StoreError, "locked by a lease"),
        (_http(400, "InvalidResourceName"), StoreError, "3-63 lower-case"),
        (_http(409, "BlobArchived"), StoreError, "HTTP 409: BlobArchived"),
        (ServiceRequestError("connection refused"), TransientError, "connection to"),
        (ServiceResponseError("read timed out"), TransientError, "connection to"),
        (ConnectionResetError("reset"), TransientError, "connection to"),
        (ClientAuthenticationError("no token: sig=abc"), CheckpointPermissionError, "no Azure AD token"),
        (ValueError("odd"), StoreError, "ValueError: odd"),
    ],
)
def test_map_error(exc: BaseException, expected: type, words: str) -> None:
    err = map_error(exc, URI, "read", config=CONFIG)
    assert type(err) is expected
    assert words in str(err)
    assert URI in str(err) or (expected is NotFoundError and URI in str(err))


def test_an_unreachable_identity_endpoint_is_transient_not_denied() -> None:
    """azure-identity reports a token endpoint it cannot reach as ClientAuthenticationError with
    the connection error as its cause: a network fault, retried, never "permission denied"."""
    from azure.identity import ClientSecretCredential

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused, and no other server takes it
        credential = ClientSecretCredential(
            "tenant",
            "client",
            "s3cret-value",
            authority=f"https://127.0.0.1:{port}",
            disable_instance_discovery=True,  # else it asks login.microsoftonline.com first
        )
        with pytest.raises(ClientAuthenticationError) as raised:
            credential.get_token("https://storage.azure.com/.default")
    err = map_error(raised.value, URI, "read", config=CONFIG)
    assert type(err) is TransientError, err
    assert "connection to" in str(err) and URI in str(err) and "retried" in str(err)
    assert "s3cret-value" not in str(err)


def test_exact_types_for_the_core() -> None:
    """A missing blob is exactly NotFoundError (loads as "no checkpoint"); a missing
    container is the subclass that load() raises."""
    assert type(map_error(_http(404, "BlobNotFound"), URI, "read", config=CONFIG)) is NotFoundError
    assert isinstance(map_error(_http(404, "ContainerNotFound"), URI, "read", config=CONFIG), NotFoundError)
    own = CorruptCheckpointError("x")
    assert map_error(own, URI, "read", config=CONFIG) is own


def test_an_sdk_error_holding_a_configured_secret_is_not_chained() -> None:
    secret_config = config(account_name="acct", account_key="c2VjcmV0LWtleS1ub2JvZHk=")
    leaky = _http(500, None, message="signature for c2VjcmV0LWtleS1ub2JvZHk= did not match")
    err = map_error(leaky, URI, "read", config=secret_config)
    assert "c2VjcmV0LWtleS1ub2JvZHk=" not in str(err) and err.__cause__ is None
    plain = _http(500, None)
    assert map_error(plain, URI, "read", config=secret_config).__cause__ is plain


def test_a_failed_call_keeps_a_secret_holding_cause_out_of_the_traceback() -> None:
    """The store raises map_error's error as it is (no ``from exc``): chain() dropped the cause
    that held the key, and a ``raise ... from exc`` would put it back in every traceback."""
    from flyte_checkpoint_azure.store import AzureStore

    key = "c2VjcmV0LWtleS1ub2JvZHk="
    store = AzureStore(config(account_name="acct", account_key=key))

    def leak() -> None:
        raise _http(500, None, message=f"signature for {key} did not match")

    try:
        with pytest.raises(TransientError) as info:
            store.call(leak, URI, "read")
        assert info.value.__cause__ is None
        assert key not in "".join(traceback.format_exception(info.value))
    finally:
        store.close()


def test_messages_redact_uri_credentials() -> None:
    err = map_error(
        _http(500, None), "abfs://ckpts@acct.dfs.core.windows.net/x?sig=SECRET", "read", config=CONFIG
    )
    assert "SECRET" not in str(err)


def test_scrub_removes_known_and_signature_like_secrets() -> None:
    text = (
        "GET https://a.blob.core.windows.net/c/x?sv=1&sig=abc%2Bdef&se=2 AccountKey=KKKK==; token zzzz-yyyy"
    )
    install()
    out = scrub_values(text, ["zzzz-yyyy"])
    assert "abc%2Bdef" not in out and "KKKK" not in out and "zzzz-yyyy" not in out
    assert "sig=<redacted>" in out and "AccountKey=<redacted>" in out


@pytest.mark.integration
def test_missing_container_names_it_and_the_account(make_store, prefix: str) -> None:
    store = make_store()
    uri = f"az://absent-container/{prefix}/x"
    for call in (
        lambda: store.stat(uri),
        lambda: store.open_read(uri),
        lambda: store.read_range(uri, 0, 5),
        lambda: list(store.list(f"az://absent-container/{prefix}/")),
        lambda: store.delete(uri),
    ):
        with pytest.raises(ContainerNotFoundError) as info:
            call()
        text = str(info.value)
        assert "'absent-container' does not exist" in text
        assert f"storage account '{ACCOUNT_NAME}'" in text
        assert "create it (az storage container create" in text and prefix in text


@pytest.mark.integration
def test_missing_object_and_missing_delete(make_store, prefix: str) -> None:
    store = make_store()
    uri = f"az://{BUCKET}/{prefix}/absent"
    with pytest.raises(NotFoundError, match=f"no object at {uri}"):
        store.open_read(uri)
    store.delete(uri)


def _secret_free(text: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in text, f"a secret leaked into: {text[:300]}"


def _sig_of(sas: str) -> str:
    return next(v for k, _, v in (p.partition("=") for p in sas.split("&")) if k == "sig")


@pytest.fixture
def all_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every log record of every logger (the Azure SDK's HTTP logging included)."""
    caplog.set_level(logging.DEBUG)
    yield caplog


@pytest.mark.integration
def test_wrong_key_is_a_permission_error_without_the_key(make_store, prefix: str, all_logs) -> None:
    wrong_key = "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktd3Jvbmcta2V5LXdyb25nLWtleQ=="
    store = make_store(account_key=wrong_key)
    uri = f"az://{BUCKET}/{prefix}/x"
    for call in (lambda: store.stat(uri), lambda: store.write_bytes(uri, b"x" * 200_000)):
        with pytest.raises(CheckpointPermissionError, match="permission denied") as info:
            call()
        _secret_free("".join(traceback.format_exception(info.value)), wrong_key, ACCOUNT_KEY)
    _secret_free(all_logs.text + repr(store), wrong_key, ACCOUNT_KEY)


@pytest.mark.integration
def test_sas_never_shows_in_errors_logs_or_repr(make_store, prefix: str, all_logs) -> None:
    read_only = container_sas(read=True, list=True)
    store = make_store(account_name=ACCOUNT_NAME, sas_token=read_only, part_size=64 * 1024)
    secrets = (read_only, _sig_of(read_only))
    uri = f"az://{BUCKET}/{prefix}/x"
    assert store.stat(uri) is None  # reading is allowed
    for data in (b"small", b"x" * 200_000):  # a single put, then blocks
        with pytest.raises(CheckpointPermissionError, match="permission denied") as info:
            store.write_bytes(uri, data)
        _secret_free("".join(traceback.format_exception(info.value)), *secrets)
    _secret_free(all_logs.text + repr(store) + repr(store.config), *secrets)
    assert any("fcp" not in r.name for r in all_logs.records)  # the SDK's logs were captured


@pytest.mark.integration
def test_expired_sas_is_a_permission_error(make_store, prefix: str) -> None:
    expired = container_sas(expiry_hours=-1, read=True)
    store = make_store(account_name=ACCOUNT_NAME, sas_token=expired)
    with pytest.raises(CheckpointPermissionError) as info:
        store.stat(f"az://{BUCKET}/{prefix}/x")
    _secret_free(str(info.value), expired, _sig_of(expired))


@pytest.mark.integration
def test_account_sas_in_connection_string_never_shows(
    azure_server: AzureServer, make_store, prefix: str
) -> None:
    sas = account_sas(read=True, list=True)
    cs = f"BlobEndpoint={azure_server.endpoint};SharedAccessSignature={sas}"
    store = make_store(connection_string=cs)
    with pytest.raises(CheckpointPermissionError) as info:
        store.write_bytes(f"az://{BUCKET}/{prefix}/x", b"x")
    _secret_free(str(info.value) + repr(store), sas, _sig_of(sas))


def test_log_filter_scrubs_signatures_from_http_library_records() -> None:
    install()
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger = logging.getLogger("urllib3.connectionpool")
    handler, level = Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        logger.debug('%s "%s %s"', "http://h", "GET", "/c/x?sv=1&sig=TOPSECRET%3D&sp=r")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert seen == ['http://h "GET /c/x?sv=1&sig=<redacted>&sp=r"']


def test_stalled_server_times_out_as_transient(make_store) -> None:
    """A server that accepts connections and never answers: the read timeout ends it."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        store = make_store(
            endpoint_url=f"http://127.0.0.1:{port}/{ACCOUNT_NAME}", read_timeout=1, request_attempts=1
        )
        with pytest.raises(TransientError, match="connection to"):
            store.stat(f"az://{BUCKET}/x")


def test_refused_connection_is_transient(make_store) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        store = make_store(endpoint_url=f"http://127.0.0.1:{port}/{ACCOUNT_NAME}", request_attempts=1)
        with pytest.raises(TransientError, match=f"az://{BUCKET}/x"):
            store.stat(f"az://{BUCKET}/x")
