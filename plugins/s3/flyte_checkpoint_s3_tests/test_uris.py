"""URIs: ``s3://`` and ``s3a://``, keys used as written, and the forms refused with a message."""

from __future__ import annotations

import re
from typing import Any

import pytest
from flyte_checkpoint_s3.store import S3Store
from flyte_checkpoint_s3.uris import parse

from flyte_checkpoint.errors import InvalidURIError
from flyte_checkpoint.storage.registry import store_for

from .helpers import BUCKET, key_of


@pytest.mark.parametrize(
    ("uri", "bucket", "key"),
    [
        ("s3://b/k", "b", "k"),
        ("S3A://b/dir/k", "b", "dir/k"),
        ("s3://b/a%20b c", "b", "a%20b c"),
    ],
)
def test_parse(uri: str, bucket: str, key: str) -> None:
    loc = parse(uri)
    assert (loc.bucket, loc.key) == (bucket, key)
    assert loc.uri() == uri.replace(uri.partition("://")[0], loc.scheme, 1)


def test_a_prefix_may_name_only_the_bucket() -> None:
    loc = parse("s3a://b/", want_key=False)
    assert (loc.scheme, loc.bucket, loc.key, loc.uri("x")) == ("s3a", "b", "", "s3a://b/x")


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("gs://b/k", "is not a URI of S3: write s3://BUCKET/KEY (or s3a://BUCKET/KEY)"),
        ("s3:///key", "names no bucket"),
        ("s3://bkt/", "names a bucket but no object"),
        ("s3://AKIA:SECRETVALUE@bkt/k", "carries credentials"),
    ],
)
def test_invalid_uris_are_refused_with_the_forms(uri: str, words: str) -> None:
    store = S3Store(endpoint_url="http://127.0.0.1:1")
    with pytest.raises(InvalidURIError, match=re.escape(words)) as info:
        store.stat(uri)
    assert "SECRETVALUE" not in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.integration
def test_s3a_is_an_alias_of_s3(s3_env: dict[str, str], s3_root: str) -> None:
    store = store_for(s3_root)
    assert isinstance(store, S3Store)
    assert store_for(s3_root.replace("s3://", "s3a://", 1)) is store
    store.write_bytes(f"{s3_root}/a", b"via s3")
    alias = s3_root.replace("s3://", "s3a://", 1)
    assert store.read_bytes(f"{alias}/a") == b"via s3"
    assert list(store.list(alias)) == [f"{alias}/a"]
    assert list(store.list(s3_root)) == [f"{s3_root}/a"]


@pytest.mark.integration
@pytest.mark.parametrize(
    "name",
    ["with space/and  two", "unicode é ü 文字 🚀.bin", "percent%20not-decoded", "plus+and&amp?q=1#frag"],
)
def test_keys_are_used_as_written(make_s3_store: Any, raw_s3: Any, s3_root: str, name: str) -> None:
    store = make_s3_store()
    uri = f"{s3_root}/{name}"
    store.write_bytes(uri, name.encode())
    assert raw_s3.get_object(Bucket=BUCKET, Key=key_of(uri))["Body"].read() == name.encode()
    assert store.stat(uri) == len(name.encode())
    assert list(store.list(s3_root)) == [uri]
    assert store.read_bytes(uri) == name.encode()
