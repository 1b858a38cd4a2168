"""The SDK clients: one per storage account and endpoint, per process, with bounded retries."""

from __future__ import annotations

import logging
from typing import Any

import requests
from azure.core.pipeline.transport import RequestsTransport
from azure.storage.blob import BlobClient, BlobServiceClient, ContainerClient, ExponentialRetry

from flyte_checkpoint.errors import CheckpointPermissionError, ConfigurationError, StoreError
from flyte_checkpoint.storage.kit import PerProcess, per_process_lock
from flyte_checkpoint.storage.kit.errors import chain
from flyte_checkpoint.storage.kit.locations import Location
from flyte_checkpoint.uri import redact

from . import redaction
from .config import IDENTITY_HINT, AzureConfig

log = logging.getLogger("flyte_checkpoint.azure")

#: The most bytes of one GET: a read range is fetched in requests of at most this, because
#: azure-storage-blob holds each answer twice (its chunks, then their join) before it is copied
#: into the reader's buffer; 8 ranges of 8MiB in flight would hold 128 MiB more. Restoring 96 MiB
#: peaks at about 180 MiB with 1MiB, 195 with 2MiB, 210 with whole ranges.
SDK_GET_SIZE = 1024 * 1024
#: The bytes the SDK reads from a socket at once: the storage SDK's own default (a transport
#: made here would otherwise get azure-core's 4 KiB).
DATA_BLOCK_SIZE = 256 * 1024


class AzureClient:
    """Builds and caches a ``BlobServiceClient`` per (account, endpoint), in each process.

    Each client has the configured timeouts, ``max_connections`` pooled connections and an
    SDK retry policy of ``request_attempts`` tries (the core's policy decides the rest).
    """

    def __init__(self, config: AzureConfig) -> None:
        self.config = config
        # Per process: a forked child makes its own clients rather than share the parent's
        # connections (the lock, too, may have been held by a parent's thread).
        self._lock = per_process_lock()
        self._services: PerProcess[dict[tuple[str, str], tuple[BlobServiceClient, requests.Session]]] = (
            PerProcess(dict)
        )
        self._token: PerProcess[Any] = PerProcess(self._make_token)
        redaction.install()

    def service(self, loc: Location) -> BlobServiceClient:
        """The service client for the account of ``loc``, made on first use.

        Raises:
            ConfigurationError, CheckpointPermissionError, StoreError: the configuration cannot
                reach that account.
        """
        account = self.config.account_for(loc)
        endpoint = self.config.endpoint_for(account, loc)
        services = self._services.get()
        with self._lock.get():
            entry = services.get((account, endpoint))
            if entry is None:
                entry = services[(account, endpoint)] = self._make(account, endpoint, loc)
            return entry[0]

    def blob(self, loc: Location) -> BlobClient:
        """A client for the blob ``loc`` names."""
        return self.service(loc).get_blob_client(loc.bucket, loc.key)

    def container(self, loc: Location) -> ContainerClient:
        """A client for the container ``loc`` names."""
        return self.service(loc).get_container_client(loc.bucket)

    def credential_for(self, account: str, loc: Location) -> Any:
        """The SDK credential for ``account`` (``None``: send none).

        Raises:
            CheckpointPermissionError: the configured key or SAS token is another account's.
            ConfigurationError: an Azure AD credential is configured but azure-identity is absent.
        """
        auth, config = self.config.auth, self.config
        if auth.kind == "credential":
            return config.credential
        if auth.kind in ("key", "sas"):
            own = config.default_account
            if own and account != own:
                raise CheckpointPermissionError(
                    f"{redact(loc.uri())} is in storage account {account!r}, but the credential from"
                    f" {auth.source} is for account {own!r}. Use a URI of that account"
                    f" (az://container/path), or an Azure AD identity that can reach both ({IDENTITY_HINT})."
                )
            from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential

            if auth.kind == "key":
                return AzureNamedKeyCredential(account, auth.key or "")
            return AzureSasCredential(auth.sas or "")
        if auth.kind in ("service-principal", "default"):
            return self._token.get()
        return None  # anonymous, or nothing configured: no credential, even with azure-identity

    def close(self) -> None:
        """Close every client, connection pool and token credential (made again on next use)."""
        with self._lock.get():
            services = self._services.take() or {}
        for service, session in services.values():
            try:
                service.close()
            finally:
                session.close()
        close = getattr(self._token.take(), "close", None)
        if close is not None:
            close()

    def _make_token(self) -> Any:
        auth = self.config.auth
        try:
            import azure.identity as identity
        except ImportError:
            raise ConfigurationError(
                f"{auth.source} asks for an Azure AD credential, but azure-identity is not installed:"
                f" {IDENTITY_HINT}"
            ) from None
        if auth.principal is not None:
            return identity.ClientSecretCredential(*auth.principal)
        return identity.DefaultAzureCredential()

    def _make(self, account: str, endpoint: str, loc: Location) -> tuple[BlobServiceClient, requests.Session]:
        c = self.config
        credential = self.credential_for(account, loc)
        session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=c.max_connections)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        transport = RequestsTransport(
            session=session,
            session_owner=False,
            connection_timeout=c.connect_timeout,
            read_timeout=c.read_timeout,
            connection_data_block_size=DATA_BLOCK_SIZE,
        )
        retry = ExponentialRetry(
            initial_backoff=1, increment_base=2, retry_total=c.request_attempts - 1, random_jitter_range=1
        )
        get_size = min(c.read_range_size, SDK_GET_SIZE)
        try:
            service = BlobServiceClient(
                account_url=endpoint,
                credential=credential,
                transport=transport,
                retry_policy=retry,
                max_single_put_size=c.part_size,
                max_block_size=c.part_size,
                max_single_get_size=get_size,
                max_chunk_get_size=get_size,
            )
        except Exception as exc:
            session.close()
            err = StoreError(
                f"cannot make an Azure client for {redact(loc.uri())} (endpoint {redact(endpoint)}):"
                f" {type(exc).__name__}: {exc}"
            )
            raise chain(err, exc, c.secrets()) from None
        log.debug("Azure client for %s at %s, credential from %s", account, redact(endpoint), c.auth.source)
        return service, session
