"""GCS's secrets, kept out of SDK log lines and of the store's messages.

urllib3 logs each request line at DEBUG, and a resumable upload's URL carries its
``upload_id``: whoever holds it can append to or finish the upload, so it is a secret. Bearer
tokens (``ya29.``), signed-URL signatures and private keys of service-account files are too.
"""

from __future__ import annotations

import re

from flyte_checkpoint.storage.kit import protect_logs

#: The loggers that write GCS request URLs, headers or responses (a filter applies only to the
#: logger it is attached to, not to its children, so each is named).
LOGGERS = (
    "urllib3.connectionpool",
    "google.resumable_media._helpers",
    "google.cloud.storage._media._helpers",
    "google.auth.transport.requests",
    "google.auth.transport._http_client",
)

#: Group 1 is kept, the rest of the match becomes ``<redacted>``.
PATTERNS = (
    re.compile(r"(upload_id=)[^&\s'\"]+", re.I),
    re.compile(r"(access_token=)[^&\s'\"]+", re.I),
    re.compile(r"(X-Goog-(?:Signature|Credential)=)[^&\s'\"]+", re.I),
    re.compile(r"(Bearer\s+)[A-Za-z0-9._\-~+/=]+", re.I),
    re.compile(r"()ya29\.[A-Za-z0-9._\-]+"),
    re.compile(r"(-----BEGIN [A-Z ]*PRIVATE KEY-----).*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
)


def install() -> None:
    """Scrub :data:`PATTERNS` from :data:`LOGGERS` and from every kit ``scrub``. Idempotent."""
    protect_logs(LOGGERS, PATTERNS)
