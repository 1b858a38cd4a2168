"""SDK clients, made lazily, one per storage account, shared by all threads of a process."""

from __future__ import annotations

import logging

import requests
from azure.core.pipeline.transport import RequestsTransport
from azure.storage.blob import BlobClient, BlobServiceClient, ContainerClient, ExponentialRetry

from flyte_checkpoint.errors import CheckpointError, StoreError
from flyte_checkpoint.forksafe import PerProcess, lock
from flyte_checkpoint.uri import redact

from .config import AzureConfig
from .locations import BlobLocation
from .redaction import install_log_scrubbing, scrub
from .settings import AzureSettings

log = logging.getLogger("flyte_checkpoint.azure")


class Clients:
    """Builds and caches a ``BlobServiceClient`` per (account, endpoint).

    Each client has its own HTTP connection pool, sized for the configured concurrency,
    the configured connect/read timeouts and a modest SDK retry policy.
    """

    def __init__(self, config: AzureConfig, settings: AzureSettings) -> None:
        self.config = config
        self.settings = settings
        # Per process: a forked child makes its own clients rather than share the parent's
        # connections (the lock, too, may have been held by a parent's thread).
        self._lock = lock()
        self._services: PerProcess[dict[tuple[str, str], tuple[BlobServiceClient, requests.Session]]] = (
            PerProcess(dict)
        )
        install_log_scrubbing()

    def service(self, loc: BlobLocation, uri: str) -> BlobServiceClient:
        """The service client for the account of ``loc``, made on first use.

        Raises:
            StoreError, CheckpointPermissionError: the configuration cannot reach that account.
        """
        account = self.config.account_for(loc, uri)
        endpoint = self.config.endpoint_for(account, loc)
        key = (account, endpoint)
        services = self._services.get()
        with self._lock.get():
            entry = services.get(key)
            if entry is None:
                entry = self._make(account, endpoint, uri)
                services[key] = entry
            return entry[0]

    def blob(self, loc: BlobLocation, uri: str) -> BlobClient:
        """A client for the blob ``loc`` names."""
        return self.service(loc, uri).get_blob_client(loc.container, loc.name)

    def container(self, loc: BlobLocation, uri: str) -> ContainerClient:
        """A client for the container ``loc`` names."""
        return self.service(loc, uri).get_container_client(loc.container)

    @property
    def pool_size(self) -> int:
        """HTTP connections each client keeps open to its endpoint, at most."""
        s = self.settings
        return max(16, 2 * max(s.upload_concurrency, s.read_concurrency))

    def close(self) -> None:
        """Close every client and connection pool (they are made again on next use)."""
        with self._lock.get():
            services = self._services.take() or {}
        for service, session in services.values():
            try:
                service.close()
            finally:
                session.close()
        self.config.close()

    def _make(self, account: str, endpoint: str, uri: str) -> tuple[BlobServiceClient, requests.Session]:
        s = self.settings
        credential = self.config.credential_for(account, uri)
        session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=self.pool_size)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        transport = RequestsTransport(
            session=session,
            session_owner=False,
            connection_timeout=s.connect_timeout,
            read_timeout=s.read_timeout,
        )
        retry = ExponentialRetry(
            initial_backoff=1, increment_base=2, retry_total=s.retries, random_jitter_range=1
        )
        try:
            service = BlobServiceClient(
                account_url=endpoint,
                credential=credential,
                transport=transport,
                retry_policy=retry,
                max_single_put_size=max(s.block_size, 1),
                max_block_size=s.block_size,
                max_single_get_size=s.read_chunk_size,
                max_chunk_get_size=s.read_chunk_size,
            )
        except CheckpointError:
            session.close()
            raise
        except Exception as exc:
            session.close()
            raise StoreError(
                f"cannot make an Azure client for {redact(uri)} (endpoint {redact(endpoint)}):"
                f" {type(exc).__name__}: {scrub(str(exc), self.config.secrets())}"
            ) from None
        log.debug(
            "Azure client for account %s at %s, credential from %s",
            account, redact(endpoint), self.config.source,
        )  # fmt: skip
        return service, session
