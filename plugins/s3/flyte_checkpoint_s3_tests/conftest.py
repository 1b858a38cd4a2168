"""Fixtures: one moto S3 server per session with the bucket ``BUCKET``, the environment that
points at it, and stores on it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from .helpers import ACCESS_KEY, BUCKET, ENDPOINT_VARS, SECRET_KEY, SMALL
from .server import INSTALL_HINT, S3Server, ServerStartError, run_server, server_installed

try:  # the repository's root conftest (loaded when pytest runs from the repository)
    from conftest import require
except ImportError:  # pragma: no cover - running from inside plugins/s3

    def require(condition: bool, why: str) -> None:
        """Skip when something is missing, but fail when CI=true."""
        if not condition:
            if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
                pytest.fail(f"CI=true and {why}: CI must run every test", pytrace=False)
            pytest.skip(why)


#: Variables that would steer boto3 or the store away from the test server.
_FOREIGN_ENV = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_REGION",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
    "FLYTE_AWS_ENDPOINT",
    "FLYTE_AWS_ACCESS_KEY_ID",
    "FLYTE_AWS_SECRET_ACCESS_KEY",
    "FLYTE_AWS_S3_ADDRESSING_STYLE",
)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A moto S3 server on 127.0.0.1 for the whole session, with the bucket ``BUCKET``.

    Not installed: the test skips (a failure with CI=true). Installed but not started: the
    test fails, CI or not, with the server's output.
    """
    require(server_installed(), f"moto's S3 server is not installed: {INSTALL_HINT}")
    try:
        with run_server() as server:
            server.create_bucket(BUCKET)
            yield server
    except ServerStartError as exc:
        pytest.fail(str(exc), pytrace=False)


def server_env(endpoint: str, aws_dir: Any) -> dict[str, str]:
    """The variables that point boto3 at the test server ``endpoint`` with the test keys, and
    at empty AWS config files in ``aws_dir``."""
    return {
        "AWS_ENDPOINT_URL_S3": endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": str(aws_dir / "config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(aws_dir / "credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }


@pytest.fixture(scope="session")
def s3_env(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Environment pointing boto3 (and the registry's S3 store) at the test server, with small parts."""
    from flyte_checkpoint.storage.registry import get_registry

    env = {
        **server_env(s3_server.endpoint, tmp_path_factory.mktemp("aws")),
        **{f"FLYTE_CHECKPOINT_S3_{k.upper()}": str(v) for k, v in SMALL.items()},
    }
    with pytest.MonkeyPatch.context() as mp:
        for name in _FOREIGN_ENV:
            mp.delenv(name, raising=False)
        for name, value in env.items():
            mp.setenv(name, value)
        get_registry().close()  # forget stores built before this environment
        yield env
        get_registry().close()


@pytest.fixture(scope="session")
def raw_s3(s3_env: dict[str, str]) -> Iterator[Any]:
    """A plain boto3 client on the test server (whose fixture made the bucket ``BUCKET``)."""
    import boto3

    client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL_S3"])
    yield client
    client.close()


@pytest.fixture
def s3_root(raw_s3: Any) -> str:
    """A fresh, empty prefix in the test bucket."""
    return f"s3://{BUCKET}/{uuid.uuid4().hex}"


@pytest.fixture
def make_s3_store(s3_env: dict[str, str]) -> Iterator[Any]:
    """Build S3Stores on the test server (small parts by default); closes them after the test."""
    from flyte_checkpoint_s3.store import S3Store

    stores: list[S3Store] = []

    def make(**settings: Any) -> S3Store:
        merged = {"endpoint_url": s3_env["AWS_ENDPOINT_URL_S3"], **SMALL, **settings}
        store = S3Store(**merged)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def bare_env(s3_env: dict[str, str], raw_s3: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """No endpoint and no credentials in the environment; returns the server's endpoint."""
    for name in (*ENDPOINT_VARS, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    return s3_env["AWS_ENDPOINT_URL_S3"]
