"""Every wheel this repository builds says it is typed (PEP 561), so type checkers read its hints."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PACKAGES = {
    ".": "flyte_checkpoint",
    "plugins/s3": "flyte_checkpoint_s3",
    "plugins/gcs": "flyte_checkpoint_gcs",
    "plugins/azure": "flyte_checkpoint_azure",
    "examples/plugin_example": "fc_example_store",
}


def test_every_wheel_ships_py_typed(tmp_path):
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"),
            *("-w", str(tmp_path), *(str(ROOT / p) for p in PACKAGES)),
        ],
        check=True,
        capture_output=True,
    )
    wheels = sorted(tmp_path.glob("*.whl"))
    assert len(wheels) == len(PACKAGES), [w.name for w in wheels]
    typed = set()
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            typed |= {name.split("/")[0] for name in zf.namelist() if name.endswith("/py.typed")}
    assert typed == set(PACKAGES.values())
