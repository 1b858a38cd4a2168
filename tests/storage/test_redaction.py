"""The kit's redaction: the shared log filter for SDK log lines, and scrubbing messages of values."""

from __future__ import annotations

import logging

from flyte_checkpoint.storage.kit import redaction


def test_protected_logger_records_are_scrubbed(caplog):
    redaction.protect_logs(["fcp.test.http"], [r"(token=)[^&\s]+"])
    redaction.protect_logs(["fcp.test.http"], [r"(token=)[^&\s]+"])  # twice: one filter, one pattern
    log = logging.getLogger("fcp.test.http")
    assert log.filters.count(redaction._FILTER) == 1
    with caplog.at_level(logging.DEBUG, logger="fcp.test.http"):
        log.debug("GET /obj?token=%s&x=1 200", "s3cr3tvalue")
    assert "s3cr3tvalue" not in caplog.text
    assert "token=<redacted>&x=1" in caplog.text


def test_other_loggers_are_left_alone(caplog):
    redaction.protect_logs(["fcp.test.only"], [r"(key=)\w+"])
    with caplog.at_level(logging.DEBUG, logger="fcp.test.elsewhere"):
        logging.getLogger("fcp.test.elsewhere").debug("key=visible")
    assert "key=visible" in caplog.text
    assert redaction.scrub("key=hidden") == "key=<redacted>"


def test_uri_credentials_are_scrubbed_from_protected_records(caplog):
    """A URI's user-info goes whole, even when the password holds "/", "#" or "@" (the
    patterns of a backend cannot know where it ends)."""
    redaction.protect_logs(["fcp.test.uris"], [])
    with caplog.at_level(logging.DEBUG, logger="fcp.test.uris"):
        logging.getLogger("fcp.test.uris").debug("PUT %s done", "s3://AKIAKEYID:wJa/lr#X@U@bucket/k")
    assert "PUT s3://<redacted>@bucket/k done" in caplog.text
    assert "AKIAKEYID" not in caplog.text and "wJa" not in caplog.text


def test_scrub_values_replaces_each_value_as_written_and_percent_encoded():
    key, sas = "bG9uZ+2V/kZXk=", "sv=2024&sig=abc%2Fdef"
    text = f"auth failed with AccountKey {key} (in a URL: {'bG9uZ%2B2V%2FkZXk%3D'}) token {sas}"
    clean = redaction.scrub_values(text, [key, sas, None, ""])
    assert key not in clean and "bG9uZ%2B2V%2FkZXk%3D" not in clean and "abc" not in clean
    assert clean == "auth failed with AccountKey <redacted> (in a URL: <redacted>) token <redacted>"


def test_scrub_values_replaces_the_longest_value_whole_and_ignores_short_ones():
    """A value that holds another is replaced whole (not left as a redacted fragment plus the rest);
    values under MIN_SECRET_LENGTH would garble the message and are left."""
    clean = redaction.scrub_values("token abcdef-123456 ab", ["abcdef", "abcdef-123456", "ab"])
    assert clean == "token <redacted> ab"


def test_scrub_values_also_scrubs_uris_and_patterns():
    redaction.protect_logs([], [r"(fcptestsecret=)\w+"])
    clean = redaction.scrub_values("s3://AKIA:pw@bucket/k?fcptestsecret=xyz9", [])
    assert clean == "s3://<redacted>@bucket/k?fcptestsecret=<redacted>"
