"""Keep secrets out of other libraries' log lines and out of a backend's own messages.

HTTP and cloud SDK loggers write requests as they are at DEBUG level: URLs with SAS
signatures, ``Authorization`` headers naming access keys, session tokens. A backend names
the loggers that do so and the patterns of its secrets with :func:`protect_logs`; one shared
filter then rewrites any matching record. (A logging filter applies only to the logger it
is attached to, not to that logger's children, so each logger is named.) A backend's own
messages go through :func:`scrub`, or :func:`scrub_values` when it also knows the secret values
it was configured with.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from urllib.parse import quote

from ...uri import redact_text
from ...util.forksafe import lock

REDACTED = "<redacted>"

_patterns: list[re.Pattern[str]] = []
_watched: set[str] = set()
_lock = lock()  # a forked child finds it free, whoever held it


def scrub(text: str) -> str:
    """``text`` with every URI's credentials and every registered secret pattern's value replaced.

    Each URI (``scheme://...``) loses its user-info (whatever characters its password holds);
    then each pattern's first group (the field name, e.g. ``sig=``) is kept and the rest of the
    match replaced by ``<redacted>``. Query values other than the patterns' are kept (an
    upload id or a part number helps debugging).
    """
    text = redact_text(text, query=False)
    for pattern in _patterns:
        text = pattern.sub(r"\1" + REDACTED, text)
    return text


#: Values shorter than this are not replaced by :func:`scrub_values`: replacing every "ab" in a
#: message would garble it, and a secret that short protects nothing anyway.
MIN_SECRET_LENGTH = 4


def scrub_values(text: str, values: Iterable[str | None]) -> str:
    r"""``text`` with each of ``values`` replaced by ``<redacted>``, then :func:`scrub`\ bed.

    Each value (an account key, a client secret, a SAS token: what a config's ``secrets()``
    returns) is replaced as written and percent-encoded, longest first so that a value holding
    another is replaced whole. ``None``, empty values and values shorter than
    :data:`MIN_SECRET_LENGTH` are ignored.
    """
    forms: set[str] = set()
    for value in values:
        if value and len(value) >= MIN_SECRET_LENGTH:
            forms.update((value, quote(value, safe="")))
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, REDACTED)
    return scrub(text)


class _ScrubFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken record is the logging module's business
            return True
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


_FILTER = _ScrubFilter()


def protect_logs(loggers: Iterable[str], patterns: Iterable[str | re.Pattern[str]]) -> None:
    """Scrub ``patterns`` (regular expressions whose group 1 is the field name to keep)
    from every record of ``loggers``. Idempotent; safe from several threads."""
    with _lock.get():
        for p in patterns:
            compiled = re.compile(p) if isinstance(p, str) else p
            if compiled.pattern not in {q.pattern for q in _patterns}:
                _patterns.append(compiled)
        for name in loggers:
            if name not in _watched:
                logging.getLogger(name).addFilter(_FILTER)
                _watched.add(name)
