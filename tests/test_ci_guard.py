"""The suite's rule on skips (root conftest.py): with CI=true a skip or xfail fails the run.

Each test runs pytest in a child process on a small test file, with the repository's own
conftest.py as that run's root conftest, under CI=true and with CI unset.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import in_ci

ROOT_CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

#: One test per way of skipping; each reason is distinctive so the output can be searched.
CASES = """
import pytest

from conftest import require


@pytest.fixture
def skipping_fixture():
    pytest.skip("reason-in-fixture")


def test_passes():
    pass


def test_skip_call():
    pytest.skip("reason-skip-call")


@pytest.mark.skip(reason="reason-skip-mark")
def test_skip_mark():
    pass


@pytest.mark.skipif(True, reason="reason-skipif-mark")
def test_skipif_mark():
    pass


def test_importorskip():
    pytest.importorskip("no_such_module_for_the_ci_guard", reason="reason-importorskip")


def test_skip_in_fixture(skipping_fixture):
    pass


def test_require():
    require(False, "reason-require")


@pytest.mark.xfail(reason="reason-xfail-mark")
def test_xfail_that_fails():
    assert False


@pytest.mark.xfail(reason="reason-xpass-mark")
def test_xfail_that_passes():
    pass


def test_xfail_call():
    pytest.xfail("reason-xfail-call")
"""

MODULE_SKIP = """
import pytest

pytest.importorskip("no_such_module_for_the_ci_guard", reason="reason-module-importorskip")


def test_never_collected():
    pass
"""

REASONS = [
    "reason-skip-call",
    "reason-skip-mark",
    "reason-skipif-mark",
    "reason-importorskip",
    "reason-in-fixture",
    "reason-require",
    "reason-xfail-mark",
    "reason-xpass-mark",
    "reason-xfail-call",
]


@pytest.fixture
def cases(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(ROOT_CONFTEST.read_text())
    pytester.makepyfile(test_cases=CASES)
    return pytester


def test_under_ci_every_skip_and_xfail_is_a_failure_naming_its_reason(
    cases: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("CI", "true")
    result = cases.runpytest_subprocess("-p", "no:cacheprovider")
    # skip marks and the fixture's skip act in the setup phase: pytest reports those as errors
    result.assert_outcomes(passed=1, failed=6, errors=3)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    for reason in REASONS:
        assert "CI=true and this " in out and reason in out, reason
    assert "CI must run every test" in out
    assert "skipped" not in result.parseoutcomes() and "xfailed" not in result.parseoutcomes()


def test_without_ci_skips_and_xfails_keep_their_outcomes(
    cases: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv("CI", raising=False)
    result = cases.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=6, xfailed=2, xpassed=1)
    assert result.ret == pytest.ExitCode.OK


@pytest.mark.parametrize(
    ("value", "ci"),
    [
        ("true", True),
        ("1", True),
        ("YES", True),
        (" True ", True),
        ("false", False),
        ("0", False),
        ("", False),
    ],
)
def test_which_values_of_ci_mean_ci(monkeypatch: pytest.MonkeyPatch, value: str, ci: bool):
    monkeypatch.setenv("CI", value)
    assert in_ci() is ci


def test_under_ci_a_module_skipped_at_collection_is_an_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    pytester.makeconftest(ROOT_CONFTEST.read_text())
    pytester.makepyfile(test_module_skip=MODULE_SKIP)
    monkeypatch.setenv("CI", "true")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    assert "reason-module-importorskip" in result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED  # "errors during collection" stops the run
    monkeypatch.delenv("CI")
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(skipped=1)


def test_every_test_that_pip_installs_dependencies_is_marked_network():
    """A test whose body runs ``pip install`` without ``--no-deps`` needs the package index: it
    must carry the ``network`` marker, so that ``-m "not network"`` gives an offline run."""
    import ast

    root = ROOT_CONFTEST.parent
    files = [*root.glob("tests/**/test_*.py"), *root.glob("plugins/*/*_tests/test_*.py")]
    found: dict[str, bool] = {}
    for path in files:
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
                continue
            body = ast.get_source_segment(source, node) or ""
            if '"pip", "install"' in body and '"--no-deps"' not in body:
                marks = [ast.unparse(d) for d in node.decorator_list]
                found[f"{path.relative_to(root)}::{node.name}"] = "pytest.mark.network" in marks
    assert len(found) == 3, found  # the [s3], [gcs] and [azure] extras into an empty venv
    assert all(found.values()), found
