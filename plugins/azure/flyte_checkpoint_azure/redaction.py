"""The Azure secrets kept out of the HTTP libraries' log records (and out of messages).

urllib3 logs each request line at DEBUG with its full URL: with SAS authentication that URL
carries the token's signature. The Azure SDK's HTTP logging policy logs headers.
"""

from __future__ import annotations

from flyte_checkpoint.storage.kit.redaction import protect_logs

#: Loggers that may write a request's URL or headers as they are.
LOGGERS = (
    "urllib3.connectionpool",
    "urllib3.poolmanager",
    "urllib3.util.retry",
    "azure.core.pipeline.policies.http_logging_policy",
    "azure.storage.blob._shared.policies",
)
#: Group 1 is the field name kept; the rest of the match becomes ``<redacted>``.
PATTERNS = (
    r"(?i)(sig=)[^&\s'\"<]+",
    r"(?i)(AccountKey=)[^;\s'\"<]+",
    r"(?i)(SharedAccessSignature=)[^;\s'\"<]+",
    r"(?i)(SharedKey [^:\s]+:)[^\s'\"<]+",
    r"(?i)(Bearer )[^\s'\"<]+",
)


def install() -> None:
    """Scrub :data:`PATTERNS` from every record of :data:`LOGGERS` (idempotent)."""
    protect_logs(LOGGERS, PATTERNS)
