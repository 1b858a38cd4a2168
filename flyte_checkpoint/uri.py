"""URI helpers: the scheme of a URI, local paths in their standard forms, and redaction."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
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
        InvalidURIError: the URI is blank, a ``file:`` URI names another host, or a relative
            path looks like a URI that lost its colon (``s3//bucket/key``: did you mean
            ``s3://bucket/key``?).
    """
    if not isinstance(uri, (str, os.PathLike)):
        raise InvalidURIError(f"{param} must be a string URI or a path, not {type(uri).__name__}")
    text = os.fspath(uri).strip().strip('"').strip("'").strip()
    if not text:
        raise InvalidURIError(f"{param} is blank: pass a URI such as 's3://bucket/run/ckpt' or a local path")
    scheme = scheme_of(text)
    if scheme == LOCAL_SCHEME:
        _refuse_lost_colon(text)
        return str(local_path(text))
    return scheme + text[len(scheme) :]


# A relative path "NAME//rest": a URI whose colon was lost when NAME is a scheme.
_LOST_COLON_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]+)//+(.*)$", re.DOTALL)


def _refuse_lost_colon(text: str) -> None:
    """Refuse ``s3//bucket/key`` (a relative path whose first folder is a scheme's name followed
    by ``//``): it is a mistyped URI, which would otherwise be saved under ``./s3/`` (``./s3//b/k``
    or ``s3/b/k`` stay local paths).

    Raises:
        InvalidURIError: naming the URI it may have meant.
    """
    m = _LOST_COLON_RE.match(text)
    if m is None or m.group(1).lower() not in _scheme_names():
        return
    name, rest = m.group(1), m.group(2)
    scheme = name.lower()
    meant = redact(f"{scheme}:///{rest}" if scheme == LOCAL_SCHEME else f"{scheme}://{rest}")
    # as typed, unless that shows credentials
    shown = text if meant.endswith(rest) else name + "//" + meant.partition("://")[2].lstrip("/")
    raise InvalidURIError(
        f"{shown} is a relative path whose first folder is {name!r}, the name of a URI scheme:"
        f" did you mean {meant}? (for a local folder named {name!r}, write ./{shown})"
    )


#: The schemes a lost colon is checked against beyond ``file`` and ``memory``: set by
#: ``flyte_checkpoint/__init__.py`` (always imported before this module) to the shipped plugins'
#: and every registered backend's, which the registry knows, a floor above this module (it
#: imports this one: see CONTRIBUTING.md, "The layers"). Called only when the pattern matches.
scheme_names_from: Callable[[], Iterable[str]] | None = None


def _scheme_names() -> set[str]:
    """Every scheme this project ships a backend for, and those of the backends registered."""
    names = {LOCAL_SCHEME, "memory"}
    if scheme_names_from is not None:
        names.update(s.lower() for s in scheme_names_from())
    return names


def local_path(uri: str) -> Path:
    """The absolute local path of a bare path or a ``file:`` URI.

    Raises:
        InvalidURIError: a ``file://host/...`` URI with a host other than ``localhost``, or
            with a user-info (``file://user:password@localhost/...``).
    """
    if _SCHEME_RE.match(uri) and scheme_of(uri) == LOCAL_SCHEME:
        rest = uri[len("file:") :]
        if rest.startswith("//"):
            userinfo, bare = split_userinfo(uri)
            if userinfo is not None:
                path = "/" + bare[len("file://") :].partition("/")[2]
                raise InvalidURIError(
                    f"{redact(uri)} has a user name or password in it: local files take no credentials;"
                    f" write file://{path} or the bare path {path}"
                )
            host, _, path = rest[2:].partition("/")
            if host not in ("", "localhost"):
                raise InvalidURIError(
                    f"{redact(uri)} names the host {host!r}: file URIs must be local "
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

#: Schemes whose user-info is a container's name, not a credential (``abfs://container@account``).
_CONTAINER_USERINFO_SCHEMES = frozenset({"abfs", "abfss", "az", "wasb", "wasbs"})
_CONTAINER_NAME = re.compile(r"\$?[A-Za-z0-9][A-Za-z0-9-]*")
_USER_END = re.compile(r"[:/?#@]")
_URI_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]*")


