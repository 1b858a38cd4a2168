"""Keep credentials out of botocore's and urllib3's DEBUG log lines.

botocore logs each request at DEBUG level with its headers: the ``Authorization`` header
names the access key id (``Credential=AKIA.../...``) and carries the request's signature,
and a session token travels in ``X-Amz-Security-Token``; presigned URLs carry the same in
their query string. A logging filter applies only to the logger it is attached to, so it is
attached to each logger that writes requests.
"""

from __future__ import annotations

import logging
import re
import threading

_PATTERNS = (
    re.compile(r"(?i)((?:X-Amz-)?Credential=)[^/&,\s'\"]+"),
    re.compile(r"(?i)((?:X-Amz-)?Signature=)[0-9a-f]+"),
    re.compile(r"(?i)(X-Amz-Security-Token['\"]?\s*[:=]\s*b?['\"]?)[^'\"&\s]+"),
)

#: Loggers that write requests (headers, URLs, signing details) as they are.
REQUEST_LOGGERS = (
    "botocore.endpoint",
    "botocore.auth",
    "botocore.hooks",
    "botocore.httpsession",
    "botocore.parsers",
    "botocore.retryhandler",
    "urllib3.connectionpool",
)


def scrub(text: str) -> str:
    """``text`` with access key ids, signatures and session tokens replaced."""
    for pattern in _PATTERNS:
        text = pattern.sub(r"\1<redacted>", text)
    return text


class _ScrubFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


_installed = False
_lock = threading.Lock()


def install() -> None:
    """Attach the scrubbing filter to :data:`REQUEST_LOGGERS` (once per process)."""
    global _installed
    with _lock:
        if _installed:
            return
        scrubber = _ScrubFilter()
        for name in REQUEST_LOGGERS:
            logging.getLogger(name).addFilter(scrubber)
        _installed = True
