"""Keep secrets out of text: messages built here, and log records of the HTTP libraries."""

from __future__ import annotations

from collections.abc import Iterable

from flyte_checkpoint.storage.kit.redaction import protect_logs, scrub_values

SECRET_PATTERNS = (
    r"(?i)(sig=)[^&\s'\"<]+",
    r"(?i)(AccountKey=)[^;\s'\"<]+",
    r"(?i)(SharedAccessSignature=)[^;\s'\"<]+",
    r"(?i)(SharedKey [^:\s]+:)[^\s'\"<]+",
    r"(?i)(Bearer )[^\s'\"<]+",
)

#: Loggers that may write a request's URL (with a SAS token's signature in it) as it is.
URL_LOGGERS = (
    "urllib3.connectionpool",
    "urllib3.poolmanager",
    "urllib3.util.retry",
    "azure.core.pipeline.policies.http_logging_policy",
    "azure.storage.blob._shared.policies",
)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every given secret value and every signature-like field replaced."""
    install_log_scrubbing()
    return scrub_values(text, secrets)


def install_log_scrubbing() -> None:
    """Scrub SAS signatures, keys and tokens from :data:`URL_LOGGERS` (once per process).

    urllib3 logs each request line at DEBUG level with its full URL; with SAS
    authentication that URL carries the token's signature.
    """
    protect_logs(URL_LOGGERS, SECRET_PATTERNS)
