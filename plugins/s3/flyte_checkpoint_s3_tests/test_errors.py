"""Errors: botocore's mapped into the project's vocabulary, with messages that help and leak nothing."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from botocore import exceptions as bx
from flyte_checkpoint_s3.config import S3Config
from flyte_checkpoint_s3.errors import map_error
from flyte_checkpoint_s3.store import S3Store

from flyte_checkpoint.checkpoint import Checkpoint
from flyte_checkpoint.errors import (
    CheckpointPermissionError,
    ConfigurationError,
    ContainerNotFoundError,
    CorruptCheckpointError,
    NotFoundError,
    ObjectReplacedError,
    StoreError,
    TransientError,
)

from .helpers import ACCESS_KEY, BUCKET, SECRET_KEY, key_of
from .server import moto_auth

URI = "s3://bkt/run/ckpt"


def client_error(code: str, status: int, message: str = "", op: str = "GetObject") -> bx.ClientError:
    response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return bx.ClientError(response, op)  # type: ignore[arg-type]


CFG = S3Config.resolve(
    env={}, endpoint_url="http://h:1", access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY
)


@pytest.mark.parametrize(
    ("exc", "kind", "words"),
    [
        (client_error("NoSuchKey", 404), NotFoundError, "no object at s3://bkt/run/ckpt"),
        (client_error("404", 404, op="HeadObject"), NotFoundError, "no object at"),
        (
            client_error("NoSuchBucket", 404),
            ContainerNotFoundError,
            "the bucket 'bkt' does not exist at http://h:1",
        ),
        (client_error("AccessDenied", 403), CheckpointPermissionError, "permission denied to read"),
        (client_error("AccessDenied", 403), CheckpointPermissionError, "lack s3:ListBucket on the bucket"),
        (client_error("InvalidAccessKeyId", 403), CheckpointPermissionError, "credentials are valid"),
        (client_error("ExpiredToken", 400), CheckpointPermissionError, "permission denied to read"),
        (client_error("", 401), CheckpointPermissionError, "HTTP 401"),
        (client_error("SlowDown", 503), TransientError, "retried"),
        (client_error("", 429), TransientError, "HTTP 429"),
        (client_error("InternalError", 500), TransientError, "InternalError"),
        (client_error("", 502), TransientError, "HTTP 502"),
        (client_error("RequestTimeout", 400), TransientError, "retried"),
        (client_error("BadDigest", 400), TransientError, "damaged in transit"),
        (client_error("PreconditionFailed", 412), ObjectReplacedError, "changed while it was being read"),
        (client_error("NoSuchUpload", 404), TransientError, "completed or aborted by someone else"),
        (client_error("EntityTooSmall", 400), StoreError, "AWS S3 needs at least 5MiB"),
        (client_error("NotImplemented", 501), StoreError, "HTTP 501"),
        (client_error("InvalidBucketName", 400), StoreError, "InvalidBucketName"),
        (
            bx.EndpointConnectionError(endpoint_url="http://h:1"),
            TransientError,
            "the connection to http://h:1",
        ),
        (bx.ConnectTimeoutError(endpoint_url="http://h:1"), TransientError, "ConnectTimeoutError"),
        (bx.ReadTimeoutError(endpoint_url="http://h:1"), TransientError, "ReadTimeoutError"),
        (bx.ConnectionClosedError(endpoint_url="http://h:1"), TransientError, "ConnectionClosedError"),
        (bx.ResponseStreamingError(error="reset"), TransientError, "ResponseStreamingError"),
        (bx.IncompleteReadError(actual_bytes=1, expected_bytes=2), TransientError, "IncompleteReadError"),
        (bx.NoCredentialsError(), CheckpointPermissionError, "no usable AWS credentials"),
        (
            bx.CredentialRetrievalError(provider="container-role", error_msg="timed out"),
            TransientError,
            "provider",
        ),
        (bx.FlexibleChecksumError(error_msg="bad"), CorruptCheckpointError, "failed its checksum"),
        (bx.ProfileNotFound(profile="nope"), ConfigurationError, "check AWS_PROFILE"),
        (ConnectionResetError("reset by peer"), TransientError, "ConnectionResetError"),
        (RuntimeError("odd"), StoreError, "RuntimeError: odd"),
    ],
)
def test_mapping(exc: BaseException, kind: type, words: str) -> None:
    err = map_error(exc, URI, "read", config=CFG)
    assert type(err) is kind
    assert words in str(err)
    assert "s3://bkt/run/ckpt" in str(err)
    assert err.__cause__ is exc


def test_transient_is_a_connection_error_and_not_found_a_file_not_found_error() -> None:
    assert isinstance(map_error(client_error("SlowDown", 503), URI, "read", config=CFG), ConnectionError)
    assert isinstance(map_error(client_error("NoSuchKey", 404), URI, "read", config=CFG), FileNotFoundError)


def test_secrets_are_scrubbed_from_messages() -> None:
    exc = client_error("InvalidAccessKeyId", 403, f"The key {ACCESS_KEY} with secret {SECRET_KEY} is unknown")
    err = map_error(exc, URI, "read", config=CFG)
    assert ACCESS_KEY not in str(err) and SECRET_KEY not in str(err)
    assert "<redacted>" in str(err)
    assert err.__cause__ is None and err.__suppress_context__  # the cause's text holds them


def test_uri_query_is_redacted() -> None:
    text = str(
        map_error(client_error("AccessDenied", 403), "s3://bkt/k?X-Amz-Signature=abc123", "read", config=CFG)
    )
    assert "abc123" not in text


def test_repr_and_config_hide_credentials() -> None:
    store = S3Store(access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY, endpoint_url="http://u:pw@h:1")
    for text in (repr(store), repr(store.config), store.config.describe_endpoint()):
        assert ACCESS_KEY not in text and SECRET_KEY not in text and "pw" not in text


@pytest.mark.integration
def test_missing_container_messages_from_the_server(make_s3_store: Any) -> None:
    store = make_s3_store(access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY)
    uri = "s3://fcp-no-such-bucket/run/ckpt"
    for call in (store.stat, store.read_bytes, store.delete, lambda u: list(store.list(u))):
        with pytest.raises(ContainerNotFoundError) as info:
            call(uri)
        text = str(info.value)
        assert "'fcp-no-such-bucket'" in text and "does not exist" in text and uri in text
        assert ACCESS_KEY not in text and SECRET_KEY not in text


@pytest.mark.integration
def test_missing_container_is_an_error_on_load_but_missing_key_is_none(
    s3_env: dict[str, str], s3_root: str
) -> None:
    with Checkpoint(f"{s3_root}/a", f"{s3_root}/never-written") as cp:
        assert cp.load_sync() is None
    with (
        Checkpoint(f"{s3_root}/a", "s3://fcp-no-such-bucket/prev") as cp,
        pytest.raises(ContainerNotFoundError),
    ):
        cp.load_sync()


@pytest.mark.integration
def test_unreachable_endpoint_is_transient_and_names_it(make_s3_store: Any) -> None:
    with socket.socket() as s:  # bound, never listening: refused, and no other server takes the port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        store = make_s3_store(
            endpoint_url=f"http://127.0.0.1:{port}", connect_timeout=1, read_timeout=1, request_attempts=1
        )
        said = rf"the connection to http://127.0.0.1:{port} \(from argument\)"
        with pytest.raises(TransientError, match=said):
            store.stat(f"s3://{BUCKET}/k")


@pytest.mark.integration
def test_no_such_upload_from_the_server_is_transient(make_s3_store: Any, raw_s3: Any, s3_root: str) -> None:
    """A concurrent commit or abort lost ours: the server's NoSuchUpload is retried, not a StoreError."""
    store = make_s3_store()
    uri = f"{s3_root}/lost"
    upload_id = raw_s3.create_multipart_upload(Bucket=BUCKET, Key=key_of(uri))["UploadId"]
    raw_s3.abort_multipart_upload(Bucket=BUCKET, Key=key_of(uri), UploadId=upload_id)
    with pytest.raises(TransientError, match="completed or aborted by someone else"):
        store.call(
            lambda: store.client.get().list_parts(Bucket=BUCKET, Key=key_of(uri), UploadId=upload_id),
            uri,
            "list the parts of",
        )


@pytest.mark.integration
def test_denied_head_is_a_permission_error_with_s3s_text_never_no_checkpoint(
    s3_env: dict[str, str], make_s3_store: Any, s3_root: str
) -> None:
    """A HEAD answered 403 (no body, so no code) is denied access, with the ListBucket hint, and a
    load raises instead of returning "no checkpoint"."""
    store = make_s3_store(access_key_id="AKIAUNKNOWNKEY000000", secret_access_key=SECRET_KEY)
    endpoint = s3_env["AWS_ENDPOINT_URL_S3"]
    moto_auth(endpoint, "0")
    try:
        with pytest.raises(CheckpointPermissionError, match=r"HTTP 403.*lack s3:ListBucket") as info:
            store.stat(f"{s3_root}/absent")
        assert "AKIAUNKNOWNKEY000000" not in str(info.value) and SECRET_KEY not in str(info.value)
        # the registry's store, with the environment's keys, which moto now refuses too
        with (
            Checkpoint(f"{s3_root}/next", f"{s3_root}/absent") as cp,
            pytest.raises(CheckpointPermissionError),
        ):
            cp.load_sync()
    finally:
        moto_auth(endpoint, "inf")
