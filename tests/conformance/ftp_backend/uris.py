"""``ftpstore://BUCKET/KEY``: BUCKET, a top-level folder of the server, plays a bucket's part."""

from __future__ import annotations

from flyte_checkpoint.errors import InvalidURIError
from flyte_checkpoint.storage.kit import Location, parse_location
from flyte_checkpoint.uri import redact

SCHEMES = ("ftpstore",)
#: Names of objects being written (beside their object): listings leave them out.
HIDDEN = ".part-"


def parse(uri: str, *, want_key: bool = True) -> Location:
    """The URI's BUCKET and KEY.

    Raises:
        InvalidURIError: not ``ftpstore://BUCKET/KEY``; or a key FTP cannot carry as written (a
            line break or NUL ends an FTP command; an empty, ``.`` or ``..`` segment would name
            another path; a name starting ``.part-`` is the store's own).
    """
    loc = parse_location(uri, schemes=SCHEMES, want_key=want_key, cloud="ftp", form="ftpstore://BUCKET/KEY")
    if any(c in loc.key for c in "\r\n\0"):
        raise InvalidURIError(f"{redact(uri)}: an FTP path cannot hold a line break or NUL; rename the key")
    segments = loc.key.split("/") if loc.key else []
    inner = segments if want_key else segments[:-1]  # a prefix may end with '/' (or be empty)
    if any(s in ("", ".", "..") for s in inner) or (segments and segments[-1] in (".", "..")):
        raise InvalidURIError(f"{redact(uri)}: a key with an empty, '.' or '..' segment; write a/b, not a//b")
    if any(s.startswith(HIDDEN) for s in segments):
        raise InvalidURIError(
            f"{redact(uri)}: names starting {HIDDEN!r} are the FTP store's own; rename the key"
        )
    return loc


def path(loc: Location, key: str | None = None) -> str:
    """The server path of ``key`` (default: the location's) in the location's bucket."""
    return f"/{loc.bucket}/{loc.key if key is None else key}"
