from __future__ import annotations

import os

import pytest

from flyte_checkpoint.errors import InvalidURIError
from flyte_checkpoint.uri import normalize, redact, scheme_of


@pytest.mark.parametrize(
    "uri", ["/abs/x", "file:/abs/x", "file:///abs/x", "file://localhost/abs/x", "FILE:///abs/x", ' "/abs/x" ']
)
def test_local_forms_mean_the_same_file(uri):
    assert normalize(uri) == "/abs/x"


def test_relative_path_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert normalize("rel/x") == os.path.join(str(tmp_path), "rel/x")


def test_scheme_is_lower_cased_rest_kept():
    assert normalize("S3://Bucket/Key") == "s3://Bucket/Key"
    assert scheme_of("GS://b/k") == "gs"
    assert scheme_of("/p") == "file"


@pytest.mark.parametrize("blank", ["", "   ", '""', "''"])
def test_blank_is_an_error_naming_the_parameter(blank):
    with pytest.raises(InvalidURIError, match="checkpoint_src is blank"):
        normalize(blank, param="checkpoint_src")


def test_non_string_is_an_error():
    with pytest.raises(InvalidURIError, match="must be a string"):
        normalize(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("uri", "secret", "kept"),
    [
        ("s3://AKIAXX:topsecret@bucket/key", "topsecret", "s3://bucket/key"),
        (
            "abfs://c@acct.dfs.core.windows.net/p?sv=2020&sig=SIGVALUE",
            "SIGVALUE",
            "abfs://c@acct.dfs.core.windows.net/p?sv=<redacted>&sig=<redacted>",
        ),
        ("https://h/o?X-Amz-Signature=abc123&X-Amz-Credential=AKIA", "abc123", "X-Amz-Signature=<redacted>"),
    ],
)
def test_redact_removes_credentials(uri, secret, kept):
    out = redact(uri)
    assert secret not in out and kept in out


def test_redact_leaves_plain_uris_alone():
    for uri in ("s3://b/k", "/tmp/a b/c", "abfs://container@account/x"):
        assert redact(uri) == uri
