"""Where a cloud URI points: its bucket (or container) and key, parsed one way for every backend."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...errors import InvalidURIError
from ...uri import has_credentials, redact

#: ``split_netloc(netloc, uri) -> (bucket, account, endpoint_suffix)``: a cloud whose URIs carry
#: more than a bucket before the first ``/`` (Azure's ``container@account.dfs.core.windows.net``).
SplitNetloc = Callable[[str, str], "tuple[str, str | None, str | None]"]


@dataclass(frozen=True)
class Location:
    """The parts of a cloud URI.

    Attributes:
        scheme: the URI's scheme, lower-case (``s3a`` stays ``s3a``).
        netloc: everything between ``://`` and the first ``/``, as written; rebuilds URIs.
        bucket: the bucket or container.
        key: the object's key (empty for a bucket or a listing at its root), as written: no
            percent-decoding.
        account: the account the URI names (Azure), else ``None``.
        endpoint_suffix: the DNS suffix of the URI's host (``core.windows.net``), else ``None``.
    """

    scheme: str
    netloc: str
    bucket: str
    key: str
    account: str | None = None
    endpoint_suffix: str | None = None

    def uri(self, key: str | None = None) -> str:
        """The URI of ``key`` (default: this key) in this bucket, spelled as the parsed URI was."""
        return f"{self.scheme}://{self.netloc}/{self.key if key is None else key}"


def parse_location(
    uri: str,
    *,
    schemes: tuple[str, ...],
    want_key: bool,
    cloud: str,
    form: str,
    split_netloc: SplitNetloc | None = None,
) -> Location:
    """Split ``uri`` into a :class:`Location`.

    ``schemes`` are the schemes accepted (lower-case); ``cloud`` names the service in messages
    ("S3", "Google Cloud Storage") and ``form`` shows the accepted forms
    (``"s3://BUCKET/KEY (or s3a://BUCKET/KEY)"``). With ``want_key`` the URI must name an object;
    without it the key may be empty (a listing prefix). ``split_netloc`` splits what lies
    before the first ``/`` (default: all of it is the bucket) and raises InvalidURIError itself.
    Messages call the bucket a container when ``form`` does (``az://CONTAINER/PATH``).

    Raises:
        InvalidURIError: another scheme, credentials in the URI (checked before anything is
            split: a secret may hold ``/``), no bucket, or (with ``want_key``) no key; the
            message names the URI with credentials removed and the accepted forms.
    """
    scheme, sep, rest = uri.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in schemes:
        raise InvalidURIError(f"{redact(uri)} is not a URI of {cloud}: write {form}")
    if has_credentials(uri):
        raise InvalidURIError(
            f"{redact(uri)} carries credentials in the URI: {cloud} URIs take none; remove them and"
            " give credentials through the backend's settings or the cloud's own variables"
            " (see the backend's README)"
        )
    noun = "container" if "CONTAINER" in form else "bucket"  # as the cloud calls it
    netloc, _, key = rest.partition("/")
    account = suffix = None
    if split_netloc is not None and netloc:
        bucket, account, suffix = split_netloc(netloc, uri)
    else:
        bucket = netloc
    if not bucket:
        raise InvalidURIError(f"{redact(uri)} names no {noun}: write {form}")
    if want_key and not key:
        raise InvalidURIError(f"{redact(uri)} names a {noun} but no object: write {form}")
    return Location(scheme, netloc, bucket, key, account, suffix)


__all__ = ["Location", "SplitNetloc", "parse_location"]
