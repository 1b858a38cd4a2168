"""Fixtures shared by the core's and the plugins' tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
PLUGINS = ROOT / "plugins"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, why: str) -> None:
    """Skip a test when something it needs is missing, but fail instead when CI=true."""
    if not condition:
        if IN_CI:
            pytest.fail(f"CI=true and {why}: CI must run every test", pytrace=False)
        pytest.skip(why)


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
