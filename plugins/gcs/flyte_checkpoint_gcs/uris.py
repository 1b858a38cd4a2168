"""``gs://BUCKET/NAME`` and ``gcs://BUCKET/NAME`` (the same store), parsed by the kit."""

from __future__ import annotations

from flyte_checkpoint.storage.kit import Location, parse_location

#: The URI schemes this backend serves.
SCHEMES = ("gs", "gcs")
#: The accepted forms, shown in the message of a URI that is not one.
FORM = "gs://BUCKET/NAME (or gcs://BUCKET/NAME)"


def parse(uri: str, *, want_key: bool = True) -> Location:
    """The bucket and object name of ``uri``; the name is kept literally (no percent-decoding).
    With ``want_key=False`` the name may be empty (a listing prefix).

    Raises:
        InvalidURIError: another scheme, credentials in the URI, no bucket, or (with
            ``want_key``) no object name.
    """
    return parse_location(
        uri,
        schemes=SCHEMES,
        want_key=want_key,
        cloud="Google Cloud Storage",
        form=FORM,
    )
