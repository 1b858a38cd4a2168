"""``gs://bucket/name`` and ``gcs://bucket/name``: parsing and building."""

from __future__ import annotations

from dataclasses import dataclass

from flyte_checkpoint.errors import InvalidURIError
from flyte_checkpoint.uri import redact, split_userinfo

SCHEMES = ("gs", "gcs")


@dataclass(frozen=True)
class GcsLocation:
    """Where a URI points: its scheme (kept for the URIs we hand back), bucket and object name."""

    scheme: str
    bucket: str
    name: str

    def uri(self, name: str | None = None) -> str:
        """The URI of ``name`` (default: this object) in this bucket, with this scheme."""
        return f"{self.scheme}://{self.bucket}/{self.name if name is None else name}"


def parse(uri: str, *, want_object: bool = True) -> GcsLocation:
    """Split a ``gs://`` or ``gcs://`` URI into scheme, bucket and object name.

    The name is everything after ``bucket/``, taken literally (no percent-decoding).
    With ``want_object=False`` the name may be empty (a listing prefix).

    Raises:
        InvalidURIError: another scheme, credentials in the URI, no bucket, or (when an object is
            wanted) no name.
    """
    scheme, sep, rest = uri.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in SCHEMES:
        raise InvalidURIError(
            f"{redact(uri)} is not a Google Cloud Storage URI: write gs://BUCKET/NAME (or gcs://BUCKET/NAME)"
        )
    # user-info: credentials never travel in a gs:// URI (nor reach a log); found before
    # splitting, since a secret may hold "/"
    if split_userinfo(uri)[0] is not None:
        raise InvalidURIError(
            f"{redact(uri)} has credentials in it: gs:// URIs take none; use Application Default"
            " Credentials (GOOGLE_APPLICATION_CREDENTIALS)"
        )
    bucket, _, name = rest.partition("/")
    if not bucket:
        raise InvalidURIError(f"{redact(uri)} names no bucket: write {scheme}://BUCKET/NAME")
    if want_object and not name:
        raise InvalidURIError(f"{redact(uri)} names a bucket but no object: write {scheme}://{bucket}/NAME")
    return GcsLocation(scheme, bucket, name)
