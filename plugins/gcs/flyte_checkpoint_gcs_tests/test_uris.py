"""``gs://`` and ``gcs://`` URIs: parsing, the alias, literal names."""

from __future__ import annotations

import os
import uuid

import pytest
from flyte_checkpoint_gcs.store import GCSStore
from flyte_checkpoint_gcs.uris import parse

from flyte_checkpoint.checkpoint import Checkpoint
from flyte_checkpoint.errors import InvalidURIError
from flyte_checkpoint.storage.registry import get_registry
from flyte_checkpoint.uri import join

from .helpers import BUCKET, CHUNK
from .server import GCSServer


def test_parse_keeps_the_scheme_and_the_name_literally() -> None:
    loc = parse("GCS://bucket/a%20b/c d")
    assert (loc.scheme, loc.bucket, loc.key) == ("gcs", "bucket", "a%20b/c d")
    assert loc.uri("x") == "gcs://bucket/x"
    assert parse("gs://bucket", want_key=False).key == ""


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("s3://bucket/name", "is not a URI of Google Cloud Storage: write gs://BUCKET/NAME"),
        ("gs:///name", "names no bucket"),
        ("gs://bucket", "names a bucket but no object"),
        ("gs://key:secret@bucket/name", "carries credentials in the URI"),
    ],
)
def test_bad_uris_are_refused_before_any_request(uri: str, message: str) -> None:
    with pytest.raises(InvalidURIError, match=message) as info:
        parse(uri)
    assert "secret" not in str(info.value)


def test_gcs_alias_resolves_to_the_same_backend_and_round_trips(gcs_server: GCSServer) -> None:
    registry = get_registry()
    assert registry.backend_for("gcs://b/k").name == registry.backend_for("gs://b/k").name == "gcs"
    name = uuid.uuid4().hex
    alias, canonical = f"gcs://{BUCKET}/{name}", f"gs://{BUCKET}/{name}"
    with Checkpoint(join(alias, "ckpt")) as cp:
        cp.save_sync(b"through the alias")
    store = registry.store_for(alias)
    # the object, and its history (the save's manifest: docs/history.md), under either scheme
    objects = [u for u in store.list(alias) if ".fcp-history/" not in u]
    assert objects == [join(alias, "ckpt")]
    assert [u for u in store.list(canonical) if ".fcp-history/" not in u] == [join(canonical, "ckpt")]
    assert join(alias, "ckpt.fcp-history/g00000000.json") in list(store.list(alias))
    with Checkpoint(join(canonical, "next"), join(canonical, "ckpt")) as cp:
        assert cp.load_sync().read_bytes() == b"through the alias"


@pytest.mark.parametrize(
    "name",
    ["été/données 文字.bin", "with space/and+plus", "odd?chars#and%25percent", "emoji/🚀/ckpt"],
)
def test_unicode_and_reserved_characters_in_names(store: GCSStore, gcs_root: str, name: str) -> None:
    uri = join(gcs_root, name)
    data = os.urandom(2 * CHUNK + 11)  # a chunked upload and ranged reads
    store.write_bytes(uri, data)
    assert store.stat(uri) == len(data)
    assert store.read_bytes(uri) == data
    assert store.read_range(uri, CHUNK, 5) == data[CHUNK : CHUNK + 5]
    assert list(store.list(gcs_root)) == [uri]
    store.delete(uri)
    assert store.stat(uri) is None
