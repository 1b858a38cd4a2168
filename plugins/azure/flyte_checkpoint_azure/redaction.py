"""Keep secrets out of text: messages built here, and log records of the HTTP libraries."""

from __future__ import annotations

from collections.abc import Iterable

from flyte_checkpoint import logscrub

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
    for secret in sorted((s for s in secrets if s and len(s) >= 4), key=len, reverse=True):
        text = text.replace(secret, "<redacted>")
    return logscrub.scrub(text)


def install_log_scrubbing() -> None:
    """Scrub SAS signatures, keys and tokens from :data:`URL_LOGGERS` (once per process).

    urllib3 logs each request line at DEBUG level with its full URL; with SAS
    authentication that URL carries the token's signature.
    """
    logscrub.protect(URL_LOGGERS, SECRET_PATTERNS)
