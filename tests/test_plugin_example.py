"""CONTRIBUTING.md's worked example: installed as a real distribution, found by its entry point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "plugin_example"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, str]:
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(EXAMPLE),
        ],
        check=True,
    )
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]))


def test_entry_point_registers_the_backend_lazily(installed):
    code = (
        "import sys\n"
        "from flyte_checkpoint.storage.registry import get_registry\n"
        "b = get_registry().backend_for('folder://x/y')\n"
        "print(b.name, b.source, b.plugin, b.distribution, 'fc_example_store.store' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=installed, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["folder", "plugin", "folder", "fc-example-store", "False"]


def test_example_passes_the_conformance_suite(installed):
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE / "tests")],
        env=installed,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "failed" not in out.stdout and "skipped" not in out.stdout


def test_disabling_autoload_hides_the_plugin(installed):
    env = dict(installed, FLYTE_CHECKPOINT_DISABLE_PLUGIN_AUTOLOAD="1")
    code = "import flyte_checkpoint as fc\nfc.Checkpoint('/tmp/x', 'folder://a/b').load_sync()\n"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode != 0 and "no backend serves the 'folder' scheme" in out.stderr
