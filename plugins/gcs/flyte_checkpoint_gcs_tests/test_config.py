"""Settings: arguments, then FLYTE_CHECKPOINT_GCS_*, then Google's variables, then the defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from flyte_checkpoint_gcs.config import GCSConfig
from flyte_checkpoint_gcs.store import GCSStore

from flyte_checkpoint.errors import ConfigurationError
from flyte_checkpoint.storage.kit.settings import markdown_table

MiB = 1024 * 1024
README = Path(__file__).resolve().parents[1] / "README.md"


def test_defaults() -> None:
    cfg = GCSConfig.resolve(env={})
    assert cfg.endpoint_url is None and not cfg.anonymous and cfg.project is None
    assert (cfg.part_size, cfg.max_concurrency) == (16 * MiB, 1)
    assert (cfg.read_range_size, cfg.read_concurrency) == (8 * MiB, 8)
    assert (cfg.checksum, cfg.verify_checksums, cfg.request_attempts) == ("CRC32C", True, 3)
    assert cfg.timeout == (10.0, 60.0)
    assert cfg.max_connections == 2 * (1 + 8)


def test_emulator_host_is_the_endpoint_and_means_anonymous() -> None:
    cfg = GCSConfig.resolve(env={"STORAGE_EMULATOR_HOST": "localhost:9023"})
    assert cfg.endpoint_url == "http://localhost:9023" and cfg.anonymous
    assert cfg.sources["endpoint_url"] == cfg.sources["anonymous"] == "STORAGE_EMULATOR_HOST"
    explicit = GCSConfig.resolve(env={"STORAGE_EMULATOR_HOST": "localhost:9023"}, anonymous=False)
    assert not explicit.anonymous, "an explicit anonymous=false beats the emulator rule"


def test_own_variables_beat_the_google_ones() -> None:
    env = {
        "STORAGE_EMULATOR_HOST": "http://emulator:1",
        "FLYTE_CHECKPOINT_GCS_ENDPOINT_URL": "https://storage.example.com/",
        "GOOGLE_CLOUD_PROJECT": "from-google",
        "FLYTE_CHECKPOINT_GCS_PROJECT": "from-flyte",
        "FLYTE_CHECKPOINT_GCS_PART_SIZE": "8MiB",
        "FLYTE_CHECKPOINT_GCS_READ_TIMEOUT": "30s",
    }
    cfg = GCSConfig.resolve(env=env)
    assert cfg.endpoint_url == "https://storage.example.com"
    assert cfg.project == "from-flyte" and cfg.part_size == 8 * MiB and cfg.read_timeout == 30.0
    assert GCSConfig.resolve(env={"GCLOUD_PROJECT": "p1"}).project == "p1"


def test_arguments_beat_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLYTE_CHECKPOINT_GCS_PART_SIZE", "8MiB")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "localhost:1")
    store = GCSStore(part_size="512KiB", endpoint_url="http://127.0.0.1:2", anonymous=False)
    assert store.config.part_size == store.part_size == 512 * 1024
    assert store.config.endpoint_url == "http://127.0.0.1:2" and not store.config.anonymous


def test_max_concurrency_other_than_one_is_refused_saying_why() -> None:
    with pytest.raises(ConfigurationError, match=r"max_concurrency=4 \(argument\).*at most 1") as info:
        GCSConfig.resolve(env={}, max_concurrency=4)
    assert "takes its chunks in order" in str(info.value)
    with pytest.raises(ConfigurationError, match="FLYTE_CHECKPOINT_GCS_MAX_CONCURRENCY='2'"):
        GCSConfig.resolve(env={"FLYTE_CHECKPOINT_GCS_MAX_CONCURRENCY": "2"})


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"FLYTE_CHECKPOINT_GCS_PART_SIZE": "1000"}, "PART_SIZE='1000' is below the minimum"),
        ({"FLYTE_CHECKPOINT_GCS_PART_SIZE": "300KiB"}, "PART_SIZE='300KiB' is not a multiple of 256KiB"),
        ({"FLYTE_CHECKPOINT_GCS_PART_SIZE": "lots"}, "PART_SIZE='lots' is not a size"),
        ({"FLYTE_CHECKPOINT_GCS_ANONYMOUS": "maybe"}, "ANONYMOUS='maybe' is not a flag"),
        ({"FLYTE_CHECKPOINT_GCS_CHECKSUM": "crc32"}, "CHECKSUM='crc32' is not one of CRC32C, MD5, NONE"),
        ({"FLYTE_CHECKPOINT_GCS_READ_CONCURRENCY": "0"}, "READ_CONCURRENCY='0' is below the minimum"),
        ({"STORAGE_EMULATOR_HOST": "http://"}, "STORAGE_EMULATOR_HOST='http://' is not a URL"),
    ],
)
def test_bad_settings_name_the_variable_and_the_fix(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        GCSConfig.resolve(env=env)


def test_credentials_are_arguments_only_and_never_shown() -> None:
    secret = object()
    cfg = GCSConfig.resolve(env={}, credentials=secret)
    assert cfg.credentials is secret and "<redacted>" in repr(cfg) and repr(secret) not in repr(cfg)
    assert GCSConfig.variable("credentials") is None and GCSConfig.variable("session") is None


def test_readme_settings_table_is_the_configs() -> None:
    text = README.read_text()
    start = text.index("| setting | default | environment, first set wins | meaning |")
    table = text[start:].split("\n\n", 1)[0].strip()
    assert table == markdown_table(GCSConfig.settings_table())


def test_configure_store_reaches_the_gcs_store_per_process_and_per_prefix() -> None:
    """``configure_store`` knows GCSConfig (StoreSpec.config): a prefix gets its own settings,
    the other buckets the per-process ones, and a bad value is refused at the call."""
    from flyte_checkpoint.storage.registry import Registry

    reg = Registry()  # the installed plugins, through their entry points
    try:
        reg.configure("gcs", {"read_timeout": "7s", "anonymous": True})
        reg.configure("gs://special/", {"read_timeout": "9s"})
        special = reg.store_for("gs://special/k")
        other = reg.store_for("gcs://other/k")
        assert isinstance(special, GCSStore) and isinstance(other, GCSStore)
        assert special is not other
        assert special.config.read_timeout == 9 and other.config.read_timeout == 7
        assert special.config.anonymous and special.config.sources["read_timeout"] != "default"
        refused = r"configure_store\('gcs', part_size='8 megs'\) is not a size"
        with pytest.raises(ConfigurationError, match=refused):
            reg.configure("gcs", {"part_size": "8 megs"})
        with pytest.raises(ConfigurationError, match="max_concurrency"):
            reg.configure("gs://special/", {"max_concurrency": 4})
    finally:
        reg.close()
