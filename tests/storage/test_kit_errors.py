"""The kit's errors: one error type per HTTP answer on every cloud, and chaining that leaks no secret."""

from __future__ import annotations

import traceback

import pytest

from flyte_checkpoint.errors import (
    CheckpointPermissionError,
    ContainerNotFoundError,
    NotFoundError,
    ObjectReplacedError,
    StoreError,
    TransientError,
)
from flyte_checkpoint.storage.kit import redaction
from flyte_checkpoint.storage.kit.errors import TRANSIENT_STATUS, chain, from_status, transport_failed

URI = "s3://bucket/run/ckpt?X-Amz-Signature=abc123"
HINT = "check that the credentials may read and write this bucket"


def status_error(status: int, detail: str = ""):
    return from_status(status, uri=URI, action="read", detail=detail, permission_hint=HINT)


def test_transient_statuses_are_the_documented_ones():
    assert frozenset({408, 429, 500, 502, 503, 504}) == TRANSIENT_STATUS


@pytest.mark.parametrize("status", [401, 403])
def test_denied_is_a_permission_error_with_the_hint(status):
    err = status_error(status, "AccessDenied")
    assert type(err) is CheckpointPermissionError and isinstance(err, PermissionError)
    assert str(err) == (
        f"permission denied to read s3://bucket/run/ckpt?X-Amz-Signature=<redacted> (HTTP {status}:"
        f" AccessDenied): {HINT}"
    )


def test_not_found_is_an_object_not_found_never_a_missing_container():
    err = status_error(404)
    assert type(err) is NotFoundError and not isinstance(err, ContainerNotFoundError)
    assert str(err) == "no object at s3://bucket/run/ckpt?X-Amz-Signature=<redacted> (HTTP 404)"


@pytest.mark.parametrize("status", sorted(TRANSIENT_STATUS))
def test_throttling_and_server_errors_are_transient(status):
    err = status_error(status)
    assert type(err) is TransientError and isinstance(err, ConnectionError)
    assert f"(HTTP {status})" in str(err) and "retried" in str(err)


def test_a_changed_object_under_a_pinned_read_is_object_replaced_and_transient():
    """412 answers a read pinned to a version (If-Match, a generation) that another save replaced:
    ObjectReplacedError, a TransientError (retried), never "damaged" or "not found"."""
    err = status_error(412)
    assert type(err) is ObjectReplacedError and isinstance(err, TransientError)
    assert isinstance(err, ConnectionError) and "(HTTP 412)" in str(err)
    assert "s3://bucket/run/ckpt?X-Amz-Signature=<redacted>" in str(err)


@pytest.mark.parametrize("status", [400, 405, 409, 416, 501, 505])
def test_other_answers_are_store_errors(status):
    err = status_error(status)
    assert type(err) is StoreError and str(err).startswith(
        f"cannot read s3://bucket/run/ckpt?X-Amz-Signature=<redacted> (HTTP {status})"
    )


def test_detail_is_scrubbed_of_registered_patterns():
    redaction.protect_logs([], [r"(fcpkitsecret=)\w+"])
    err = status_error(500, "upload failed fcpkitsecret=abcdef")
    assert "abcdef" not in str(err) and "fcpkitsecret=<redacted>" in str(err)


def test_transport_failed_is_transient_names_the_endpoint_and_chains_the_cause():
    cause = ConnectionResetError(104, "Connection reset by peer")
    err = transport_failed(cause, uri="gs://b/k", action="write", endpoint="http://127.0.0.1:4443")
    assert type(err) is TransientError and err.__cause__ is cause
    assert str(err) == (
        "the connection to http://127.0.0.1:4443 failed while trying to write gs://b/k (ConnectionResetError:"
        " [Errno 104] Connection reset by peer); the operation is retried, and if it keeps failing check the"
        " network and endpoint_url"
    )
    assert "the connection to the service failed" in str(
        transport_failed(cause, uri="gs://b/k", action="read", endpoint=None)
    )


def test_transport_failed_whose_cause_shows_credentials_drops_the_cause():
    cause = OSError("cannot reach http://user:pa55word@proxy:3128")
    err = transport_failed(cause, uri="gs://b/k", action="read", endpoint="http://user:pa55word@proxy:3128")
    assert "pa55word" not in str(err) and err.__cause__ is None and err.__suppress_context__


def raised(err, cause, secrets):
    try:
        try:
            raise cause
        except Exception as exc:
            raise chain(err, exc, secrets)
    except Exception as final:
        return final, "".join(traceback.format_exception(final))


def test_chain_keeps_a_clean_cause():
    cause = TimeoutError("read timed out")
    err, text = raised(StoreError("cannot read az://c/k"), cause, ["account-key-value"])
    assert err.__cause__ is cause and "read timed out" in text


def test_chain_scrubs_the_message_and_drops_a_cause_holding_a_secret():
    key = "bG9uZ+2V/kZXk="
    cause = ValueError(f"auth header SharedKey acct:{key}")
    err, text = raised(StoreError(f"cannot read az://c/k: {cause}"), cause, [key, "unused-secret"])
    assert str(err) == "cannot read az://c/k: auth header SharedKey acct:<redacted>"
    assert err.__cause__ is None and key not in text and "auth header" not in text.split("StoreError")[0]


def test_chain_looks_through_the_causes_own_chain():
    inner = RuntimeError("token tok-123456 expired")
    outer = ConnectionError("request failed")
    outer.__cause__ = inner
    err, text = raised(TransientError("cannot write gs://b/k"), outer, ["tok-123456"])
    assert err.__cause__ is None and "tok-123456" not in text
