"""Errors: botocore's mapped into the project's vocabulary, with messages that help and leak nothing."""

from __future__ import annotations

from typing import Any

import pytest
from botocore import exceptions as bx
from flyte_checkpoint_s3.error_map import map_error
from flyte_checkpoint_s3.store import S3Store

from flyte_checkpoint.checkpoint import Checkpoint
from flyte_checkpoint.errors import (
    CheckpointPermissionError,
    ContainerNotFoundError,
    CorruptCheckpointError,
    NotFoundError,
    StoreError,
    TransientError,
)

from .helpers import ACCESS_KEY, BUCKET, SECRET_KEY
from .server import free_port

URI = "s3://bkt/run/ckpt"


def client_error(code: str, status: int, message: str = "", op: str = "GetObject") -> bx.ClientError:
    response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return bx.ClientError(response, op)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("exc", "kind", "words"),
    [
        (client_error("NoSuchKey", 404), NotFoundError, "no checkpoint object at s3://bkt/run/ckpt"),
        (client_error("404", 404, op="HeadObject"), NotFoundError, "no checkpoint object"),
        (client_error("NoSuchBucket", 404), ContainerNotFoundError, "bucket 'bkt' does not exist"),
        (client_error("AccessDenied", 403), CheckpointPermissionError, "access denied"),
        (client_error("InvalidAccessKeyId", 403), CheckpointPermissionError, "credentials are valid"),
        (client_error("ExpiredToken", 400), CheckpointPermissionError, "access denied"),
        (client_error("SlowDown", 503), TransientError, "temporary; retried"),
        (client_error("InternalError", 500), TransientError, "S3 said InternalError"),
        (client_error("", 502), TransientError, "S3 said 502"),
        (client_error("RequestTimeout", 400), TransientError, "retried"),
        (client_error("BadDigest", 400), TransientError, "BadDigest"),
        (client_error("PreconditionFailed", 412), TransientError, "changed while it was being read"),
        (client_error("NoSuchUpload", 404), StoreError, "aborted by someone else"),
        (client_error("EntityTooSmall", 400), StoreError, "AWS S3 needs at least 5 MiB"),
        (client_error("InvalidBucketName", 400), StoreError, "S3 said InvalidBucketName"),
        (bx.EndpointConnectionError(endpoint_url="http://h:1"), TransientError, "could not connect to"),
        (bx.ConnectTimeoutError(endpoint_url="http://h:1"), TransientError, "could not connect to"),
        (bx.ReadTimeoutError(endpoint_url="http://h:1"), TransientError, "failed mid-request"),
        (bx.ConnectionClosedError(endpoint_url="http://h:1"), TransientError, "failed mid-request"),
        (bx.ResponseStreamingError(error="reset"), TransientError, "failed mid-request"),
        (bx.IncompleteReadError(actual_bytes=1, expected_bytes=2), TransientError, "failed mid-request"),
        (bx.NoCredentialsError(), CheckpointPermissionError, "no usable AWS credentials"),
        (bx.FlexibleChecksumError(error_msg="bad"), CorruptCheckpointError, "failed its checksum"),
        (bx.ProfileNotFound(profile="nope"), StoreError, "Check AWS_PROFILE"),
        (ConnectionResetError("reset by peer"), TransientError, "ConnectionResetError"),
        (RuntimeError("odd"), StoreError, "RuntimeError: odd"),
    ],
)
def test_mapping(exc: BaseException, kind: type, words: str) -> None:
    err = map_error(exc, URI, "read", bucket="bkt", endpoint="http://h:1 (from FLYTE_AWS_ENDPOINT)")
    assert type(err) is kind
    assert words in str(err)
    assert "s3://bkt/run/ckpt" in str(err)


def test_transient_is_a_connection_error_and_not_found_a_file_not_found_error() -> None:
    assert isinstance(map_error(client_error("SlowDown", 503), URI, "read"), ConnectionError)
    assert isinstance(map_error(client_error("NoSuchKey", 404), URI, "read"), FileNotFoundError)


def test_secrets_are_scrubbed_from_messages() -> None:
    exc = client_error("InvalidAccessKeyId", 403, f"The key {ACCESS_KEY} with secret {SECRET_KEY} is unknown")
    text = str(map_error(exc, URI, "read", secrets=(ACCESS_KEY, SECRET_KEY)))
    assert ACCESS_KEY not in text and SECRET_KEY not in text
    assert "<redacted>" in text


def test_uri_query_is_redacted() -> None:
    text = str(map_error(client_error("AccessDenied", 403), "s3://bkt/k?X-Amz-Signature=abc123", "read"))
    assert "abc123" not in text


def test_repr_and_config_hide_credentials() -> None:
    store = S3Store(access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY, endpoint_url="http://u:pw@h:1")
    for text in (repr(store), repr(store.config), store.config.describe_endpoint()):
        assert ACCESS_KEY not in text and SECRET_KEY not in text and "pw" not in text


@pytest.mark.integration
def test_missing_bucket_messages_from_the_server(make_s3_store: Any) -> None:
    store = make_s3_store(access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY)
    uri = "s3://fcp-no-such-bucket/run/ckpt"
    for call in (store.stat, store.read_bytes, store.delete, lambda u: list(store.list(u))):
        with pytest.raises(ContainerNotFoundError) as info:
            call(uri)
        text = str(info.value)
        assert "'fcp-no-such-bucket'" in text and "does not exist" in text and uri in text
        assert ACCESS_KEY not in text and SECRET_KEY not in text


@pytest.mark.integration
def test_missing_bucket_is_an_error_on_load_but_missing_key_is_none(
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
    port = free_port()  # nothing listens there
    store = make_s3_store(
        endpoint_url=f"http://127.0.0.1:{port}", connect_timeout=1, read_timeout=1, max_attempts=1
    )
    with pytest.raises(
        TransientError, match=rf"could not connect to http://127.0.0.1:{port} \(from endpoint_url"
    ):
        store.stat(f"s3://{BUCKET}/k")


def test_invalid_uris() -> None:
    store = S3Store(endpoint_url="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="names no bucket"):
        store.stat("s3:///key")
    with pytest.raises(ValueError, match="no object key"):
        store.stat("s3://bkt/")
    with pytest.raises(ValueError, match="carries credentials") as info:
        store.stat("s3://AKIA:SECRETVALUE@bkt/k")
    assert "SECRETVALUE" not in str(info.value)
