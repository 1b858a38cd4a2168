"""Errors: SDK exceptions onto the fault table (built directly), and the emulator's answers."""

from __future__ import annotations

import os
import socket
import threading

import pytest
import requests
from flyte_checkpoint_gcs.errors import is_transient, map_error
from flyte_checkpoint_gcs.store import GCSStore
from google.api_core import exceptions as api
from google.auth import exceptions as auth
from google.resumable_media import DataCorruption, InvalidResponse

from flyte_checkpoint.checkpoint import Checkpoint
from flyte_checkpoint.errors import (
    CheckpointPermissionError,
    ContainerNotFoundError,
    CorruptCheckpointError,
    NotFoundError,
    ObjectReplacedError,
    StoreError,
    TransientError,
)
from flyte_checkpoint.uri import join

from .helpers import BUCKET, CHUNK, make_store
from .server import GCSServer

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
        (api.PreconditionFailed("generation mismatch"), ObjectReplacedError),
        (api.BadRequest('Provided CRC32C "AA==" doesn\'t match calculated CRC32C "BB==".'), TransientError),
        (api.BadRequest("Invalid bucket name"), StoreError),
        (api.MethodNotImplemented("no"), StoreError),
        (InvalidResponse(response(503), "Request failed"), TransientError),
        (InvalidResponse(response(429), "Request failed"), TransientError),
        (InvalidResponse(response(410), "session gone"), StoreError),
        (InvalidResponse(response(403), "Request failed"), CheckpointPermissionError),
        (InvalidResponse(response(400, b'{"error": {"message": "bad name"}}'), "x"), StoreError),
        (DataCorruption(response(200), "Checksum mismatch"), CorruptCheckpointError),
        (requests.ConnectionError("connection reset"), TransientError),
        (requests.ReadTimeout("read timed out"), TransientError),
        (requests.exceptions.ChunkedEncodingError("ended early"), TransientError),
        (auth.TransportError("metadata server unreachable"), TransientError),
        (auth.RefreshError("invalid_grant: account disabled"), CheckpointPermissionError),
        (auth.DefaultCredentialsError("no ADC"), CheckpointPermissionError),
        (ValueError("something else"), StoreError),
    ],
)
def test_sdk_errors_map_onto_the_fault_table(exc: BaseException, kind: type) -> None:
    err = map_error(exc, URI, "read", config=None)
    assert type(err) is kind, err
    assert URI in str(err)
    # what the SDK may retry within one request is what the core would retry, except what a new
    # request cannot fix: refreshed credentials, damage, a replaced object (the core reopens it)
    if not isinstance(exc, (auth.RefreshError, DataCorruption, api.PreconditionFailed)) and (
        "crc32c" not in str(exc).lower()
    ):
        assert is_transient(exc) == (kind is TransientError), exc


def test_messages_say_what_to_do() -> None:
    assert "check that the credentials" in str(map_error(api.Forbidden("denied"), URI, "read", config=None))
    assert "is retried" in str(map_error(api.ServiceUnavailable("x"), URI, "read", config=None))
    damaged = map_error(api.BadRequest("Provided MD5 hash doesn't match"), URI, "write", config=None)
    assert "arrived damaged" in str(damaged) and "nothing was stored" in str(damaged)
    no_adc = str(map_error(auth.DefaultCredentialsError("x"), URI, "read", config=None))
    assert "GOOGLE_APPLICATION_CREDENTIALS" in no_adc and "STORAGE_EMULATOR_HOST" in no_adc


def test_server_message_is_quoted() -> None:
    body = b'{"error": {"message": "Invalid object name"}}'
    err = map_error(InvalidResponse(response(400, body), "x"), URI, "read", config=None)
    assert "HTTP 400: Invalid object name" in str(err)


def test_a_harmless_cause_is_chained() -> None:
    cause = api.ServiceUnavailable("backend")
    assert map_error(cause, URI, "read", config=None).__cause__ is cause


def test_missing_container_is_an_error_from_every_operation(store: GCSStore) -> None:
    uri = "gs://fcp-no-such-bucket/run/ckpt"
    calls = [
        lambda: store.stat(uri),
        lambda: store.open_read(uri),
        lambda: store.write_bytes(uri, b"small"),
        lambda: store.write_bytes(uri, os.urandom(2 * CHUNK)),
        lambda: list(store.list("gs://fcp-no-such-bucket/run")),
        lambda: store.delete(uri),
        lambda: store.read_range(uri, 0, 10),
    ]
    for call in calls:
        with pytest.raises(ContainerNotFoundError) as info:
            call()
        message = str(info.value)
        assert "bucket 'fcp-no-such-bucket'" in message and "does not exist" in message
        assert "gs://fcp-no-such-bucket/run" in message
        assert "gcloud storage buckets create gs://fcp-no-such-bucket" in message


def test_missing_container_fails_a_load_instead_of_looking_like_no_checkpoint(gcs_server: GCSServer) -> None:
    with (
        Checkpoint(f"gs://{BUCKET}/x/dest", "gs://fcp-no-such-bucket/prev") as cp,
        pytest.raises(ContainerNotFoundError, match="does not exist"),
    ):
        cp.load_sync()


def test_missing_object_is_not_found(store: GCSStore, gcs_root: str) -> None:
    uri = join(gcs_root, "absent")
    for call in (lambda: store.open_read(uri), lambda: store.read_range(uri, 0, 5)):
        with pytest.raises(NotFoundError) as info:
            call()
        assert not isinstance(info.value, ContainerNotFoundError)
        assert uri in str(info.value)
    assert store.stat(uri) is None
    store.delete(uri)  # no error


def test_refused_connection_is_transient_and_names_the_uri(gcs_server: GCSServer) -> None:
    with socket.socket() as s:  # bound, never listening: refused, and no other server takes the port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        store = make_store(f"http://127.0.0.1:{port}")
        with pytest.raises(TransientError) as info:
            store.stat("gs://bucket/run/ckpt")
    assert "gs://bucket/run/ckpt" in str(info.value) and "is retried" in str(info.value)


def test_a_stalled_server_times_out_instead_of_hanging() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept_and_say_nothing() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept_and_say_nothing, daemon=True)
    thread.start()
    try:
        port = listener.getsockname()[1]
        store = make_store(f"http://127.0.0.1:{port}", read_timeout="500ms")
        with pytest.raises(TransientError, match="is retried"):
            store.stat("gs://bucket/stalled")
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()
