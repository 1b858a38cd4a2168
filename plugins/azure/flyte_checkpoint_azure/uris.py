"""Which storage account, container and blob an Azure URI names (no SDK needed)."""

from __future__ import annotations

from flyte_checkpoint.errors import InvalidURIError
from flyte_checkpoint.storage.kit.locations import Location, parse_location
from flyte_checkpoint.uri import redact

#: The URI schemes this backend serves.
SCHEMES: tuple[str, ...] = ("abfs", "abfss", "az")

#: The accepted forms, shown in the message of a URI that is not one.
FORM = (
    "az://CONTAINER/PATH, abfs://CONTAINER/PATH (account from the configuration) or"
    " abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH"
)
_SERVICE_LABELS = ("dfs", "blob")


def parse(uri: str, *, want_key: bool = True) -> Location:
    """Split an Azure URI: ``bucket`` is the container, ``key`` the blob name (taken literally),
    ``account`` and ``endpoint_suffix`` come from a ``CONTAINER@ACCOUNT.dfs.SUFFIX`` host.

    Raises:
        InvalidURIError: another scheme, credentials in the URI, no container, a host that is
            not a storage account's, or (with ``want_key``) no blob name.
    """
    return parse_location(
        uri,
        schemes=SCHEMES,
        want_key=want_key,
        cloud="Azure Blob Storage",
        form=FORM,
        split_netloc=_split,
    )


def _split(netloc: str, uri: str) -> tuple[str, str | None, str | None]:
    container, at, host = netloc.partition("@")
    if not at:
        return container, None, None
    labels = host.lower().split(".")
    if len(labels) == 1 and labels[0]:
        return container, labels[0], None
    if len(labels) >= 3 and labels[0] and labels[1] in _SERVICE_LABELS and all(labels[2:]):
        return container, labels[0], ".".join(labels[2:])
    raise InvalidURIError(
        f"{redact(uri)}: {host!r} is not a storage account host; write"
        " ACCOUNT.dfs.core.windows.net or ACCOUNT.blob.core.windows.net"
    )
