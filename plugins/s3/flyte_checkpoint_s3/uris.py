"""``s3://bucket/key`` and ``s3a://bucket/key``: split into scheme, bucket and key by the kit."""

from __future__ import annotations

from flyte_checkpoint.storage.kit import Location, parse_location

#: The URI schemes this backend serves.
SCHEMES = ("s3", "s3a")
#: The accepted forms, shown in the message of a URI that is not one.
FORM = "s3://BUCKET/KEY (or s3a://BUCKET/KEY)"


def parse(uri: str, *, want_key: bool = True) -> Location:
    """Split an S3 URI; the key is kept as written (no percent-decoding).

    Raises:
        InvalidURIError: not ``s3://`` or ``s3a://``, no bucket, credentials in the URI, or
            (with ``want_key``) no key.
    """
    return parse_location(uri, schemes=SCHEMES, want_key=want_key, cloud="S3", form=FORM)
