"""``s3://bucket/key`` and ``s3a://bucket/key``: split into scheme, bucket and key."""

from __future__ import annotations

from typing import NamedTuple

from flyte_checkpoint.errors import InvalidURIError
from flyte_checkpoint.uri import redact, split_userinfo

SCHEMES = ("s3", "s3a")


class S3Location(NamedTuple):
    """Where an object (or a prefix) lives. ``key`` is taken as written: no percent-decoding."""

    scheme: str
    bucket: str
    key: str

    def uri(self, key: str | None = None) -> str:
        """The URI of ``key`` (default: this key) in this bucket, in this scheme."""
        return f"{self.scheme}://{self.bucket}/{self.key if key is None else key}"


def parse(uri: str, *, need_key: bool = True) -> S3Location:
    """Split an S3 URI.

    Raises:
        InvalidURIError: not ``s3://`` or ``s3a://``, no bucket, credentials in the URI, or
            (with ``need_key``) no key.
    """
    scheme, sep, rest = uri.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in SCHEMES:
        raise InvalidURIError(f"{redact(uri)} is not an S3 URI: write s3://bucket/key (or s3a://bucket/key)")
    if split_userinfo(uri)[0] is not None:  # before splitting: a secret key may hold "/"
        raise InvalidURIError(
            f"{redact(uri)} carries credentials in the URI: remove them and set AWS_ACCESS_KEY_ID/"
            "AWS_SECRET_ACCESS_KEY (or FLYTE_AWS_*) or a profile instead"
        )
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise InvalidURIError(f"{redact(uri)} names no bucket: write {scheme}://bucket/key")
    if need_key and not key:
        raise InvalidURIError(
            f"{redact(uri)} names a bucket but no object key: write {scheme}://{bucket}/key"
        )
    return S3Location(scheme, bucket, key)
