"""The suites fail every deliberately broken store, each with a message naming the broken promise.

The broken classes of classes.py run in a pytest of their own (``pytester``); its JUnit report
gives each test's outcome and message. The correct toy store passes the same tests
(test_toy_store.py), so each failure here is the break's doing.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The broken classes of classes.py, each a test class of the child pytest.
BROKEN = (
    "PartsInPlace",
    "ServerInPlace",
    "DeniedIsAbsent",
    "ServerErrorsIgnored",
    "MissingBucketIsAbsent",
    "LastPartDropped",
    "ShortReads",
    "PrefixAsFolder",
    "ReplaceDeletesFirst",
    "ViewKept",
    "StatErrorsAbsent",
    "UnquotedKeys",
    "UnsortedList",
    "PrefixIgnored",
    "FileInPlace",
)
RUN = "from tests.conformance.classes import *  # noqa: F403 - the fixtures too\n" + "".join(
    f"\n\nclass Test{name}(Broken{name}):  # noqa: F405\n    pass\n" for name in BROKEN
)

#: (class, test) -> words the failure's message must hold: the promise it names.
CAUGHT = {
    ("TestPartsInPlace", "test_interrupted_save_leaves_the_previous_object_whole"): (
        "promise broken: an interrupted save leaves the previous object whole"
    ),
    ("TestPartsInPlace", "test_interrupted_save_leaves_no_partial_object"): (
        "promise broken: an interrupted save leaves no partial object"
    ),
    ("TestPartsInPlace", "test_killed_save_leaves_the_previous_object_whole"): (
        "promise broken: a save killed midway leaves the previous object whole"
    ),
    ("TestServerInPlace", "test_killed_save_leaves_the_previous_object_whole"): (
        "promise broken: a save killed midway leaves the previous object whole"
    ),
    ("TestServerInPlace", "test_interrupted_save_leaves_the_previous_object_whole"): (
        "promise broken: an interrupted save leaves the previous object whole"
    ),
    ("TestDeniedIsAbsent", "test_denied_request_is_a_permission_error_never_no_checkpoint"): (
        "promise broken: a denied request (HTTP 403) raises CheckpointPermissionError"
    ),
    ("TestServerErrorsIgnored", "test_a_fault_at_any_request_of_a_save_loses_nothing"): (
        "promise broken: a save that returned normally did not commit; with HTTP 500 at the commit"
    ),
    ("TestMissingBucketIsAbsent", "test_a_missing_container_is_container_not_found_from_every_operation"): (
        "promise broken: an operation in a missing container raises ContainerNotFoundError, never None,"
        " an empty listing or a plain NotFoundError ('no checkpoint'); stat in toy://no-such-bucket/ckpt"
        " returned None"
    ),
    ("TestLastPartDropped", "test_round_trip_at_the_sizes_around_parts_and_ranges"): (
        "promise broken: an object is stored whole; after a write of 524288 bytes (exactly 2 x part_size"
        " 262144), stat says 262144 bytes"
    ),
    ("TestShortReads", "test_read_n_returns_n_bytes_across_range_boundaries"): (
        "promise broken: open_read's read(n) returns n bytes unless at the end; on an object of"
        " 2 x read_range_size 65536 + 1 bytes (131073), read(2) at offset 65535 returned 1"
    ),
    ("TestPrefixAsFolder", "test_list_keeps_siblings_that_share_a_name_prefix_apart"): (
        "promise broken: list(prefix) yields the objects whose URI starts with the prefix (a string, not"
        " a folder), sorted"
    ),
    ("TestReplaceDeletesFirst", "test_readers_see_one_whole_version_during_overwrites"): (
        "promise broken: an object being overwritten is never absent"
    ),
    ("TestViewKept", "test_round_trip_at_the_sizes_around_parts_and_ranges"): (
        "promise broken: an object reads back as written; after a write of 1 bytes (one byte), other"
        " bytes were read back"
    ),
    ("TestStatErrorsAbsent", "test_a_fault_at_any_request_of_a_read_is_raised_never_a_wrong_answer"): (
        "promise broken: a read under a fault raises or returns the right answer; with HTTP 429 at the"
        " only request like it"
    ),
    ("TestUnquotedKeys", "test_keys_with_spaces_unicode_and_percent_are_kept"): ("promise broken: a key is"),
    ("TestFileInPlace", "test_killed_save_leaves_the_previous_object_whole"): (
        "promise broken: a save killed midway leaves the previous object whole"
    ),
    ("TestUnsortedList", "test_list_by_prefix"): "promise broken: list yields URIs in sorted order",
    ("TestPrefixIgnored", "test_list_by_prefix"): (
        "promise broken: list(prefix) yields only the URIs that start with the prefix"
    ),
}


@pytest.fixture(scope="module")
def report(pytester_module: Path) -> dict[tuple[str, str], tuple[str, str]]:
    return _outcomes(pytester_module)


@pytest.fixture(scope="module")
def pytester_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs the broken classes' tests once, in a child pytest; returns its JUnit report."""
    return run_child(tmp_path_factory.mktemp("catches"), RUN, lambda module: _node_ids(module))


