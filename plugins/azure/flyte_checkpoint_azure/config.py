"""Where an account's blobs are served and with which credential (no SDK imported here).

Credentials, first found wins:

1. constructor arguments: ``credential``, ``connection_string``, ``account_key``,
   ``sas_token``, ``client_secret`` (with ``tenant_id`` and ``client_id``);
2. ``AZURE_STORAGE_CONNECTION_STRING``;
3. ``AZURE_STORAGE_ACCOUNT_KEY`` (or ``AZURE_STORAGE_KEY``);
4. ``AZURE_STORAGE_SAS_TOKEN``;
5. ``AZURE_TENANT_ID`` + ``AZURE_CLIENT_ID`` + ``AZURE_CLIENT_SECRET`` (needs azure-identity);
6. ``DefaultAzureCredential``, when azure-identity is installed;
7. none: anonymous access (public containers only).

The account: the URI's own (``abfs://c@ACCOUNT.dfs.core.windows.net/...``), else the
``account_name`` argument, the connection string's ``AccountName``,
``AZURE_STORAGE_ACCOUNT_NAME`` (or ``AZURE_STORAGE_ACCOUNT``), or the one in the endpoint.
The endpoint: the ``blob_endpoint`` argument, the connection string's ``BlobEndpoint``,
``AZURE_STORAGE_BLOB_ENDPOINT``, else ``https://ACCOUNT.blob.core.windows.net``.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from flyte_checkpoint.errors import CheckpointPermissionError, StoreError
from flyte_checkpoint.forksafe import PerProcess
from flyte_checkpoint.uri import redact

from .locations import BlobLocation

DEFAULT_SUFFIX = "core.windows.net"
#: Azurite's published development account (``UseDevelopmentStorage=true``); not a secret.
DEV_ACCOUNT = "devstoreaccount1"
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
DEV_ENDPOINT = "http://127.0.0.1:10000/devstoreaccount1"

IDENTITY_HINT = "pip install 'flyte-checkpoint-azure[identity]'"
_MALFORMED = (
    "is malformed: expected Key=Value pairs separated by ';' with AccountName and AccountKey,"
    " or SharedAccessSignature and BlobEndpoint (its content is not shown, it holds secrets)"
)


def parse_connection_string(text: str, source: str = "the connection string") -> dict[str, str]:
    """The ``Key=Value`` pairs of a storage connection string, keys lower-cased.

    Raises:
        StoreError: not a connection string (the message never repeats its content).
    """
    parts: dict[str, str] = {}
    for item in text.split(";"):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise StoreError(f"{source} {_MALFORMED}")
        parts[key.strip().lower()] = value.strip()
    if not parts:
        raise StoreError(f"{source} {_MALFORMED}")
    return parts


def account_from_endpoint(endpoint: str) -> str | None:
    """The account an endpoint URL serves: the first path segment of a path-style URL
    (an IP address or ``localhost``, as with Azurite), else the first label of the host."""
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    if _is_local_host(host):
        segment = parts.path.strip("/").split("/")[0]
        return segment or None
    return host.split(".")[0] or None


def _is_local_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class AzureConfig:
    """The resolved configuration: the default account, its endpoint, and the credential.

    Secrets are kept in private attributes; ``repr`` and every message name only where a
    credential came from (``"AZURE_STORAGE_SAS_TOKEN"``), never its value.
    """

    def __init__(
        self,
        *,
        account_name: str | None = None,
        account_key: str | None = None,
        sas_token: str | None = None,
        connection_string: str | None = None,
        credential: Any = None,
        blob_endpoint: str | None = None,
        tenant_id: str | None = None,
        client_id: str | None = None,
        client_secret: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ

        def get(*names: str) -> str | None:
            for name in names:
                value = (env.get(name) or "").strip()
                if value:
                    return value
            return None

        self.account_name: str | None = None
        self.blob_endpoint: str | None = None
        self.endpoint_suffix = DEFAULT_SUFFIX
        self.protocol = "https"
        #: "credential", "key", "sas", "service-principal", "default" or "anonymous".
        self.kind = "anonymous"
        #: Where the credential came from, for messages (never the value).
        self.source = "no credentials"
        self._key: str | None = None
        self._sas: str | None = None
        self._credential: Any = credential
        self._sp: tuple[str, str, str] | None = None
        # Per process (it holds connections): a forked child makes its own.
        self._token_credential: PerProcess[Any] = PerProcess(self._make_token)
        self._secrets: list[str] = []

        endpoint_from_cs: str | None = None
        if credential is not None:
            self.kind, self.source = "credential", "the credential argument"
        elif connection_string:
            endpoint_from_cs = self._use_connection_string(
                connection_string, "the connection_string argument"
            )
        elif account_key:
            self._use_key(account_key, "the account_key argument")
        elif sas_token:
            self._use_sas(sas_token, "the sas_token argument")
        elif client_secret:
            self._use_service_principal(tenant_id, client_id, client_secret, "the client_secret argument")
        elif cs := get("AZURE_STORAGE_CONNECTION_STRING"):
            endpoint_from_cs = self._use_connection_string(cs, "AZURE_STORAGE_CONNECTION_STRING")
        elif key := get("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY"):
            self._use_key(key, "AZURE_STORAGE_ACCOUNT_KEY")
        elif sas := get("AZURE_STORAGE_SAS_TOKEN"):
            self._use_sas(sas, "AZURE_STORAGE_SAS_TOKEN")
        elif secret := get("AZURE_CLIENT_SECRET"):
            self._use_service_principal(
                get("AZURE_TENANT_ID"), get("AZURE_CLIENT_ID"), secret, "AZURE_CLIENT_SECRET"
            )
        elif importlib.util.find_spec("azure.identity") is not None:
            self.kind, self.source = "default", "DefaultAzureCredential"

        self.account_name = (
            account_name or self.account_name or get("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT")
        )
        self.blob_endpoint = blob_endpoint or endpoint_from_cs or get("AZURE_STORAGE_BLOB_ENDPOINT") or None
        if self.blob_endpoint:
            self.blob_endpoint = self.blob_endpoint.rstrip("/")
            if not self.account_name:
                self.account_name = account_from_endpoint(self.blob_endpoint)

    # -- the credential forms --------------------------------------------------

    def _use_key(self, key: str, source: str) -> None:
        self.kind, self.source, self._key = "key", source, key
        self._secrets.append(key)

    def _use_sas(self, sas: str, source: str) -> None:
        sas = sas.strip().lstrip("?")
        self.kind, self.source, self._sas = "sas", source, sas
        self._secrets.append(sas)
        for pair in sas.split("&"):
            name, _, value = pair.partition("=")
            if name == "sig" and value:
                self._secrets.append(value)

    def _use_service_principal(
        self, tenant: str | None, client: str | None, secret: str, source: str
    ) -> None:
        self._secrets.append(secret)
        if not tenant or not client:
            raise StoreError(
                f"{source} is set but AZURE_TENANT_ID and AZURE_CLIENT_ID (or the tenant_id and"
                " client_id arguments) are not: a service principal needs all three"
            )
        self.kind, self.source, self._sp = "service-principal", source, (tenant, client, secret)

    def _use_connection_string(self, text: str, source: str) -> str | None:
        self._secrets.append(text)
        parts = parse_connection_string(text, source)
        if parts.get("usedevelopmentstorage", "").lower() == "true":
            self.account_name = DEV_ACCOUNT
            self._use_key(DEV_KEY, source)
            return DEV_ENDPOINT
        self.account_name = parts.get("accountname") or None
        self.protocol = parts.get("defaultendpointsprotocol", "https").lower() or "https"
        self.endpoint_suffix = parts.get("endpointsuffix") or DEFAULT_SUFFIX
        if parts.get("accountkey"):
            self._use_key(parts["accountkey"], source)
        elif parts.get("sharedaccesssignature"):
            self._use_sas(parts["sharedaccesssignature"], source)
        else:
            self.kind, self.source = "anonymous", f"{source} (no key or SAS in it)"
        endpoint = parts.get("blobendpoint") or None
        if not endpoint and not self.account_name:
            raise StoreError(f"{source} {_MALFORMED}")
        return endpoint

    # -- per account -----------------------------------------------------------

    def secrets(self) -> tuple[str, ...]:
        """Every secret value this configuration holds, to scrub from messages."""
        return tuple(s for s in self._secrets if s)

    def account_for(self, loc: BlobLocation, uri: str) -> str:
        """The storage account serving ``loc``.

        Raises:
            StoreError: neither the URI nor the configuration names an account.
        """
        account = loc.account or self.account_name
        if not account:
            raise StoreError(
                f"no storage account for {redact(uri)}: set AZURE_STORAGE_ACCOUNT_NAME (or"
                " AZURE_STORAGE_CONNECTION_STRING), or name the account in the URI:"
                f" abfs://{loc.container}@ACCOUNT.dfs.core.windows.net/{loc.name}"
            )
        return account

    def endpoint_for(self, account: str, loc: BlobLocation) -> str:
        """The blob endpoint URL of ``account`` (the configured override for the configured account)."""
        if self.blob_endpoint and account == self.account_name:
            return self.blob_endpoint
        suffix = loc.endpoint_suffix or self.endpoint_suffix
        return f"{self.protocol}://{account}.blob.{suffix}"

    def credential_for(self, account: str, uri: str) -> Any:
        """The SDK credential for ``account`` (``None`` for anonymous access).

        Raises:
            CheckpointPermissionError: the configured key or SAS token belongs to another account.
            StoreError: a service principal or default credential is configured but
                azure-identity is not installed.
        """
        if self.kind == "credential":
            return self._credential
        if self.kind in ("key", "sas"):
            if self.account_name and account != self.account_name:
                raise CheckpointPermissionError(
                    f"{redact(uri)} is in storage account {account!r}, but the credential from"
                    f" {self.source} is for account {self.account_name!r}. Use a URI of that"
                    f" account (az://container/path), or an Azure AD identity that can reach"
                    f" both ({IDENTITY_HINT})."
                )
            from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential

            if self.kind == "key":
                return AzureNamedKeyCredential(account, self._key or "")
            return AzureSasCredential(self._sas or "")
        if self.kind in ("service-principal", "default"):
            return self._token()
        return None

    def _token(self) -> Any:
        return self._token_credential.get()

    def _make_token(self) -> Any:
        try:
            import azure.identity as identity
        except ImportError:
            raise StoreError(
                f"{self.source} asks for an Azure AD credential, but azure-identity is"
                f" not installed: {IDENTITY_HINT}"
            ) from None
        if self._sp is not None:
            tenant, client, secret = self._sp
            return identity.ClientSecretCredential(tenant, client, secret)
        return identity.DefaultAzureCredential()

    def close(self) -> None:
        """Close a token credential made here (it is made again on next use)."""
        cred = self._token_credential.take()
        close = getattr(cred, "close", None)
        if close is not None:
            close()

    def __repr__(self) -> str:
        return (
            f"AzureConfig(account={self.account_name!r}, endpoint={_show(self.blob_endpoint)},"
            f" credential={self.kind!r} from {self.source})"
        )


def _show(endpoint: str | None) -> str:
    return repr(redact(endpoint)) if endpoint else "None"
