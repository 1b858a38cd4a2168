"""Pinned reads on S3 against moto's server, which honours ``If-Match`` on GET (412 once the
object's ETag changed): the pin suite, and what the requests carry."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from flyte_checkpoint_s3.store import S3Store

from flyte_checkpoint.errors import ObjectReplacedError
from flyte_checkpoint.storage.registry import store_for
from flyte_checkpoint.testing import PinnedReadSuite

from .helpers import BUCKET

pytestmark = pytest.mark.integration


class TestS3Pins(PinnedReadSuite):
    """Through the registry: small read ranges, so a stream is many ranged GETs."""

    @pytest.fixture
    def store(self, s3_env: dict[str, str], raw_s3: Any) -> S3Store:
        store = store_for(f"s3://{BUCKET}/x")
        assert isinstance(store, S3Store) and store.supports_pinned_reads
        return store

    @pytest.fixture
    def store_root(self) -> str:
        return f"s3://{BUCKET}/{uuid.uuid4().hex}"


def test_every_read_of_a_pin_is_conditional_on_its_etag(make_s3_store: Any, raw_s3: Any) -> None:
    store = make_s3_store(read_range_size=64 * 1024, read_concurrency=2)
    uri = f"s3://{BUCKET}/{uuid.uuid4().hex}/obj"
    store.write_bytes(uri, b"a" * 300_000)
    sent: list[str | None] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        sent.append(params.get("headers", {}).get("If-Match"))

    store.client.get().meta.events.register("before-call.s3.GetObject", record)
    with store.pin(uri) as pinned:
        assert pinned.read_range(10, 10) == b"a" * 10
        assert len(pinned.open_read().read()) == 300_000
        etag = pinned.version
    # the range, then the stream's first GET and its ranges: each with If-Match
    assert len(sent) >= 1 + 5 and set(sent) == {etag}, sent
    store.write_bytes(uri, b"b" * 300_000)
    with pytest.raises(ObjectReplacedError, match="changed while it was being read"):
        pinned.read_range(0, 10)
    with pytest.raises(ObjectReplacedError):
        pinned.open_read()
