"""``make dist``'s check that the core and the plugins move in lockstep (``.ci/versions.py``)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / ".ci" / "versions.py"


def check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True, text=True, timeout=60)


def copy(tmp_path: Path) -> Path:
    dest = tmp_path / "repo"
    (dest / "flyte_checkpoint").mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", dest)
    shutil.copy(ROOT / "flyte_checkpoint" / "__init__.py", dest / "flyte_checkpoint")
    for pyproject in ROOT.glob("plugins/*/pyproject.toml"):
        (dest / pyproject.parent.relative_to(ROOT)).mkdir(parents=True)
        shutil.copy(pyproject, dest / pyproject.relative_to(ROOT))
    return dest


def test_the_repository_is_in_lockstep_and_make_dist_checks_it():
    done = check(ROOT)
    assert done.returncode == 0, done.stderr
    import flyte_checkpoint

    assert done.stdout.strip() == flyte_checkpoint.__version__
    assert "$(PY) .ci/versions.py" in (ROOT / "Makefile").read_text().split("\ndist:", 1)[1].split("\n\n")[0]


def test_a_plugin_or_an_extra_out_of_step_is_named(tmp_path):
    """Proves: a plugin bumped alone, an extra pinned to another version, and a plugin that
    requires an older core each fail the check with exit 1 and a line naming the file."""
    repo = copy(tmp_path)
    s3 = repo / "plugins" / "s3" / "pyproject.toml"
    s3.write_text(re.sub(r'^version = "[^"]+"', 'version = "0.2.0"', s3.read_text(), count=1, flags=re.M))
    core = repo / "pyproject.toml"
    core.write_text(
        core.read_text().replace(
            'gcs = ["flyte-checkpoint-gcs==0.1.0"]', 'gcs = ["flyte-checkpoint-gcs==0.0.9"]'
        )
    )
    azure = repo / "plugins" / "azure" / "pyproject.toml"
    azure.write_text(azure.read_text().replace('"flyte-checkpoint>=0.1.0,<0.2"', '"flyte-checkpoint>=0.0.1"'))
    done = check(repo)
    assert done.returncode == 1
    assert "plugins/s3/pyproject.toml: version '0.2.0', the core's is '0.1.0'" in done.stderr
    assert "extra [gcs] asks 'flyte-checkpoint-gcs==0.0.9', not ==0.1.0" in done.stderr
    assert "plugins/azure/pyproject.toml: requires" in done.stderr
