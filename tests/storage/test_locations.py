"""The kit's URI parsing: one Location for every cloud, in the caller's spelling."""

from __future__ import annotations

from typing import Any

import pytest

from flyte_checkpoint.errors import InvalidURIError
from flyte_checkpoint.storage.kit.locations import Location, parse_location

S3: dict[str, Any] = {
    "schemes": ("s3", "s3a"),
    "cloud": "S3",
    "form": "s3://BUCKET/KEY (or s3a://BUCKET/KEY)",
}
AZ_FORM = "az://CONTAINER/PATH or abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH"


def split_azure(netloc: str, uri: str) -> tuple[str, str | None, str | None]:
    container, at, host = netloc.partition("@")
    if not at:
        return container, None, None
    account, _, rest = host.partition(".")
    service, _, suffix = rest.partition(".")
    if service not in ("dfs", "blob"):
        raise InvalidURIError(f"{host!r} is not a storage account host")
    return container, account, suffix


AZ: dict[str, Any] = {"schemes": ("abfs", "abfss", "az"), "cloud": "Azure Blob Storage", "form": AZ_FORM}


def test_bucket_and_key_are_split_and_the_key_kept_literally():
    loc = parse_location("s3://bucket/run/a%20b/ckpt", want_key=True, **S3)
    assert loc == Location("s3", "bucket", "bucket", "run/a%20b/ckpt")
    assert loc.uri() == "s3://bucket/run/a%20b/ckpt" and loc.uri("other/k") == "s3://bucket/other/k"


def test_the_scheme_is_lower_case_and_kept_as_given():
    assert parse_location("S3A://b/k", want_key=True, **S3).uri() == "s3a://b/k"


def test_a_prefix_may_have_no_key():
    assert parse_location("s3://b", want_key=False, **S3).key == ""
    assert parse_location("s3://b/", want_key=False, **S3).uri("x") == "s3://b/x"


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("gs://b/k", "gs://b/k is not a URI of S3: write s3://BUCKET/KEY (or s3a://BUCKET/KEY)"),
        ("s3:/b/k", "is not a URI of S3"),
        ("s3:///k", "s3:///k names no bucket: write s3://BUCKET/KEY"),
        ("s3://b", "s3://b names a bucket but no object: write s3://BUCKET/KEY"),
        ("s3://b/", "names a bucket but no object"),
    ],
)
def test_bad_uris_name_the_accepted_forms(uri, message):
    with pytest.raises(InvalidURIError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_location(uri, want_key=True, **S3)


def test_credentials_are_refused_before_the_uri_is_split_and_never_shown():
    with pytest.raises(InvalidURIError) as info:
        parse_location("s3://AKIAKEY:se/cr#et@bucket/k", want_key=True, **S3)
    text = str(info.value)
    assert text.startswith("s3://<redacted>@bucket/k carries credentials in the URI: S3 URIs take none")
    assert "AKIAKEY" not in text and "se/cr" not in text


def test_split_netloc_gives_container_account_and_suffix_and_the_uri_keeps_its_spelling():
    loc = parse_location(
        "abfss://data@acct.dfs.core.windows.net/run/ckpt", want_key=True, **AZ, split_netloc=split_azure
    )
    assert (loc.bucket, loc.account, loc.endpoint_suffix, loc.key) == (
        "data",
        "acct",
        "core.windows.net",
        "run/ckpt",
    )
    assert loc.uri("x") == "abfss://data@acct.dfs.core.windows.net/x"
    short = parse_location("az://data/run", want_key=True, **AZ, split_netloc=split_azure)
    assert (short.bucket, short.account, short.netloc) == ("data", None, "data")


def test_split_netloc_errors_pass_through_and_messages_say_container():
    with pytest.raises(InvalidURIError, match="is not a storage account host"):
        parse_location(
            "abfs://c@acct.queue.core.windows.net/k", want_key=True, **AZ, split_netloc=split_azure
        )
    with pytest.raises(
        InvalidURIError, match="az://c names a container but no object: write az://CONTAINER/PATH"
    ):
        parse_location("az://c", want_key=True, **AZ, split_netloc=split_azure)