def split_userinfo(uri: str) -> tuple[str | None, str]:
    """Split ``scheme://USERINFO@rest`` into ``(USERINFO, "scheme://rest")``; ``(None, uri)`` if none.

    A password may be written with any character in it (AWS secret keys hold ``/`` and ``+``;
    ``# ? @ :`` happen too), so the user-info is found before the URI is parsed. The user
    name runs to the first of ``: / ? # @``:

    - ``@``: a user-info without a password, up to the last ``@`` before the first ``/ ? #``
      (``abfs://container@account/path``);
    - ``:``: a password follows, and the user-info runs to the *last* ``@`` of the whole URI,
      whatever lies between (``s3://KEY:se/c#r?e@t@bucket/key``). A ``host:port/path@x``
      is taken as user-info too: hiding too much is the safe mistake;
    - ``/ ? #``, or none of them: no user-info (an ``@`` in a path, ``s3://b/run@2``, is a name).
    """
    scheme, sep, rest = uri.partition("://")
    if not sep or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.\-]*", scheme):
        return None, uri
    first = _USER_END.search(rest)
    if first is None or first.group() in "/?#":
        return None, uri
    if first.group() == "@":
        end = next((i for i, c in enumerate(rest) if c in "/?#"), len(rest))
        at = rest.rfind("@", 0, end)
    else:
        at = rest.rfind("@")
        if at < 0:
            return None, uri
    return rest[:at], f"{scheme}://{rest[at + 1 :]}"


def _is_credential(scheme: str, userinfo: str) -> bool:
    if not userinfo:
        return False
    return not (scheme.lower() in _CONTAINER_USERINFO_SCHEMES and _CONTAINER_NAME.fullmatch(userinfo))


def has_credentials(uri: str) -> bool:
    """True when the URI carries credentials in its user-info (what :func:`redact` removes).

    Every non-empty user-info counts, except a container's name in an Azure URI
    (``abfs://container@account/...``). See :func:`split_userinfo` for where it ends.
    """
    userinfo, _ = split_userinfo(uri)
    return userinfo is not None and _is_credential(uri.partition("://")[0], userinfo)


def redact(uri: str) -> str:
    """Return the URI with credentials removed, safe for logs and error messages.

    The user-info is found first (:func:`split_userinfo`: a password may contain
    ``/ + # ? @ :``) and replaced whole by ``<redacted>``
    (``s3://KEY:SE/CRET@bucket/key`` is ``s3://<redacted>@bucket/key``); then the values of
    every query parameter (SAS tokens, signed URLs) are replaced. A container's name in an
    Azure URI (``abfs://container@account/...``) is kept: it is a name.
    """
    userinfo, bare = split_userinfo(uri)
    hide = userinfo is not None and _is_credential(uri.partition("://")[0], userinfo)
    target = bare if hide else uri
    try:
        parts = urlsplit(target)
    except ValueError:
        return "<unparseable uri>"
    out = target
    if parts.query:
        keys = [k for k, _ in parse_qsl(parts.query, keep_blank_values=True)] or ["query"]
        query = "&".join(f"{quote(k)}={_SECRET_PARAM}" for k in keys)
        out = urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))
    if hide:
        scheme, _, rest = out.partition("://")
        out = f"{scheme}://{_SECRET_PARAM}@{rest}"
    return out


def redact_text(text: str, *, query: bool = True) -> str:
    """``text`` with :func:`redact` applied to every ``scheme://...`` in it (up to a space or quote).

    With ``query=False`` only user-infos are replaced; query values are kept.
    """

    def one(m: re.Match[str]) -> str:
        if query:
            return redact(m.group())
        userinfo, bare = split_userinfo(m.group())
        if userinfo is None or not _is_credential(bare.partition("://")[0], userinfo):
            return m.group()
        scheme, _, rest = bare.partition("://")
        return f"{scheme}://{_SECRET_PARAM}@{rest}"

    return _URI_IN_TEXT.sub(one, text)
