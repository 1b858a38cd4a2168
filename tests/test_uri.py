from __future__ import annotations

import os

import pytest

from flyte_checkpoint.errors import InvalidURIError
from flyte_checkpoint.uri import has_credentials, normalize, redact, redact_text, scheme_of, split_userinfo
from tests.uri_secrets import PIECES, SPECIAL


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
        ("s3://AKIAXX:topsecret@bucket/key", "topsecret", "s3://<redacted>@bucket/key"),
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


@pytest.mark.parametrize("scheme", ["s3", "gs", "az", "abfss", "https", "memory", "file"])
@pytest.mark.parametrize("char", list(SPECIAL.values()), ids=list(SPECIAL))
def test_redact_hides_a_password_holding_any_special_character(char, scheme):
    """The user-info is found before parsing, up to the last "@": no piece of the secret is left."""
    secret = char.join(PIECES)
    host = "localhost" if scheme == "file" else "bucket"
    uri = f"{scheme}://AKIAIOSFODNN7EXAMPLE:{secret}@{host}/run/ckpt"
    out = redact(uri)
    assert out == f"{scheme}://<redacted>@{host}/run/ckpt"
    assert not any(piece in out for piece in (*PIECES, "AKIAIOSFODNN7EXAMPLE"))
    assert has_credentials(uri)
    assert split_userinfo(uri) == (f"AKIAIOSFODNN7EXAMPLE:{secret}", f"{scheme}://{host}/run/ckpt")
    assert redact(out) == out  # redacting twice changes nothing
    signed = redact(f"{uri}?sig=SIGNATURE1")
    assert signed == f"{scheme}://<redacted>@{host}/run/ckpt?sig=<redacted>"


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        # the whole user-info goes, up to the last "@", even when the path then holds an "@":
        # hiding too much is the safe mistake
        ("s3://KEY:se/cr@bucket/run@2/ckpt", "s3://<redacted>@2/ckpt"),
        ("https://host:8080/a@b", "https://<redacted>@b"),
        # a user name alone is a credential too (a token), except an Azure container's name
        ("https://ghp_tok3n@github.example/x", "https://<redacted>@github.example/x"),
        ("abfs://c+ont@acct.dfs.core.windows.net/p", "abfs://<redacted>@acct.dfs.core.windows.net/p"),
        ("az://container:SASKEY@acct/p", "az://<redacted>@acct/p"),
    ],
)
def test_redact_takes_the_widest_user_info(uri, shown):
    assert redact(uri) == shown
    assert has_credentials(uri)


@pytest.mark.parametrize(
    "uri",
    [
        "s3://b/run@2/ckpt",
        "s3://b/a:b@c/d",
        "gs://b/x#y@z",
        "abfs://container@acct.dfs.core.windows.net/run@2/ckpt",
        "az://container@acct/x",
        "s3://@b/k",
        "/tmp/a:b@c/x",
        "file:///tmp/a:b@c/x",
        "http://127.0.0.1:5000",
    ],
)
def test_an_at_sign_in_a_path_or_an_azure_container_is_not_a_credential(uri):
    assert redact(uri) == uri
    assert not has_credentials(uri)


def test_redact_text_redacts_every_uri_in_a_message():
    text = "copy s3://K:se/cr#t@b/k to 'gs://b/o?sig=abc' failed: s3://b/run@2 kept"
    assert redact_text(text) == (
        "copy s3://<redacted>@b/k to 'gs://b/o?sig=<redacted>' failed: s3://b/run@2 kept"
    )


@pytest.mark.parametrize("char", list(SPECIAL.values()), ids=list(SPECIAL))
def test_a_local_uri_with_a_password_gets_one_clear_message_without_it(char):
    """``file://user:pw@localhost/...`` was "names the host 'localhost': file URIs must be local"."""
    secret = char.join(PIECES)
    with pytest.raises(InvalidURIError) as info:
        normalize(f"file://user:{secret}@localhost/tmp/run/ckpt")
    message = str(info.value)
    assert message == (
        "file://<redacted>@localhost/tmp/run/ckpt has a user name or password in it: local files take"
        " no credentials; write file:///tmp/run/ckpt or the bare path /tmp/run/ckpt"
    )


def test_a_remote_file_host_is_still_named():
    with pytest.raises(InvalidURIError, match="names the host 'otherhost': file URIs must be local"):
        normalize("file://otherhost/tmp/x")


def test_redact_text_can_keep_query_values():
    text = "PUT s3://K:se/cr@b/k?partNumber=3 and https://h/o?uploadId=7"
    assert redact_text(text, query=False) == "PUT s3://<redacted>@b/k?partNumber=3 and https://h/o?uploadId=7"


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("s3//bucket/key", "s3://bucket/key"),
        ("S3//bucket/key", "s3://bucket/key"),
        ("s3a//bucket/key", "s3a://bucket/key"),
        ("gs//b/k", "gs://b/k"),
        ("gcs///b/k", "gcs://b/k"),
        ("abfss//container@account/k", "abfss://container@account/k"),
        ("az//c@a/k", "az://c@a/k"),
        ("memory//b/k", "memory://b/k"),
        ("file//tmp/x", "file:///tmp/x"),
    ],
)
def test_a_relative_path_that_is_a_uri_without_its_colon_is_refused_naming_the_uri(
    typed, meant, tmp_path, monkeypatch
):
    """Proves: ``s3//bucket/key`` (a relative path whose first folder is a scheme's name, then
    ``//``) is an InvalidURIError asking "did you mean s3://bucket/key?" and saying how to write
    a local folder of that name, not a path under ./s3/."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidURIError) as info:
        normalize(typed)
    message = str(info.value)
    assert f"did you mean {meant}?" in message, message
    assert message.startswith(f"{typed} is a relative path") and f"write ./{typed})" in message, message
    assert list(tmp_path.iterdir()) == []


def test_a_uri_without_its_colon_keeps_its_credentials_out_of_the_message():
    with pytest.raises(InvalidURIError) as info:
        normalize("s3//KEY:SECRET@bucket/key")
    assert "SECRET" not in str(info.value) and "KEY" not in str(info.value)
    assert "did you mean s3://<redacted>@bucket/key?" in str(info.value)


@pytest.mark.parametrize("local", ["./s3//b/k", "s3/b/k", "runs//ckpt", "s3", "s3x//b/k", "/s3//b/k"])
def test_local_paths_that_only_resemble_a_uri_stay_local(local, tmp_path, monkeypatch):
    """Proves: the check takes only NAME// with NAME a scheme: an explicit ``./``, one slash, an
    absolute path, or a folder that is no scheme's name are local paths as before."""
    monkeypatch.chdir(tmp_path)
    assert normalize(local) == os.path.abspath(local)
