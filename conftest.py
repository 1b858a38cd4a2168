"""Fixtures shared by the core's and the plugins' tests, and the suite's one rule on skips.

With ``CI=true`` (or ``1``/``yes``) nothing may skip: every skipped or xfailed test, and
every skipped module, is turned into a failure that names the reason (see
:func:`pytest_runtest_makereport`). ``pytest.skip``, ``pytest.importorskip``, ``skipif``
and ``xfail`` marks, and skips inside fixtures all end up there, so this one hook is the
whole enforcement. Outside CI a test whose dependency is missing skips (:func:`require`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ("pytester",)

ROOT = Path(__file__).resolve().parent
PLUGINS = ROOT / "plugins"
CI_VALUES = ("1", "true", "yes")


def in_ci() -> bool:
    """Whether the suite runs under CI (``CI`` is ``true``, ``1`` or ``yes``), where nothing may skip."""
    return os.environ.get("CI", "").strip().lower() in CI_VALUES


def require(condition: bool, why: str) -> None:
    """Skip the test when something it needs is missing; with CI=true the skip is a failure.

    Only for a missing *dependency* (a package, an executable). A server that is installed
    but does not start is a failure everywhere: call ``pytest.fail`` for that.
    """
    if not condition:
        pytest.skip(why)


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str | None:
    """Why ``report`` skipped or xfailed (or xpassed), or ``None`` when it did neither."""
    wasxfail = getattr(report, "wasxfail", None)
    if wasxfail is not None:
        what = "xfailed" if report.skipped else "is marked xfail (and passed)"
        return f"{what}: {wasxfail or 'no reason given'}"
    if not report.skipped:
        return None
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return f"skipped: {str(longrepr[2]).removeprefix('Skipped: ')}"
    return f"skipped: {longrepr}"


def _fail_if_skipped(report: pytest.TestReport | pytest.CollectReport) -> None:
    reason = _skip_reason(report)
    if reason is None:
        return
    if hasattr(report, "wasxfail"):
        del report.wasxfail
    report.outcome = "failed"
    report.longrepr = f"CI=true and this {reason}. CI must run every test: a skip or xfail is a failure here."


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """Under CI=true a skipped, xfailed or xpassed test (any phase) is reported as failed."""
    report = yield
    if in_ci():
        _fail_if_skipped(report)
    return report


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_make_collect_report(collector: pytest.Collector):
    """Under CI=true a module skipped at collection (``importorskip`` at module level) fails."""
    report = yield
    if in_ci():
        _fail_if_skipped(report)
    return report


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding freshly built wheels of the core and of every plugin in plugins/."""
    out = tmp_path_factory.mktemp("wheelhouse")
    projects = [ROOT, *sorted(p.parent for p in PLUGINS.glob("*/pyproject.toml"))]
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out)]
    subprocess.run(cmd + [str(p) for p in projects], check=True)
    return out


def make_venv(path: Path) -> Path:
    """Create an empty virtual environment; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return path / "bin" / "python"
