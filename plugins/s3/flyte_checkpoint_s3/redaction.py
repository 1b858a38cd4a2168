"""Keep S3 credentials out of botocore's and urllib3's DEBUG log lines.

botocore logs each request at DEBUG level with its headers: the ``Authorization`` header
names the access key id (``Credential=AKIA.../...``) and carries the request's signature,
and a session token travels in ``X-Amz-Security-Token``; presigned URLs carry the same in
their query string.
"""

from __future__ import annotations

from flyte_checkpoint.storage.kit.redaction import protect_logs

#: This cloud's secrets in a log line (group 1, the field's name, is kept).
PATTERNS = (
    r"(?i)((?:X-Amz-)?Credential=)[^/&,\s'\"]+",
    r"(?i)((?:X-Amz-)?Signature=)[0-9a-f]+",
    r"(?i)(X-Amz-Security-Token['\"]?\s*[:=]\s*b?['\"]?)[^'\"&\s]+",
)

#: Loggers that write requests (headers, URLs, signing details) as they are.
LOGGERS = (
    "botocore.endpoint",
    "botocore.auth",
    "botocore.hooks",
    "botocore.httpsession",
    "botocore.parsers",
    "botocore.retryhandler",
    "urllib3.connectionpool",
)


def install() -> None:
    """Scrub :data:`PATTERNS` from :data:`LOGGERS` (idempotent; the client calls it when built)."""
    protect_logs(LOGGERS, PATTERNS)
