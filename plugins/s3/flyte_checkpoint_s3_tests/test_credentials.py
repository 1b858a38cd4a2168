"""Credentials and region: the AWS and Flyte variables, honoured as the AWS SDKs and Flyte honour them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flyte_checkpoint_s3.config import S3Config
from flyte_checkpoint_s3.store import S3Store

from flyte_checkpoint.errors import CheckpointPermissionError, ConfigurationError

from .helpers import ACCESS_KEY, BUCKET, SECRET_KEY, key_of, round_trip


def test_credentials_precedence() -> None:
    flyte = {"FLYTE_AWS_ACCESS_KEY_ID": "fk", "FLYTE_AWS_SECRET_ACCESS_KEY": "fs", "AWS_ACCESS_KEY_ID": "ak"}
    cfg = S3Config.resolve(env=flyte)
    assert (cfg.access_key_id, cfg.secret_access_key) == ("fk", "fs")
    assert cfg.sources["access_key_id"] == "FLYTE_AWS_ACCESS_KEY_ID"
    cfg = S3Config.resolve(env=flyte, access_key_id="k", secret_access_key="s")
    assert (cfg.access_key_id, cfg.secret_access_key) == ("k", "s")
    cfg = S3Config.resolve(env=flyte, profile="dev")  # a profile argument wins over FLYTE_AWS_* keys
    assert cfg.access_key_id is None and cfg.secret_access_key is None and cfg.profile == "dev"
    cfg = S3Config.resolve(env=flyte, profile="dev", access_key_id="k", secret_access_key="s")
    assert (cfg.access_key_id, cfg.profile) == ("k", "dev")  # keys given as arguments win
    assert S3Config.resolve(env={"AWS_ACCESS_KEY_ID": "ak"}).access_key_id is None  # left to boto3's chain


def test_half_of_a_key_pair_is_an_error_naming_its_source() -> None:
    with pytest.raises(
        ConfigurationError,
        match=r"access_key_id is set \(FLYTE_AWS_ACCESS_KEY_ID\) but secret_access_key is not",
    ):
        S3Config.resolve(env={"FLYTE_AWS_ACCESS_KEY_ID": "fk"})


def test_secrets_stay_out_of_repr() -> None:
    cfg = S3Config.resolve(
        env={}, access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY, session_token="tok-1234"
    )
    assert ACCESS_KEY not in repr(cfg) and SECRET_KEY not in repr(cfg) and "tok-1234" not in repr(cfg)
    assert set(cfg.secrets()) == {ACCESS_KEY, SECRET_KEY, "tok-1234"}


@pytest.mark.parametrize(
    ("env", "region"),
    [
        ({"AWS_REGION": "eu-west-3"}, "eu-west-3"),
        ({"AWS_DEFAULT_REGION": "ap-south-1"}, "ap-south-1"),
        ({"AWS_REGION": "eu-west-3", "AWS_DEFAULT_REGION": "ap-south-1"}, "eu-west-3"),
        ({"AWS_REGION": "eu-west-3", "FLYTE_CHECKPOINT_S3_REGION": "ca-central-1"}, "ca-central-1"),
        ({}, "us-east-1"),
    ],
)
def test_region_aws_region_first_then_aws_default_region(
    s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, env: dict[str, str], region: str
) -> None:
    """boto3 reads only AWS_DEFAULT_REGION; Flyte and the other AWS SDKs read AWS_REGION first."""
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "FLYTE_CHECKPOINT_S3_REGION"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    store = S3Store()
    try:
        assert store.client.get().meta.region_name == region
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
        assert store.config.sources["access_key_id"] == "FLYTE_AWS_ACCESS_KEY_ID"
        assert store.client.get()._request_signer._credentials.access_key == ACCESS_KEY
        assert store.client.get().meta.config.s3 == {"addressing_style": "path"}
        round_trip(store)
    finally:
        store.close()


@pytest.mark.integration
def test_profile_from_aws_config_file(bare_env: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
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
        assert store.client.get().meta.region_name == "eu-west-1"
        round_trip(store)
    finally:
        store.close()


def _signed(store: S3Store) -> list[bool]:
    """Records, per request the store sends, whether it carries an Authorization header."""
    seen: list[bool] = []
    store.client.get().meta.events.register(
        "before-send.s3", lambda request, **_: seen.append("Authorization" in request.headers)
    )
    return seen


@pytest.mark.integration
def test_anonymous_reads_a_public_object_unsigned(
    bare_env: str, raw_s3: Any, monkeypatch: pytest.MonkeyPatch, s3_root: str
) -> None:
    """With no credentials anywhere, a signed store cannot start; an anonymous one reads a public
    object with unsigned requests."""
    uri = f"{s3_root}/public"
    raw_s3.put_object(Bucket=BUCKET, Key=key_of(uri), Body=b"for all", ACL="public-read")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", bare_env)
    store = S3Store()
    try:
        with pytest.raises(CheckpointPermissionError, match=r"no usable AWS credentials.*ANONYMOUS=true"):
            store.stat(uri)
    finally:
        store.close()
    monkeypatch.setenv("FLYTE_CHECKPOINT_S3_ANONYMOUS", "true")
    store = S3Store()
    try:
        signed = _signed(store)
        assert store.stat(uri) == 7 and store.read_bytes(uri) == b"for all"
        assert signed and not any(signed)
    finally:
        store.close()


@pytest.mark.integration
def test_anonymous_wins_over_keys(make_s3_store: Any, raw_s3: Any, s3_root: str) -> None:
    uri = f"{s3_root}/public"
    raw_s3.put_object(Bucket=BUCKET, Key=key_of(uri), Body=b"for all", ACL="public-read")
    store = make_s3_store(access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY, anonymous=True)
    signed = _signed(store)
    assert store.read_bytes(uri) == b"for all"
    assert signed and not any(signed)
    keyed = make_s3_store(access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY)
    signed = _signed(keyed)
    assert keyed.read_bytes(uri) == b"for all"
    assert signed and all(signed)
