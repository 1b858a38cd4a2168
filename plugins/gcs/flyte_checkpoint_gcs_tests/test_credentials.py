"""Credentials: the order they are taken in, anonymous mode, and secrets kept out of messages."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import requests
from flyte_checkpoint_gcs.errors import map_error
from flyte_checkpoint_gcs.store import GCSStore

from flyte_checkpoint.errors import CheckpointPermissionError, ContainerNotFoundError, TransientError
from flyte_checkpoint.storage.kit import scrub
from flyte_checkpoint.uri import join

from .helpers import CHUNK, RecordingSession, make_store
from .server import GCSServer


def test_anonymous_sends_no_credentials(gcs_server: GCSServer, gcs_root: str) -> None:
    session = RecordingSession()
    store = make_store(gcs_server.endpoint, session=session)
    store.write_bytes(join(gcs_root, "a"), b"x")
    assert store.read_bytes(join(gcs_root, "a")) == b"x"
    assert session.sent_headers and all("Authorization" not in h for h in session.sent_headers)


def test_emulator_host_alone_means_anonymous(gcs_server: GCSServer, gcs_root: str) -> None:
    """With only STORAGE_EMULATOR_HOST set (the session fixture sets it), no credential is looked for."""
    from google.auth.credentials import AnonymousCredentials

    store = GCSStore()
    assert store.config.anonymous and store.config.endpoint_url == gcs_server.endpoint
    assert isinstance(store.client.storage._credentials, AnonymousCredentials)
    assert store.stat(join(gcs_root, "absent")) is None


def test_given_credentials_are_sent_and_never_appear_in_messages_or_repr(gcs_server: GCSServer) -> None:
    from google.oauth2.credentials import Credentials

    secret = "ya29.a0-very-secret-token-value"
    creds = Credentials(token=secret)
    session = RecordingSession(credentials=creds)
    store = make_store(gcs_server.endpoint, anonymous=False, credentials=creds, session=session)
    assert secret not in repr(store) and secret not in repr(store.config)
    uri = "gs://fcp-no-such-bucket/ckpt"
    for call in (lambda: store.stat(uri), lambda: store.write_bytes(uri, os.urandom(2 * CHUNK))):
        with pytest.raises(ContainerNotFoundError) as info:
            call()
        assert secret not in str(info.value) and secret not in repr(info.value)
    assert any(h.get("Authorization") == f"Bearer {secret}" for h in session.sent_headers), (
        "the token was really sent, so its absence from the messages means something"
    )


def test_no_credentials_is_a_permission_error_with_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for var in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))  # no gcloud application-default login
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # not on Google Cloud: skip the metadata server
    store = GCSStore(endpoint_url="http://127.0.0.1:9")
    with pytest.raises(CheckpointPermissionError) as info:
        store.stat("gs://bucket/ckpt")
    message = str(info.value)
    assert "no Google Cloud credentials" in message and "gs://bucket/ckpt" in message
    assert "GOOGLE_APPLICATION_CREDENTIALS" in message and "STORAGE_EMULATOR_HOST" in message


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
def test_gcs_secrets_are_scrubbed(text: str, secret: str) -> None:
    import flyte_checkpoint_gcs.errors  # noqa: F401 - registers GCS's patterns

    assert secret not in scrub(text) and "<redacted>" in scrub(text)


def test_a_cause_that_held_a_secret_is_not_chained() -> None:
    leaky = requests.ConnectionError(
        "HTTPSConnectionPool(host='storage.googleapis.com'): Max retries exceeded with url: "
        "/upload/storage/v1/b/bucket/o?uploadType=resumable&upload_id=ADPycdSECRETSESSION"
    )
    err = map_error(leaky, "gs://bucket/ckpt", "write", config=None)
    assert isinstance(err, TransientError)
    assert "ADPycdSECRETSESSION" not in str(err)
    assert err.__cause__ is None and err.__suppress_context__
