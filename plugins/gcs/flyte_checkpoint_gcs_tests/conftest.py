"""Fixtures: one GCS emulator per session, and stores pointed at it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from flyte_checkpoint_gcs.store import GCSStore

from flyte_checkpoint.storage.registry import get_registry

from .helpers import BUCKET, CHUNK, RANGE, RecordingSession, make_store
from .server import EmulatorError, GcsEmulator, emulator_installed

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
def gcs_emulator() -> Iterator[GcsEmulator]:
    """A running emulator with the bucket ``fcp-test``; the environment points the
    registry's ``gs://`` store at it (small chunks, see ``STORE_ENV``).

    Not installed: the test skips (a failure with CI=true). Installed but not started: the
    test fails, CI or not, with the emulator's output.
    """
    require(emulator_installed(), "gcp-storage-emulator is not installed (pip install gcp-storage-emulator)")
    emu = GcsEmulator()
    try:
        emu.start()
    except EmulatorError as exc:
        emu.stop()
        pytest.fail(f"the GCS emulator could not start: {exc}", pytrace=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STORAGE_EMULATOR_HOST", emu.endpoint)
        for key, value in STORE_ENV.items():
            mp.setenv(key, value)
        try:
            emu.create_bucket(BUCKET)
            get_registry().close()  # stores built before this point do not know the emulator
            yield emu
        finally:
            get_registry().close()
            emu.stop()


@pytest.fixture
def gcs_root(gcs_emulator: GcsEmulator) -> str:
    """A fresh, empty ``gs://`` prefix."""
    return f"gs://{BUCKET}/{uuid.uuid4().hex}"


@pytest.fixture
def session() -> RecordingSession:
    """A real session that records each request the store sends."""
    return RecordingSession()


@pytest.fixture
def store(gcs_emulator: GcsEmulator, session: RecordingSession) -> Iterator[GCSStore]:
    """A store on the emulator through ``session``, with one SDK try per request."""
    s = make_store(gcs_emulator.endpoint, session=session)
    yield s
    s.close()
