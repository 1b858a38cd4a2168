"""Constants and small helpers shared by the S3 plugin's tests."""

from __future__ import annotations

import uuid
from typing import Any

from flyte_checkpoint.testing.data import data  # noqa: F401 - deterministic bytes that do not compress

#: The bucket every test writes under (each test under its own unique prefix).
BUCKET = "fcp-tests"
#: A bucket the test server does not have (the recipes' ``missing_container``).
MISSING_BUCKET = "fcp-no-such-bucket"
#: The variables that can name the endpoint, first set wins.
ENDPOINT_VARS = ("FLYTE_AWS_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
#: Credentials for the test server; the tests check that they never show up in messages.
ACCESS_KEY = "AKIATESTKEY0000SECRET"
SECRET_KEY = "test/Secret+Key/0123456789abcdefghijklmnop"
#: Small sizes so that a few MiB cross many part and range boundaries.
SMALL = {
    "part_size": 256 * 1024,
    "read_range_size": 256 * 1024,
    "max_concurrency": 3,
    "read_concurrency": 3,
}


def key_of(uri: str) -> str:
    """The key part of ``s3://bucket/key``."""
    return uri.split("/", 3)[3]


def multipart_uploads(raw_s3: Any, uri: str) -> list[dict[str, Any]]:
    """The unfinished multipart uploads under ``uri``'s key in the test bucket."""
    return raw_s3.list_multipart_uploads(Bucket=BUCKET, Prefix=key_of(uri)).get("Uploads", [])


def round_trip(store: Any) -> None:
    """Write a small object through ``store`` and read it back (fails on any difference)."""
    uri = f"s3://{BUCKET}/{uuid.uuid4().hex}/cfg"
    store.write_bytes(uri, b"configured")
    assert store.read_bytes(uri) == b"configured"


def fault_store(endpoint: str) -> Any:
    """The store of the fault and crash suites' recipe: on ``endpoint`` (the server or the fault
    proxy), with the suites' ``RECIPE_SETTINGS``. Module level: a crash test's child imports it."""
    from flyte_checkpoint_s3.store import S3Store

    from flyte_checkpoint.testing import RECIPE_SETTINGS

    keys = {"access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY, "region": "us-east-1"}
    return S3Store(endpoint_url=endpoint, **keys, **RECIPE_SETTINGS)
