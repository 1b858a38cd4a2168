"""Settings: constructor arguments, then FLYTE_CHECKPOINT_GCS_*, then the Google variables."""

from __future__ import annotations

import pytest
from flyte_checkpoint_gcs.config import GcsConfig
from flyte_checkpoint_gcs.store import GcsStore


def test_defaults() -> None:
    cfg = GcsConfig.from_env({})
    assert cfg.endpoint is None and not cfg.anonymous and cfg.project is None
    assert cfg.chunk_size == 16 * 1024 * 1024 and cfg.read_concurrency == 6
    assert cfg.timeout == (10.0, 120.0)


def test_emulator_host_means_that_endpoint_and_no_credentials() -> None:
    cfg = GcsConfig.from_env({"STORAGE_EMULATOR_HOST": "localhost:9023"})
    assert cfg.endpoint == "http://localhost:9023" and cfg.anonymous


def test_own_variables_beat_the_google_ones() -> None:
    env = {
        "STORAGE_EMULATOR_HOST": "http://emulator:1",
        "FLYTE_CHECKPOINT_GCS_ENDPOINT": "https://storage.example.com/",
        "GOOGLE_CLOUD_PROJECT": "from-google",
        "FLYTE_CHECKPOINT_GCS_PROJECT": "from-flyte",
        "FLYTE_CHECKPOINT_GCS_CHUNK_SIZE": "8MiB",
        "FLYTE_CHECKPOINT_GCS_READ_TIMEOUT": "30",
    }
    cfg = GcsConfig.from_env(env)
    assert cfg.endpoint == "https://storage.example.com"
    assert not cfg.anonymous, "a custom endpoint is not an emulator: credentials are still sent"
    assert cfg.project == "from-flyte"
    assert cfg.chunk_size == 8 * 1024 * 1024 and cfg.read_timeout == 30.0


def test_project_from_the_environment() -> None:
    assert GcsConfig.from_env({"GCLOUD_PROJECT": "p1"}).project == "p1"


def test_arguments_beat_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLYTE_CHECKPOINT_GCS_CHUNK_SIZE", "8MiB")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "localhost:1")
    store = GcsStore(chunk_size=512 * 1024, endpoint="http://127.0.0.1:2", anonymous=False)
    assert store.config.chunk_size == 512 * 1024
    assert store.config.endpoint == "http://127.0.0.1:2" and not store.config.anonymous


def test_bad_settings_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="multiple of 256 KiB"):
        GcsConfig(chunk_size=1000)
    with pytest.raises(ValueError, match="FLYTE_CHECKPOINT_GCS_CHUNK_SIZE='lots' is not a size"):
        GcsConfig.from_env({"FLYTE_CHECKPOINT_GCS_CHUNK_SIZE": "lots"})
    with pytest.raises(ValueError, match="FLYTE_CHECKPOINT_GCS_ANONYMOUS='maybe' is not a boolean"):
        GcsConfig.from_env({"FLYTE_CHECKPOINT_GCS_ANONYMOUS": "maybe"})
    with pytest.raises(ValueError, match="read_concurrency must be at least 1"):
        GcsConfig(read_concurrency=0)
