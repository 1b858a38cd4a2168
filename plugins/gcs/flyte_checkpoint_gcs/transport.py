"""The shared, lazily made HTTP session and ``google.cloud.storage.Client`` of a store.

Credentials: an explicit ``credentials`` object, else anonymous (emulators), else
Application Default Credentials (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's
application-default login, or the metadata server on Google Cloud).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote

import requests
from requests.adapters import HTTPAdapter

from flyte_checkpoint.forksafe import PerProcess

from .config import GcsConfig

T = TypeVar("T")

SCOPES = ("https://www.googleapis.com/auth/devstorage.read_write",)
DEFAULT_ENDPOINT = "https://storage.googleapis.com"
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class Transport:
    """One authorized ``requests`` session and one storage ``Client`` per store, shared by
    its threads, made on first use and dropped by :meth:`close`."""

    def __init__(self, config: GcsConfig, session: requests.Session | None = None) -> None:
        self.config = config
        self._given_session = session
        # Per process: a forked child builds its own rather than share the parent's connections.
        self._made: PerProcess[tuple[requests.Session, Any]] = PerProcess(self._make)

    # -- the SDK objects ---------------------------------------------------------

    @property
    def session(self) -> requests.Session:
        """The authorized HTTP session (built on first use).

        Raises:
            google.auth.exceptions.DefaultCredentialsError: no credentials can be found.
        """
        return self._made.get()[0]

    @property
    def client(self) -> Any:
        """The ``google.cloud.storage.Client`` sharing :attr:`session`."""
        return self._made.get()[1]

    def _make(self) -> tuple[requests.Session, Any]:
        from google.cloud import storage

        credentials, project = self._credentials()
        session = self._given_session or self._new_session(credentials)
        options = {"api_endpoint": self.config.endpoint} if self.config.endpoint else None
        client = storage.Client(
            project=project, credentials=credentials, _http=session, client_options=options
        )
        return session, client

    def _credentials(self) -> tuple[Any, str | None]:
        cfg = self.config
        if cfg.credentials is not None:
            return cfg.credentials, cfg.project
        if cfg.anonymous:
            from google.auth.credentials import AnonymousCredentials

            return AnonymousCredentials(), cfg.project
        import google.auth

        credentials, project = google.auth.default(scopes=list(SCOPES))
        return credentials, cfg.project or project

    @property
    def pool_size(self) -> int:
        """HTTP connections the session it builds keeps open to one host, at most."""
        return max(16, self.config.read_concurrency * 4)

    def _new_session(self, credentials: Any) -> requests.Session:
        from google.auth.transport.requests import AuthorizedSession

        session = AuthorizedSession(credentials)
        adapter = HTTPAdapter(pool_connections=4, pool_maxsize=self.pool_size, max_retries=0)
        session.mount("https://", adapter)
        session.mount("http://", adapter)
        return session

    def close(self) -> None:
        """Drop the session and client; they are made again on next use."""
        made = self._made.take()
        if made is not None and made[0] is not self._given_session:
            made[0].close()

    # -- URLs -----------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The service's base URL, without a trailing slash."""
        return (self.config.endpoint or DEFAULT_ENDPOINT).rstrip("/")

    def upload_url(self, bucket: str, upload_type: str) -> str:
        """The JSON API URL that starts an upload of type ``resumable`` or ``multipart``."""
        return f"{self.endpoint}/upload/storage/v1/b/{quote(bucket, safe='')}/o?uploadType={upload_type}"

    def media_url(self, bucket: str, name: str, generation: int | str | None = None) -> str:
        """The URL of the object's bytes (pinned to ``generation`` when given)."""
        url = (
            f"{self.endpoint}/download/storage/v1/b/{quote(bucket, safe='')}/o/"
            f"{quote(name, safe='')}?alt=media"
        )
        return url + (f"&generation={generation}" if generation else "")

    # -- retries ----------------------------------------------------------------------

    def api_retry(self) -> Any:
        """The ``google.api_core`` retry for metadata calls: the SDK's default predicate
        (429, 5xx, connection errors) within ``retry_timeout`` seconds; ``None`` if 0."""
        if self.config.retry_timeout <= 0:
            return None
        from google.cloud.storage.retry import DEFAULT_RETRY

        limit = getattr(DEFAULT_RETRY, "with_timeout", None) or DEFAULT_RETRY.with_deadline  # older api-core
        return limit(self.config.retry_timeout)

    def media_retry_strategy(self) -> Any:
        """The ``google.resumable_media`` retry strategy for upload requests."""
        from google.resumable_media import RetryStrategy

        if self.config.retry_timeout <= 0:
            return RetryStrategy(max_retries=0)
        return RetryStrategy(max_cumulative_retry=self.config.retry_timeout)

    def call_with_retries(self, fn: Callable[[], T], is_transient: Callable[[BaseException], bool]) -> T:
        """Run ``fn``, retrying it with backoff while it fails transiently, for at most
        ``retry_timeout`` seconds; the last failure is raised."""
        deadline = time.monotonic() + self.config.retry_timeout
        delay = 0.25
        while True:
            try:
                return fn()
            except Exception as exc:
                if not is_transient(exc) or time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 4.0)


class HTTPStatusError(Exception):
    """A raw media request answered with an unexpected status (``response`` is kept)."""

    def __init__(self, response: requests.Response, expected: str) -> None:
        super().__init__(f"HTTP {response.status_code}, expected {expected}")
        self.response = response


def is_transient(exc: BaseException) -> bool:
    """True for a failure worth retrying: 408/429/5xx, a dropped or timed-out connection."""
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int):
        return status in _TRANSIENT_STATUS
    if isinstance(
        exc,
        (
            requests.ConnectionError,
            requests.Timeout,
            ConnectionError,
            TimeoutError,
            requests.exceptions.ChunkedEncodingError,
        ),
    ):
        return True
    names = {f"{k.__module__}.{k.__name__}" for k in type(exc).__mro__}
    return bool(
        names
        & {
            "urllib3.exceptions.ProtocolError",
            "urllib3.exceptions.TimeoutError",
            "urllib3.exceptions.IncompleteRead",
            "http.client.IncompleteRead",
        }
    )


class ShortReadError(ConnectionError):
    """A GET returned fewer bytes than asked for before the end of the object."""
