"""Which storage account, container and blob an Azure URI names (no SDK needed)."""

from __future__ import annotations

from dataclasses import dataclass

from flyte_checkpoint.errors import InvalidURIError
from flyte_checkpoint.uri import has_credentials, redact

#: The URI schemes this backend serves.
SCHEMES: tuple[str, ...] = ("abfs", "abfss", "az")

_FORMS = (
    "az://CONTAINER/PATH, abfs://CONTAINER/PATH (account from the configuration) or"
    " abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH"
)
_SERVICE_LABELS = ("dfs", "blob")


@dataclass(frozen=True)
class BlobLocation:
    """The parts of an Azure URI.

    Attributes:
        scheme: ``abfs``, ``abfss`` or ``az``.
        netloc: the part between ``://`` and the first ``/``, kept to rebuild URIs.
        container: the container name.
        name: the blob name (empty for the container itself).
        account: the storage account the URI names, or ``None`` (then configuration decides).
        endpoint_suffix: the DNS suffix of the URI's host (``core.windows.net``), or ``None``.
    """

    scheme: str
    netloc: str
    container: str
    name: str
    account: str | None = None
    endpoint_suffix: str | None = None

    @property
    def base(self) -> str:
        """The URI of the container, ending with ``/``; a blob's URI is ``base + name``."""
        return f"{self.scheme}://{self.netloc}/"

    def uri_of(self, name: str) -> str:
        """The URI, in this location's form, of the blob called ``name`` in the same container."""
        return self.base + name


def parse(uri: str) -> BlobLocation:
    """Split an Azure URI into its parts. The blob name is taken literally (no %-decoding).

    Raises:
        InvalidURIError: not one of the forms this backend reads, credentials in the URI (a
            user-info other than a container's name), or no container.
    """
    scheme, sep, rest = uri.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in SCHEMES:
        raise InvalidURIError(f"{redact(uri)} is not an Azure Blob Storage URI: use {_FORMS}")
    if has_credentials(uri):  # before splitting: a key or token may hold "/"
        raise InvalidURIError(
            f"{redact(uri)} carries credentials in the URI: Azure URIs take none; remove them and"
            " set AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN"
            " (or use Azure AD credentials)"
        )
    netloc, _, name = rest.partition("/")
    container, at, host = netloc.partition("@")
    account = suffix = None
    if at:
        account, suffix = _parse_host(host, uri)
    if not container:
        raise InvalidURIError(f"{redact(uri)} names no container: use {_FORMS}")
    return BlobLocation(scheme, netloc, container, name, account, suffix)


def require_blob(loc: BlobLocation, uri: str) -> None:
    """Raise InvalidURIError when the URI names a container rather than a blob."""
    if not loc.name:
        raise InvalidURIError(
            f"{redact(uri)} names a container, not a checkpoint object:"
            " add the object's name after the container, e.g. az://container/run/ckpt"
        )


def _parse_host(host: str, uri: str) -> tuple[str, str | None]:
    labels = host.lower().split(".")
    if len(labels) == 1 and labels[0]:
        return labels[0], None
    if len(labels) >= 3 and labels[0] and labels[1] in _SERVICE_LABELS and all(labels[2:]):
        return labels[0], ".".join(labels[2:])
    raise InvalidURIError(
        f"{redact(uri)}: {host!r} is not a storage account host; expected"
        " ACCOUNT.dfs.core.windows.net or ACCOUNT.blob.core.windows.net"
    )
