"""Keep secrets out of text: messages built here, and log records of the HTTP libraries."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable

_SECRET_PATTERNS = (
    re.compile(r"(?i)(sig=)[^&\s'\"<]+"),
    re.compile(r"(?i)(AccountKey=)[^;\s'\"<]+"),
    re.compile(r"(?i)(SharedAccessSignature=)[^;\s'\"<]+"),
    re.compile(r"(?i)(SharedKey [^:\s]+:)[^\s'\"<]+"),
    re.compile(r"(?i)(Bearer )[^\s'\"<]+"),
)

#: Loggers that may write a request's URL (with a SAS token's signature in it) as it is.
#: A logging filter applies only to the logger it is attached to, not to its children.
URL_LOGGERS = (
    "urllib3.connectionpool",
    "urllib3.poolmanager",
    "urllib3.util.retry",
    "azure.core.pipeline.policies.http_logging_policy",
    "azure.storage.blob._shared.policies",
)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every given secret value and every signature-like field replaced."""
    for secret in sorted((s for s in secrets if s and len(s) >= 4), key=len, reverse=True):
        text = text.replace(secret, "<redacted>")
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(r"\1<redacted>", text)
    return text


class ScrubSecretsFilter(logging.Filter):
    """Rewrites a log record whose message holds a SAS signature, key or token."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken record is the logging module's business
            return True
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


_installed = False
_lock = threading.Lock()


def install_log_scrubbing() -> None:
    """Attach :class:`ScrubSecretsFilter` to :data:`URL_LOGGERS` (once per process).

    urllib3 logs each request line at DEBUG level with its full URL; with SAS
    authentication that URL carries the token's signature.
    """
    global _installed
    with _lock:
        if _installed:
            return
        scrubber = ScrubSecretsFilter()
        for name in URL_LOGGERS:
            logging.getLogger(name).addFilter(scrubber)
        _installed = True
