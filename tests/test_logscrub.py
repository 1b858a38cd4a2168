"""The shared log filter backends use to keep secrets out of SDK log lines."""

from __future__ import annotations

import logging

from flyte_checkpoint import logscrub


def test_protected_logger_records_are_scrubbed(caplog):
    logscrub.protect(["fcp.test.http"], [r"(token=)[^&\s]+"])
    logscrub.protect(["fcp.test.http"], [r"(token=)[^&\s]+"])  # twice: one filter, one pattern
    log = logging.getLogger("fcp.test.http")
    assert log.filters.count(logscrub._FILTER) == 1
    with caplog.at_level(logging.DEBUG, logger="fcp.test.http"):
        log.debug("GET /obj?token=%s&x=1 200", "s3cr3tvalue")
    assert "s3cr3tvalue" not in caplog.text
    assert "token=<redacted>&x=1" in caplog.text


def test_other_loggers_are_left_alone(caplog):
    logscrub.protect(["fcp.test.only"], [r"(key=)\w+"])
    with caplog.at_level(logging.DEBUG, logger="fcp.test.elsewhere"):
        logging.getLogger("fcp.test.elsewhere").debug("key=visible")
    assert "key=visible" in caplog.text
    assert logscrub.scrub("key=hidden") == "key=<redacted>"


def test_uri_credentials_are_scrubbed_from_protected_records(caplog):
    """A URI's user-info goes whole, even when the password holds "/", "#" or "@" (the
    patterns of a backend cannot know where it ends)."""
    logscrub.protect(["fcp.test.uris"], [])
    with caplog.at_level(logging.DEBUG, logger="fcp.test.uris"):
        logging.getLogger("fcp.test.uris").debug("PUT %s done", "s3://AKIAKEYID:wJa/lr#X@U@bucket/k")
    assert "PUT s3://<redacted>@bucket/k done" in caplog.text
    assert "AKIAKEYID" not in caplog.text and "wJa" not in caplog.text
