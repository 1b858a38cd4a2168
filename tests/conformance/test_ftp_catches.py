"""The suites fail every bug planted in the FTP store that loses data, naming the promise.

The planted classes of ftp_classes.py (one per bug of ftp_backend/planted.py) run in a pytest of
their own; its JUnit report gives each test's outcome and message. The correct FTP store passes
the same tests (test_ftp_store.py), and test_ftp_planted.py shows each bug's harm to users.
Planted bugs the suites pass (:data:`PASSED`) lose nothing through ``Checkpoint``: the reason
is given with each.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .ftp_backend.planted import PLANTED
from .test_suite_catches import _outcomes, run_child

#: (planted bug, test) -> words the failure's message must hold: the promise it names.
CAUGHT = {
    ("TempErrorsIgnored", "test_a_fault_at_any_request_of_a_save_loses_nothing"): (
        "promise broken: a save that returned normally did not commit; with HTTP 429 at"
    ),
    ("PrefixAsFolder", "test_list_keeps_siblings_that_share_a_name_prefix_apart"): (
        "promise broken: list(prefix) yields the objects whose URI starts with the prefix (a string, not"
        " a folder), sorted"
    ),
    ("HiddenListed", "test_killed_save_leaves_the_previous_object_whole"): (
        "promise broken: a killed save leaves no partial object"
    ),
    ("MissingBucketIsAbsent", "test_a_missing_container_is_container_not_found_from_every_operation"): (
        "promise broken: an operation in a missing container raises ContainerNotFoundError, never None,"
        " an empty listing or a plain NotFoundError ('no checkpoint'); stat in ftpstore://no-such-bucket/ckpt"
        " returned None"
    ),
    ("MkdirCreatesBucket", "test_a_missing_container_is_container_not_found_from_every_operation"): (
        "promise broken: an operation in a missing container raises ContainerNotFoundError"
    ),
    ("DeleteThenRename", "test_readers_see_one_whole_version_during_overwrites"): (
        "promise broken: an object being overwritten is never absent"
    ),
    ("DeleteThenRename", "test_a_fault_at_any_request_of_a_save_loses_nothing"): (
        "promise broken: a save that raised leaves the previous object (or the new one) whole; with HTTP 429"
    ),
    ("FixedTempName", "test_concurrent_writers_leave_one_whole_object"): "promise broken: racing writers",
    ("RangeEndInclusive", "test_read_range"): (
        "promise broken: read_range returns the object's bytes [start, start + length), fewer only at its end"
    ),
    ("DeniedIsAbsent", "test_a_denied_object_in_a_bucket_that_answers_is_a_permission_error"): (
        "promise broken: a denied request (HTTP 403) raises CheckpointPermissionError, never 'no checkpoint';"
        " stat returned None"
    ),
}
#: Planted bugs the suites pass, and why that loses nothing.
PASSED = {
    "EarlyEndAccepted": "the core compares the bytes a load reads with the object's size and retries a short"
    " read; only a caller of the store's own open_read gets short data",
    "PasswordShown": "a secret in a message loses no data; the suites do not know the store's secrets",
}
RUN = "from tests.conformance.ftp_classes import *  # noqa: F403 - the fixtures too\n" + "".join(
    f"\n\nclass Test{kind}(Planted{kind}):  # noqa: F405\n    pass\n" for kind in PLANTED
)


def test_every_planted_bug_is_caught_or_said_harmless() -> None:
    assert {kind for kind, _ in CAUGHT} | set(PASSED) == set(PLANTED)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], tuple[str, str]]:
    def node_ids(module: Path) -> list[str]:  # the catching tests only: the others cost time
        return sorted(f"{module}::Test{kind}::{test}" for kind, test in CAUGHT)

    return _outcomes(run_child(tmp_path_factory.mktemp("ftp-catches"), RUN, node_ids))


@pytest.mark.parametrize(
    ("case", "promise"), sorted(CAUGHT.items()), ids=lambda v: "::".join(v) if isinstance(v, tuple) else None
)
def test_the_suite_fails_the_planted_bug_naming_the_promise(report, case, promise) -> None:
    kind, test = case
    assert (f"Test{kind}", test) in report, f"{case} did not run: {sorted(report)}"
    outcome, message = report[f"Test{kind}", test]
    assert outcome in ("failure", "error"), f"{case} {outcome}: the suite did not catch the planted bug"
    assert promise in " ".join(message.split()), (
        f"{case}: the message does not name the promise: {message[-2000:]}"
    )
