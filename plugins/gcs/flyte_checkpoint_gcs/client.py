"""The SDK objects of one store: an authorized ``requests`` session and a ``storage.Client``.

Built on first use in each process (a forked child builds its own), with the config's timeouts,
``max_connections`` and SDK retries bounded by ``request_attempts`` (the core's retry policy is
the layer that decides). Credentials: the ``credentials`` setting, else none when ``anonymous``,
else Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud's
application-default login, the metadata server).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from google.api_core.retry import Retry

from flyte_checkpoint.storage.kit import PerProcess

from . import errors, redaction
from .config import GCSConfig

SCOPES = ("https://www.googleapis.com/auth/devstorage.read_write",)
DEFAULT_ENDPOINT = "https://storage.googleapis.com"
#: Backoff of the SDK's retries within one request (seconds).
INITIAL_DELAY, MAX_DELAY, MULTIPLIER = 0.5, 4.0, 2.0


class GCSClient:
    """One authorized session and one ``google.cloud.storage.Client`` per store and process."""

    def __init__(self, config: GCSConfig) -> None:
        self.config = config
        self._made: PerProcess[tuple[Any, Any]] = PerProcess(self._make)

    @property
    def session(self) -> Any:
        """The authorized ``requests`` session (built on first use).

        Raises:
            google.auth.exceptions.DefaultCredentialsError: no credentials can be found.
        """
        return self._made.get()[0]

    @property
    def storage(self) -> Any:
        """The ``google.cloud.storage.Client`` sending through :attr:`session`."""
        return self._made.get()[1]

    def _make(self) -> tuple[Any, Any]:
        from google.cloud import storage

        redaction.install()
        credentials, project = self._credentials()
        session = self.config.session or self._new_session(credentials)
        options = {"api_endpoint": self.config.endpoint_url} if self.config.endpoint_url else None
        client = storage.Client(
            project=project, credentials=credentials, _http=session, client_options=options
        )
        # google-cloud-storage >= 3.17 fetches a bucket's metadata from a background thread for
        # OpenTelemetry attributes; the store sends only the requests it asks for. (Every use
        # of the cache checks it is set; DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA is the
        # same switch for the whole process.)
        if getattr(client, "_bucket_metadata_cache", None) is not None:
            client._bucket_metadata_cache = None
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

    def _new_session(self, credentials: Any) -> Any:
        from google.auth.transport.requests import AuthorizedSession
        from requests.adapters import HTTPAdapter

        session = AuthorizedSession(credentials)
        adapter = HTTPAdapter(pool_connections=4, pool_maxsize=self.config.max_connections, max_retries=0)
        session.mount("https://", adapter)
        session.mount("http://", adapter)
        return session

    def close(self) -> None:
        """Drop this process's session and client (a session given in the config is not closed)."""
        made = self._made.take()
        if made is not None and made[0] is not self.config.session:
            made[0].close()

    # -- URLs ------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The service's base URL, without a trailing slash."""
        return (self.config.endpoint_url or DEFAULT_ENDPOINT).rstrip("/")

    def upload_url(self, bucket: str, upload_type: str) -> str:
        """The JSON API URL that starts an upload of type ``resumable`` or ``multipart``."""
        return f"{self.endpoint}/upload/storage/v1/b/{quote(bucket, safe='')}/o?uploadType={upload_type}"

    # -- the SDK's retries, bounded ------------------------------------------------------

    def retry(self) -> Any:
        """The ``google.api_core`` retry of one request: transient failures (:func:`errors.is_transient`)
        tried at most ``request_attempts`` times in all, within ``request_attempts x (connect_timeout
        + read_timeout)`` seconds; ``None`` (no retry) when ``request_attempts`` is 1."""
        cfg = self.config
        if cfg.request_attempts <= 1:
            return None
        return PerRequestRetry(
            _Transient(cfg.request_attempts),
            INITIAL_DELAY,
            MAX_DELAY,
            MULTIPLIER,
            timeout=cfg.request_attempts * (cfg.connect_timeout + cfg.read_timeout),
        )

    def upload_retry(self) -> Any:
        """The ``google.resumable_media`` retry strategy of one upload request: at most
        ``request_attempts`` tries in all."""
        from google.resumable_media import RetryStrategy

        return RetryStrategy(
            max_retries=self.config.request_attempts - 1, initial_delay=INITIAL_DELAY, max_sleep=MAX_DELAY
        )


class _Transient:
    """The predicate of :class:`PerRequestRetry`: transient failures, up to ``attempts`` tries."""

    def __init__(self, attempts: int) -> None:
        self.attempts = attempts

    def __call__(self, exc: BaseException) -> bool:
        return errors.is_transient(exc)


class PerRequestRetry(Retry):
    """api_core's ``Retry``, which bounds only time, also bounding the tries of each call it
    wraps to its predicate's ``attempts`` (the first included)."""

    def __call__(self, func: Callable[..., Any], on_error: Any = None) -> Callable[..., Any]:
        transient = self._predicate
        attempts = getattr(transient, "attempts", 1)

        @functools.wraps(func)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            tries = 1

            def allowed(exc: Exception) -> bool:
                nonlocal tries
                if tries >= attempts or not transient(exc):
                    return False
                tries += 1
                return True

            once = Retry(allowed, self._initial, self._maximum, self._multiplier, self._timeout)
            return once(func, on_error or self._on_error)(*args, **kwargs)

        return wrapped
