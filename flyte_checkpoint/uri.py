"""URI helpers: the scheme of a URI, local paths in their standard forms, and redaction."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

from .errors import InvalidURIError

LOCAL_SCHEME = "file"

# "scheme:" at the start; a single letter is a Windows drive, not a scheme.
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]+):")


def scheme_of(uri: str) -> str:
    """Return the URI's scheme in lower case; ``"file"`` for a bare local path."""
    m = _SCHEME_RE.match(uri)
    return m.group(1).lower() if m else LOCAL_SCHEME


def normalize(uri: str, *, param: str = "uri") -> str:
    """Check a URI and return it in one canonical spelling.

    Surrounding whitespace and quotes are removed and the scheme is lower-cased
    (``S3://b/k`` is ``s3://b/k``); every local form (``/abs``, ``rel``, ``file:/abs``,
    ``file:///abs``, ``file://localhost/abs``) becomes an absolute path.

    Raises:
        InvalidURIError: the URI is blank, or a ``file:`` URI names another host.
    """
    if not isinstance(uri, (str, os.PathLike)):
        raise InvalidURIError(f"{param} must be a string URI or a path, not {type(uri).__name__}")
    text = os.fspath(uri).strip().strip('"').strip("'").strip()
    if not text:
        raise InvalidURIError(f"{param} is blank: pass a URI such as 's3://bucket/run/ckpt' or a local path")
    scheme = scheme_of(text)
    if scheme == LOCAL_SCHEME:
        return str(local_path(text))
    return scheme + text[len(scheme) :]


def local_path(uri: str) -> Path:
    """The absolute local path of a bare path or a ``file:`` URI.

    Raises:
        InvalidURIError: a ``file://host/...`` URI with a host other than ``localhost``.
    """
    if _SCHEME_RE.match(uri) and scheme_of(uri) == LOCAL_SCHEME:
        rest = uri[len("file:") :]
        if rest.startswith("//"):
            host, _, path = rest[2:].partition("/")
            if host not in ("", "localhost"):
                raise InvalidURIError(
                    f"{redact(uri)} names the host {host.rpartition('@')[2]!r}: file URIs must be local "
                    "(file:///abs/path or file://localhost/abs/path)"
                )
            rest = "/" + path
        uri = rest
    return Path(os.path.abspath(os.path.expanduser(uri)))


def is_local(uri: str) -> bool:
    """True for a bare path or a ``file:`` URI."""
    return scheme_of(uri) == LOCAL_SCHEME


def join(prefix: str, *names: str) -> str:
    """Join names to a URI or path with single slashes."""
    out = prefix.rstrip("/")
    for name in names:
        out += "/" + name.strip("/")
    return out


_SECRET_PARAM = "<redacted>"


def redact(uri: str) -> str:
    """Return the URI with credentials removed, safe for logs and error messages.

    Removes a password in the user-info part (``s3://KEY:SECRET@bucket`` keeps neither)
    and the values of every query parameter (SAS tokens, signed URLs).
    A user-info without a password (``abfs://container@account...``) is kept: it is a name.
    """
    try:
        parts = urlsplit(uri)
    except ValueError:
        return "<unparseable uri>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        if ":" in userinfo:
            netloc = host
    query = parts.query
    if query:
        keys = [k for k, _ in parse_qsl(query, keep_blank_values=True)] or ["query"]
        query = "&".join(f"{quote(k)}={_SECRET_PARAM}" for k in keys)
    if netloc == parts.netloc and query == parts.query:
        return uri
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