def run_child(where: Path, source: str, node_ids: Callable[[Path], list[str]]) -> Path:
    """Runs the tests ``node_ids(module)`` of the module ``source`` (written in ``where``) in a
    child pytest with this repository on its path; returns its JUnit report."""
    import os
    import subprocess
    import sys

    module = where / "test_broken.py"
    module.write_text(source)
    junit = where / "report.xml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            f"--junitxml={junit}",
            f"--rootdir={where}",
            "-c",
            os.devnull,
            *node_ids(module),
        ],
        cwd=where,
        env=env,
        capture_output=True,
        check=False,
        timeout=900,
    )
    assert junit.exists(), "the child pytest wrote no report"
    return junit


def _node_ids(module: Path) -> list[str]:
    """The tests to run: those of :data:`CAUGHT`, and every test of the prefix-ignoring store
    (see the test of its blame); the broken stores' other tests would only cost time."""
    ids = {f"{module}::{cls}::{test}" for cls, test in CAUGHT}
    return sorted(ids | {f"{module}::TestPrefixIgnored"})


def _outcomes(junit: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """(class, test) -> (outcome, message) from a JUnit report."""
    found = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        cls = case.get("classname", "").rsplit(".", 1)[-1]
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome, message = tag, f"{node.get('message', '')}\n{node.text or ''}"
                break
        found[cls, case.get("name", "")] = (outcome, message)
    return found


@pytest.mark.parametrize(
    ("case", "promise"), sorted(CAUGHT.items()), ids=lambda v: "::".join(v) if isinstance(v, tuple) else None
)
def test_the_suite_fails_the_broken_store_naming_the_promise(report, case, promise) -> None:
    assert case in report, f"{case} did not run: {sorted(report)}"
    outcome, message = report[case]
    assert outcome in ("failure", "error"), f"{case} {outcome}: the suite did not catch the broken store"
    assert promise in " ".join(message.split()), (
        f"{case}: the message does not name the promise: {message[-2000:]}"
    )


def test_a_store_that_ignores_lists_prefix_is_blamed_not_its_fixture(report) -> None:
    """Every test of the prefix-ignoring store that lists fails on ``list``, none on "store_root
    is not empty" (which would blame the backend author's fixture)."""
    broken = {
        name: message
        for (cls, name), (outcome, message) in report.items()
        if cls == "TestPrefixIgnored" and outcome != "passed"
    }
    assert len(broken) > 10, broken.keys()
    for name, message in broken.items():
        assert "list(prefix) yields only the URIs that start with the prefix" in " ".join(message.split()), (
            name,
            message[-1000:],
        )
        assert "is not empty" not in message, name
