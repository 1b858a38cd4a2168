"""Error mapping, from SDK exceptions built directly (no server needed)."""

from __future__ import annotations

import pytest
import requests
from flyte_checkpoint_gcs.errormap import map_error, reraise, scrub
from google.api_core import exceptions as api
from google.auth import exceptions as auth
from google.resumable_media import DataCorruption, InvalidResponse

from flyte_checkpoint.errors import (
    CheckpointPermissionError,
    CorruptCheckpointError,
    NotFoundError,
    StoreError,
    TransientError,
)

URI = "gs://bucket/run/ckpt"


def response(status: int, body: bytes = b"") -> requests.Response:
    r = requests.Response()
    r.status_code = status
    r._content = body
    return r


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (api.TooManyRequests("rate limited"), TransientError),
        (api.ServiceUnavailable("backend"), TransientError),
        (api.InternalServerError("oops"), TransientError),
        (api.GatewayTimeout("slow"), TransientError),
        (api.RetryError("Timeout of 20.0s exceeded", cause=api.ServiceUnavailable("x")), TransientError),
        (api.Forbidden("caller does not have storage.objects.get access"), CheckpointPermissionError),
        (api.Unauthorized("login required"), CheckpointPermissionError),
        (api.NotFound("No such object"), NotFoundError),
        (
            api.BadRequest('Provided CRC32C "AA==" doesn\'t match calculated CRC32C "BB==".'),
            CorruptCheckpointError,
        ),
        (api.PreconditionFailed("generation mismatch"), StoreError),
        (InvalidResponse(response(503), "Request failed"), TransientError),
        (InvalidResponse(response(429), "Request failed"), TransientError),
        (InvalidResponse(response(403), "Request failed"), CheckpointPermissionError),
        (InvalidResponse(response(400, b'{"error": {"message": "bad name"}}'), "x"), StoreError),
        (DataCorruption(response(200), "Checksum mismatch"), CorruptCheckpointError),
        (requests.ConnectionError("connection reset"), TransientError),
        (requests.ReadTimeout("read timed out"), TransientError),
        (auth.TransportError("metadata server unreachable"), TransientError),
        (auth.RefreshError("invalid_grant: account disabled"), CheckpointPermissionError),
        (auth.DefaultCredentialsError("no ADC"), CheckpointPermissionError),
        (ValueError("something else"), StoreError),
    ],
)
def test_sdk_errors_map_to_the_projects_own(exc: BaseException, kind: type) -> None:
    err = map_error(exc, URI, "read")
    assert type(err) is kind, err
    assert URI in str(err)


def test_messages_say_what_to_do() -> None:
    assert "check that the credentials" in str(map_error(api.Forbidden("denied"), URI, "read"))
    assert "worth retrying" in str(map_error(api.ServiceUnavailable("x"), URI, "read"))
    assert "Retry the save" in str(
        map_error(api.BadRequest("Provided MD5 hash doesn't match calculated MD5 hash"), URI, "upload to")
    )
    assert "GOOGLE_APPLICATION_CREDENTIALS" in str(map_error(auth.DefaultCredentialsError("x"), URI, "read"))


def test_server_message_is_quoted() -> None:
    err = map_error(
        InvalidResponse(response(400, b'{"error": {"message": "Invalid object name"}}'), "x"), URI, "read"
    )
    assert "HTTP 400: Invalid object name" in str(err)


def test_secrets_are_scrubbed_and_the_leaky_cause_is_not_chained() -> None:
    leaky = requests.ConnectionError(
        "HTTPSConnectionPool(host='storage.googleapis.com'): Max retries exceeded with url: "
        "/upload/storage/v1/b/bucket/o?uploadType=resumable&upload_id=ADPycdSECRETSESSION"
    )
    with pytest.raises(TransientError) as info:
        reraise(leaky, URI, "upload to")
    assert "ADPycdSECRETSESSION" not in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_a_harmless_cause_is_chained() -> None:
    cause = api.ServiceUnavailable("backend")
    with pytest.raises(TransientError) as info:
        reraise(cause, URI, "read")
    assert info.value.__cause__ is cause


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Authorization: Bearer ya29.a0AfH6SMBsecret", "a0AfH6SMBsecret"),
        ("token ya29.c.b0Aaekm1secret", "b0Aaekm1secret"),
        ("...&upload_id=ADPycdsecret&x=1", "ADPycdsecret"),
        ("https://h/o?X-Goog-Signature=abcdef0123&X-Goog-Credential=sa%40p", "abcdef0123"),
        ("-----BEGIN PRIVATE KEY-----\nMIIEsecret\n-----END PRIVATE KEY-----", "MIIEsecret"),
    ],
)
def test_scrub(text: str, secret: str) -> None:
    assert secret not in scrub(text)
