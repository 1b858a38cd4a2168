"""Configuration: the variables users already have, constructor arguments, and their precedence."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from flyte_checkpoint_s3.config import MiB, S3Config, parse_size
from flyte_checkpoint_s3.store import S3Store

from .helpers import ACCESS_KEY, BUCKET, SECRET_KEY

ENDPOINT_VARS = ("FLYTE_AWS_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def test_defaults_are_for_real_s3() -> None:
    cfg = S3Config.from_env({})
    assert cfg.endpoint_url is None
    assert (cfg.part_size, cfg.upload_concurrency) == (8 * MiB, 8)
    assert (cfg.range_size, cfg.read_concurrency) == (8 * MiB, 8)
    assert (cfg.checksum, cfg.checksum_type) == ("CRC32", "FULL_OBJECT") and cfg.verify_checksums
    assert (cfg.connect_timeout, cfg.read_timeout, cfg.max_attempts) == (10.0, 60.0, 3)
    assert cfg.sources["credentials"] == "boto3 default chain"


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
            {"FLYTE_AWS_ENDPOINT": "http://c"},
            {"endpoint_url": "http://d"},
            "http://d",
            "endpoint_url argument",
        ),
        ({"AWS_ENDPOINT_URL_S3": "http://b", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"}, {}, None, None),
    ],
)
def test_endpoint_precedence(
    env: dict[str, str], kwargs: dict[str, str], expected: str | None, source: str | None
) -> None:
    cfg = S3Config.from_env(env, **kwargs)
    assert cfg.endpoint_url == expected
    assert cfg.sources.get("endpoint") == source


def test_credentials_precedence() -> None:
    flyte = {"FLYTE_AWS_ACCESS_KEY_ID": "fk", "FLYTE_AWS_SECRET_ACCESS_KEY": "fs", "AWS_ACCESS_KEY_ID": "ak"}
    cfg = S3Config.from_env(flyte)
    assert (cfg.access_key_id, cfg.secret_access_key) == ("fk", "fs")
    cfg = S3Config.from_env(flyte, access_key_id="k", secret_access_key="s")
    assert (cfg.access_key_id, cfg.secret_access_key) == ("k", "s")
    cfg = S3Config.from_env(flyte, profile="dev")
    assert cfg.access_key_id is None and cfg.profile == "dev"
    assert S3Config.from_env({"AWS_ACCESS_KEY_ID": "ak"}).access_key_id is None  # left to boto3's chain


def test_half_of_the_flyte_key_pair_is_an_error() -> None:
    with pytest.raises(ValueError, match="FLYTE_AWS_SECRET_ACCESS_KEY is not set but its partner is"):
        S3Config.from_env({"FLYTE_AWS_ACCESS_KEY_ID": "fk"})


def test_addressing_style_precedence() -> None:
    assert S3Config.from_env({}).addressing_style is None
    assert S3Config.from_env({"FLYTE_AWS_S3_ADDRESSING_STYLE": "Path"}).addressing_style == "path"
    env = {"FLYTE_AWS_S3_ADDRESSING_STYLE": "path"}
    assert S3Config.from_env(env, addressing_style="virtual").addressing_style == "virtual"
    with pytest.raises(ValueError, match="addressing_style='sideways'"):
        S3Config.from_env({"FLYTE_AWS_S3_ADDRESSING_STYLE": "sideways"})


def test_tuning_knobs_from_env_and_arguments() -> None:
    env = {
        "FLYTE_CHECKPOINT_S3_PART_SIZE": "16MiB",
        "FLYTE_CHECKPOINT_S3_UPLOAD_CONCURRENCY": "4",
        "FLYTE_CHECKPOINT_S3_RANGE_SIZE": "512KiB",
        "FLYTE_CHECKPOINT_S3_READ_CONCURRENCY": "2",
        "FLYTE_CHECKPOINT_S3_CHECKSUM": "none",
        "FLYTE_CHECKPOINT_S3_CHECKSUM_TYPE": "composite",
        "FLYTE_CHECKPOINT_S3_VERIFY_CHECKSUMS": "no",
        "FLYTE_CHECKPOINT_S3_CONNECT_TIMEOUT": "2.5",
        "FLYTE_CHECKPOINT_S3_READ_TIMEOUT": "30",
        "FLYTE_CHECKPOINT_S3_MAX_ATTEMPTS": "1",
    }
    cfg = S3Config.from_env(env)
    assert (cfg.part_size, cfg.upload_concurrency, cfg.range_size, cfg.read_concurrency) == (
        16 * MiB,
        4,
        512 * 1024,
        2,
    )
    assert (cfg.checksum, cfg.checksum_type, cfg.verify_checksums) == ("NONE", "COMPOSITE", False)
    assert (cfg.connect_timeout, cfg.read_timeout, cfg.max_attempts) == (2.5, 30.0, 1)
    assert S3Config.from_env(env, part_size=5 * MiB).part_size == 5 * MiB


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"FLYTE_CHECKPOINT_S3_PART_SIZE": "big"}, "FLYTE_CHECKPOINT_S3_PART_SIZE='big' is not a size"),
        (
            {"FLYTE_CHECKPOINT_S3_READ_CONCURRENCY": "x"},
            "FLYTE_CHECKPOINT_S3_READ_CONCURRENCY='x' is not a number",
        ),
        ({"FLYTE_CHECKPOINT_S3_VERIFY_CHECKSUMS": "maybe"}, "is not a boolean"),
        ({"FLYTE_CHECKPOINT_S3_UPLOAD_CONCURRENCY": "0"}, "must be at least 1"),
        ({"FLYTE_CHECKPOINT_S3_CHECKSUM": "md5"}, "checksum='md5': choose one of CRC32"),
        (
            {"FLYTE_CHECKPOINT_S3_CHECKSUM_TYPE": "whole"},
            "checksum_type='whole': choose one of FULL_OBJECT, COMPOSITE",
        ),
        (
            {"FLYTE_CHECKPOINT_S3_CHECKSUM": "crc64nvme", "FLYTE_CHECKPOINT_S3_CHECKSUM_TYPE": "composite"},
            "CRC64NVME is stored as FULL_OBJECT only: set checksum_type=FULL_OBJECT",
        ),
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        S3Config.from_env(env)


def test_unknown_argument_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown S3 store setting"):
        S3Store(part_sise=1)


def test_parse_size() -> None:
    assert parse_size("123", "x") == 123
    assert parse_size("8MiB", "x") == parse_size("8M", "x") == parse_size("8 mb", "x") == 8 * MiB
    assert parse_size("1g", "x") == 1024 * MiB


def test_client_gets_timeouts_retries_and_style(s3_env: dict[str, str]) -> None:
    store = S3Store(connect_timeout=3, read_timeout=7, max_attempts=2, addressing_style="path")
    try:
        cfg = store.client.meta.config
        assert (cfg.connect_timeout, cfg.read_timeout) == (3, 7)
        assert cfg.retries == {"mode": "standard", "total_max_attempts": 2}
        assert cfg.s3 == {"addressing_style": "path"}
        assert store.client.meta.region_name == "us-east-1"
    finally:
        store.close()


# -- each variable really reaches the server ---------------------------------------------


def _round_trip(store: S3Store) -> None:
    uri = f"s3://{BUCKET}/{uuid.uuid4().hex}/cfg"
    store.write_bytes(uri, b"configured")
    assert store.read_bytes(uri) == b"configured"


@pytest.fixture
def bare_env(s3_env: dict[str, str], raw_s3: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """No endpoint and no credentials in the environment; returns the server's endpoint."""
    for name in (*ENDPOINT_VARS, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    return s3_env["AWS_ENDPOINT_URL_S3"]


@pytest.mark.integration
@pytest.mark.parametrize("variable", ENDPOINT_VARS)
def test_endpoint_from_each_variable(bare_env: str, monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    monkeypatch.setenv(variable, bare_env)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    store = S3Store()
    try:
        assert store.config.sources["endpoint"] == variable
        _round_trip(store)
    finally:
        store.close()


@pytest.mark.integration
def test_flyte_credentials_and_addressing_style(bare_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLYTE_AWS_ENDPOINT", bare_env)
    monkeypatch.setenv("FLYTE_AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("FLYTE_AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("FLYTE_AWS_S3_ADDRESSING_STYLE", "path")
    store = S3Store()
    try:
        assert store.config.sources["credentials"].startswith("FLYTE_AWS_ACCESS_KEY_ID")
        assert store.client._request_signer._credentials.access_key == ACCESS_KEY
        assert store.client.meta.config.s3 == {"addressing_style": "path"}
        _round_trip(store)
    finally:
        store.close()


@pytest.mark.integration
def test_profile_from_aws_config_file(bare_env: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    config = tmp_path / "config"
    config.write_text(
        "[profile fcp]\n"
        f"aws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"
        f"region = eu-west-1\nendpoint_url = {bare_env}\n"
    )
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_PROFILE", "fcp")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    store = S3Store()
    try:
        assert store.client.meta.region_name == "eu-west-1"
        _round_trip(store)
    finally:
        store.close()
