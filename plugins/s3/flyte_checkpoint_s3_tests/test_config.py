"""Configuration: the settings, their variables and precedence, the README's table, what the client gets."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from flyte_checkpoint_s3.config import S3Config
from flyte_checkpoint_s3.store import S3Store

from flyte_checkpoint.errors import ConfigurationError
from flyte_checkpoint.storage.kit import MiB
from flyte_checkpoint.storage.kit.settings import markdown_table

from .helpers import ACCESS_KEY, ENDPOINT_VARS, SECRET_KEY, round_trip

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_settings_table_is_the_configs() -> None:
    text = README.read_text()
    section = text.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    table = "\n".join(line for line in section.splitlines() if line.startswith("|"))
    assert table == markdown_table(S3Config.settings_table())


def test_defaults_are_for_real_s3() -> None:
    cfg = S3Config.resolve(env={})
    assert cfg.endpoint_url is None and not cfg.anonymous
    assert (cfg.part_size, cfg.max_concurrency) == (8 * MiB, 8)
    assert (cfg.read_range_size, cfg.read_concurrency) == (8 * MiB, 8)
    assert (cfg.checksum, cfg.checksum_type) == ("CRC32", "FULL_OBJECT") and cfg.verify_checksums
    assert (cfg.connect_timeout, cfg.read_timeout, cfg.request_attempts) == (10.0, 60.0, 3)
    assert cfg.max_connections == 2 * (8 + 8)
    assert (cfg.region, cfg.profile, cfg.access_key_id, cfg.addressing_style) == (None, None, None, None)


@pytest.mark.parametrize(
    ("env", "kwargs", "expected", "source"),
    [
        ({"AWS_ENDPOINT_URL": "http://a"}, {}, "http://a", "AWS_ENDPOINT_URL"),
        (
            {"AWS_ENDPOINT_URL": "http://a", "AWS_ENDPOINT_URL_S3": "http://b"},
            {},
            "http://b",
            "AWS_ENDPOINT_URL_S3",
        ),
        (
            {
                "AWS_ENDPOINT_URL": "http://a",
                "AWS_ENDPOINT_URL_S3": "http://b",
                "FLYTE_AWS_ENDPOINT": "http://c",
            },
            {},
            "http://c",
            "FLYTE_AWS_ENDPOINT",
        ),
        (
            {"FLYTE_AWS_ENDPOINT": "http://c", "FLYTE_CHECKPOINT_S3_ENDPOINT_URL": "http://e"},
            {},
            "http://e",
            "FLYTE_CHECKPOINT_S3_ENDPOINT_URL",
        ),
        ({"FLYTE_AWS_ENDPOINT": "http://c"}, {"endpoint_url": "http://d"}, "http://d", "argument"),
        (
            {"AWS_ENDPOINT_URL_S3": "http://b", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"},
            {},
            None,
            "default",
        ),
        (
            {"FLYTE_AWS_ENDPOINT": "http://c", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"},
            {},
            "http://c",
            "FLYTE_AWS_ENDPOINT",
        ),
    ],
)
def test_endpoint_precedence(
    env: dict[str, str], kwargs: dict[str, str], expected: str | None, source: str
) -> None:
    cfg = S3Config.resolve(env=env, **kwargs)
    assert cfg.endpoint_url == expected
    assert cfg.sources["endpoint_url"] == source


def test_addressing_style_precedence() -> None:
    assert S3Config.resolve(env={}).addressing_style is None
    assert S3Config.resolve(env={"FLYTE_AWS_S3_ADDRESSING_STYLE": "Path"}).addressing_style == "path"
    env = {"FLYTE_AWS_S3_ADDRESSING_STYLE": "path"}
    assert S3Config.resolve(env=env, addressing_style="virtual").addressing_style == "virtual"
    with pytest.raises(ConfigurationError, match="FLYTE_AWS_S3_ADDRESSING_STYLE='sideways' is not one of"):
        S3Config.resolve(env={"FLYTE_AWS_S3_ADDRESSING_STYLE": "sideways"})


def test_settings_from_their_variables_and_arguments() -> None:
    env = {
        "FLYTE_CHECKPOINT_S3_PART_SIZE": "16MiB",
        "FLYTE_CHECKPOINT_S3_MAX_CONCURRENCY": "4",
        "FLYTE_CHECKPOINT_S3_READ_RANGE_SIZE": "512KiB",
        "FLYTE_CHECKPOINT_S3_READ_CONCURRENCY": "2",
        "FLYTE_CHECKPOINT_S3_CHECKSUM": "none",
        "FLYTE_CHECKPOINT_S3_CHECKSUM_TYPE": "composite",
        "FLYTE_CHECKPOINT_S3_VERIFY_CHECKSUMS": "no",
        "FLYTE_CHECKPOINT_S3_CONNECT_TIMEOUT": "2.5",
        "FLYTE_CHECKPOINT_S3_READ_TIMEOUT": "30s",
        "FLYTE_CHECKPOINT_S3_REQUEST_ATTEMPTS": "1",
        "FLYTE_CHECKPOINT_S3_ANONYMOUS": "true",
    }
    cfg = S3Config.resolve(env=env)
    assert (cfg.part_size, cfg.max_concurrency, cfg.read_range_size, cfg.read_concurrency) == (
        16 * MiB,
        4,
        512 * 1024,
        2,
    )
    assert (cfg.checksum, cfg.checksum_type, cfg.verify_checksums) == ("NONE", "COMPOSITE", False)
    assert (cfg.connect_timeout, cfg.read_timeout, cfg.request_attempts) == (2.5, 30.0, 1)
    assert cfg.anonymous and cfg.max_connections == 2 * (4 + 2)
    assert S3Config.resolve(env=env, part_size=5 * MiB).part_size == 5 * MiB


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"FLYTE_CHECKPOINT_S3_PART_SIZE": "big"}, "FLYTE_CHECKPOINT_S3_PART_SIZE='big' is not a size"),
        ({"FLYTE_CHECKPOINT_S3_PART_SIZE": "6GiB"}, "is above the maximum: give at most 5GiB"),
        (
            {"FLYTE_CHECKPOINT_S3_READ_CONCURRENCY": "x"},
            "FLYTE_CHECKPOINT_S3_READ_CONCURRENCY='x' is not a whole",
        ),
        ({"FLYTE_CHECKPOINT_S3_VERIFY_CHECKSUMS": "maybe"}, "is not a flag"),
        ({"FLYTE_CHECKPOINT_S3_MAX_CONCURRENCY": "0"}, "is below the minimum: give at least 1"),
        ({"FLYTE_CHECKPOINT_S3_CHECKSUM": "md5"}, "FLYTE_CHECKPOINT_S3_CHECKSUM='md5' is not one of CRC32"),
        ({"FLYTE_CHECKPOINT_S3_CHECKSUM_TYPE": "whole"}, "is not one of FULL_OBJECT, COMPOSITE"),
        (
            {"FLYTE_CHECKPOINT_S3_CHECKSUM": "crc64nvme", "FLYTE_CHECKPOINT_S3_CHECKSUM_TYPE": "composite"},
            "CRC64NVME is stored as FULL_OBJECT only: set checksum_type=FULL_OBJECT",
        ),
        ({"FLYTE_AWS_ENDPOINT": "minio:9000"}, "FLYTE_AWS_ENDPOINT='minio:9000' is not a URL"),
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        S3Config.resolve(env=env)


def test_unknown_argument_is_an_error() -> None:
    with pytest.raises(ConfigurationError, match=r"no setting 'part_sise' .*did you mean 'part_size'"):
        S3Store(part_sise=1)


def test_client_gets_timeouts_retries_pool_and_style(s3_env: dict[str, str]) -> None:
    store = S3Store(
        connect_timeout=3, read_timeout=7, request_attempts=2, addressing_style="path", max_connections=5
    )
    try:
        cfg = store.client.get().meta.config
        assert (cfg.connect_timeout, cfg.read_timeout) == (3, 7)
        assert cfg.retries == {"mode": "standard", "total_max_attempts": 2}
        assert cfg.s3 == {"addressing_style": "path"}
        assert cfg.max_pool_connections == 5 == store.max_pooled_connections
    finally:
        store.close()


def test_one_pool_per_store_named_for_s3(make_s3_store: Any, s3_root: str) -> None:
    import threading

    store = make_s3_store(part_size=64 * 1024, max_concurrency=2, read_concurrency=1)
    names: set[str] = set()
    for _ in range(3):
        names.add(store.pool.submit(lambda: threading.current_thread().name).result())
    assert store.pool.workers == 3
    assert names and all(re.fullmatch(r"flyte-checkpoint-s3-\d+", n) for n in names)


# -- each variable really reaches the server ---------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("variable", ENDPOINT_VARS)
def test_endpoint_from_each_variable(bare_env: str, monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    monkeypatch.setenv(variable, bare_env)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    store = S3Store()
    try:
        assert store.config.sources["endpoint_url"] == variable
        round_trip(store)
    finally:
        store.close()


@pytest.mark.integration
def test_configure_store_per_prefix_reaches_the_store(s3_env: dict[str, str], raw_s3: Any) -> None:
    """The two-endpoint case: settings for one bucket prefix, checked at the call, reach its store only."""
    import flyte_checkpoint as fc
    from flyte_checkpoint.storage.registry import store_for

    with pytest.raises(ConfigurationError, match="part_size"):
        fc.configure_store("s3://fcp-tests/", part_size="8 megs")
    fc.configure_store("s3://fcp-tests/", part_size="128KiB", read_range_size="1MiB")
    try:
        store = store_for("s3://fcp-tests/k")
        assert (store.config.part_size, store.config.read_range_size) == (128 * 1024, MiB)
        assert store_for("s3://other-bucket/k").config.part_size == 256 * 1024  # the environment's
        round_trip(store)
    finally:
        fc.configure_store("s3://fcp-tests/")
