"""Fixtures: one GCS emulator per session with the bucket ``BUCKET``, and stores pointed at it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from flyte_checkpoint_gcs.store import GCSStore

from flyte_checkpoint.storage.registry import get_registry

from .helpers import BUCKET, CHUNK, RANGE, RecordingSession, make_store
from .server import INSTALL_HINT, GCSServer, ServerStartError, run_server, server_installed

try:
    from conftest import require  # the repository's root conftest
except ImportError:  # pragma: no cover - run outside the repository

    def require(condition: bool, why: str) -> None:
        if not condition:
            if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
                pytest.fail(f"CI=true and {why}: CI must run every test", pytrace=False)
            pytest.skip(why)


STORE_ENV = {
    "FLYTE_CHECKPOINT_GCS_PART_SIZE": str(CHUNK),
    "FLYTE_CHECKPOINT_GCS_READ_RANGE_SIZE": str(RANGE),
    "FLYTE_CHECKPOINT_GCS_READ_CONCURRENCY": "4",
}


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[GCSServer]:
    """A GCS emulator on 127.0.0.1 for the whole session, with the bucket ``BUCKET``; the
    environment points the registry's ``gs://`` store at it (small chunks, see ``STORE_ENV``).

    Not installed: the test skips (a failure with CI=true). Installed but not started: the
    test fails, CI or not, with the emulator's output.
    """
    require(server_installed(), f"gcp-storage-emulator is not installed: {INSTALL_HINT}")
    try:
        with run_server() as server, pytest.MonkeyPatch.context() as mp:
            server.create_bucket(BUCKET)
            mp.setenv("STORAGE_EMULATOR_HOST", server.endpoint)
            for key, value in STORE_ENV.items():
                mp.setenv(key, value)
            get_registry().close()  # stores built before this point do not know the emulator
            try:
                yield server
            finally:
                get_registry().close()
    except ServerStartError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def gcs_root(gcs_server: GCSServer) -> str:
    """A fresh, empty ``gs://`` prefix."""
    return f"gs://{BUCKET}/{uuid.uuid4().hex}"


@pytest.fixture
def session() -> RecordingSession:
    """A real session that records each request the store sends."""
    return RecordingSession()


@pytest.fixture
def store(gcs_server: GCSServer, session: RecordingSession) -> Iterator[GCSStore]:
    """A store on the emulator through ``session``, with one SDK try per request."""
    s = make_store(gcs_server.endpoint, session=session)
    yield s
    s.close()
