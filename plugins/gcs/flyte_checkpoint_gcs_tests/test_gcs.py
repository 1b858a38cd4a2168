"""GCS-specific behaviour: the gcs:// alias, unicode names, missing buckets, credentials."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from flyte_checkpoint_gcs.store import GcsStore

from flyte_checkpoint.errors import (
    CheckpointPermissionError,
    ContainerNotFoundError,
    InvalidURIError,
    NotFoundError,
    TransientError,
)
from flyte_checkpoint.storage.registry import get_registry
from flyte_checkpoint.uri import join

from .conftest import BUCKET, CHUNK
from .server import GcsEmulator
from .spy import RecordingSession


def checkpoint(dest: str, src: str | None = None):
    from flyte_checkpoint.checkpoint import Checkpoint

    return Checkpoint(dest, src)


@pytest.fixture
def store(gcs_emulator: GcsEmulator) -> Iterator[GcsStore]:
    s = GcsStore(endpoint=gcs_emulator.endpoint, anonymous=True, chunk_size=CHUNK, retry_timeout=0)
    yield s
    s.close()


def test_gcs_alias_resolves_to_the_same_backend_and_round_trips(gcs_emulator: GcsEmulator) -> None:
    registry = get_registry()
    assert registry.backend_for("gcs://b/k").name == registry.backend_for("gs://b/k").name == "gcs"
    name = uuid.uuid4().hex
    alias, canonical = f"gcs://{BUCKET}/{name}", f"gs://{BUCKET}/{name}"
    with checkpoint(join(alias, "ckpt")) as cp:
        cp.save_sync(b"through the alias")
    store = registry.store_for(alias)
    assert list(store.list(alias)) == [join(alias, "ckpt")]
    assert list(store.list(canonical)) == [join(canonical, "ckpt")]
    with checkpoint(join(canonical, "next"), join(canonical, "ckpt")) as cp:
        assert cp.load_sync().read_bytes() == b"through the alias"


@pytest.mark.parametrize(
    "name",
    ["été/données 文字.bin", "with space/and+plus", "odd?chars#and%25percent", "emoji/🚀/ckpt"],
)
def test_unicode_and_reserved_characters_in_names(store: GcsStore, gcs_root: str, name: str) -> None:
    uri = join(gcs_root, name)
    data = os.urandom(2 * CHUNK + 11)  # a chunked upload and ranged reads
    store.write_bytes(uri, data)
    assert store.stat(uri) == len(data)
    assert store.read_bytes(uri) == data
    assert store.read_range(uri, CHUNK, 5) == data[CHUNK : CHUNK + 5]
    assert list(store.list(gcs_root)) == [uri]
    store.delete(uri)
    assert store.stat(uri) is None


def test_missing_bucket_is_an_error_that_says_so(store: GcsStore) -> None:
    uri = "gs://no-such-bucket-fcp/run/ckpt"
    calls = [
        lambda: store.stat(uri),
        lambda: store.open_read(uri),
        lambda: store.write_bytes(uri, b"small"),
        lambda: store.write_bytes(uri, os.urandom(2 * CHUNK)),
        lambda: list(store.list("gs://no-such-bucket-fcp/run")),
        lambda: store.delete(uri),
        lambda: store.read_range(uri, 0, 10),
    ]
    for call in calls:
        with pytest.raises(ContainerNotFoundError) as info:
            call()
        message = str(info.value)
        assert "bucket 'no-such-bucket-fcp'" in message and "does not exist" in message
        assert "gs://no-such-bucket-fcp/run" in message
        assert "gcloud storage buckets create gs://no-such-bucket-fcp" in message


def test_missing_bucket_fails_a_load_instead_of_looking_like_no_checkpoint(gcs_emulator: GcsEmulator) -> None:
    with (
        checkpoint(f"gs://{BUCKET}/x/dest", "gs://no-such-bucket-fcp/prev") as cp,
        pytest.raises(ContainerNotFoundError, match="does not exist"),
    ):
        cp.load_sync()


def test_missing_object_is_not_found(store: GcsStore, gcs_root: str) -> None:
    uri = join(gcs_root, "absent")
    with pytest.raises(NotFoundError) as info:
        store.open_read(uri)
    assert not isinstance(info.value, ContainerNotFoundError)
    assert uri in str(info.value)
    store.delete(uri)  # no error


def test_uri_without_object_name_is_refused(store: GcsStore) -> None:
    with pytest.raises(InvalidURIError, match="names a bucket but no object"):
        store.open_write("gs://bucket")
    with pytest.raises(InvalidURIError, match="names no bucket"):
        store.stat("gs:///name")


def test_credentials_never_appear_in_messages_or_repr(gcs_emulator: GcsEmulator) -> None:
    from google.oauth2.credentials import Credentials

    secret = "ya29.a0-very-secret-token-value"
    creds = Credentials(token=secret)
    session = RecordingSession(credentials=creds)
    store = GcsStore(endpoint=gcs_emulator.endpoint, credentials=creds, session=session, chunk_size=CHUNK)
    assert secret not in repr(store) and secret not in repr(store.config)
    uri = "gs://no-such-bucket-fcp/ckpt"
    for call in (lambda: store.stat(uri), lambda: store.write_bytes(uri, os.urandom(2 * CHUNK))):
        with pytest.raises(ContainerNotFoundError) as info:
            call()
        assert secret not in str(info.value) and secret not in repr(info.value)
    assert any(h.get("Authorization") == f"Bearer {secret}" for h in session.sent_headers), (
        "the token was really sent, so its absence from the messages means something"
    )


def test_connection_failure_is_transient_and_names_the_uri_only(gcs_root: str) -> None:
    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = GcsStore(endpoint=f"http://127.0.0.1:{port}", anonymous=True, retry_timeout=0)
    with pytest.raises(TransientError) as info:
        store.stat("gs://bucket/run/ckpt")
    assert "gs://bucket/run/ckpt" in str(info.value) and "worth retrying" in str(info.value)


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
        store = GcsStore(
            endpoint=f"http://127.0.0.1:{port}", anonymous=True, read_timeout=0.5, retry_timeout=0
        )
        with pytest.raises(TransientError, match="worth retrying"):
            store.stat("gs://bucket/stalled")
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()


def test_no_credentials_is_a_permission_error_with_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for var in (
        "STORAGE_EMULATOR_HOST",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "FLYTE_CHECKPOINT_GCS_ENDPOINT",
        "FLYTE_CHECKPOINT_GCS_ANONYMOUS",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))  # no gcloud application-default login
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # not on Google Cloud: skip the metadata server
    store = GcsStore()
    with pytest.raises(CheckpointPermissionError) as info:
        store.stat("gs://bucket/ckpt")
    message = str(info.value)
    assert "no Google Cloud credentials" in message and "gs://bucket/ckpt" in message
    assert "GOOGLE_APPLICATION_CREDENTIALS" in message and "STORAGE_EMULATOR_HOST" in message


def test_importing_the_plugin_does_not_import_the_sdk() -> None:
    code = (
        "import sys, flyte_checkpoint_gcs, flyte_checkpoint_gcs.plugin\n"
        "from flyte_checkpoint.storage.registry import get_registry\n"
        "backend = get_registry().backend_for('gs://bucket/key')\n"
        "assert backend.name == 'gcs', backend\n"
        "sdk = sorted(m for m in sys.modules if m.startswith(('google', 'requests', 'urllib3')))\n"
        "assert not sdk, sdk\n"
        "print('clean')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "clean"


def test_concurrent_readers_and_writers_share_one_store(store: GcsStore, gcs_root: str) -> None:
    payloads = {join(gcs_root, f"obj-{i}"): os.urandom(CHUNK + i * 1000) for i in range(6)}
    errors: list[BaseException] = []

    def work(uri: str, data: bytes) -> None:
        try:
            store.write_bytes(uri, data)
            assert store.read_bytes(uri) == data
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=item) for item in payloads.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert list(store.list(gcs_root)) == sorted(payloads)
