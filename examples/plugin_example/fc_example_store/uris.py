"""``folder://NAME/KEY``: NAME plays the part of a cloud's bucket."""

from __future__ import annotations

from flyte_checkpoint.storage.kit import Location, parse_location

SCHEMES = ("folder",)


def parse(uri: str, *, want_key: bool = True) -> Location:
    """The URI's NAME (``bucket``) and KEY.

    Raises:
        InvalidURIError: not a ``folder://NAME/KEY`` URI (or, with ``want_key``, no KEY).
    """
    return parse_location(uri, schemes=SCHEMES, want_key=want_key, cloud="folder", form="folder://NAME/KEY")
