"""Packaging: the entry point, the module set every plugin shares, lazy imports, and
``pip install 'flyte-checkpoint[gcs]'`` into an empty venv, then a save and load through it."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import flyte_checkpoint_gcs
import pytest

from .helpers import BUCKET
from .server import GCSServer

PACKAGE = Path(flyte_checkpoint_gcs.__file__).parent
#: The modules of every plugin (CONTRIBUTING: the plugin shape).
MODULES = ["__init__", "client", "config", "copies", "errors", "integrity", "plugin", "reader", "redaction"]
MODULES += ["shards", "store", "uris", "writer"]
TEST_MODULES = ["__init__", "conftest", "helpers", "server", "test_config", "test_conformance"]
TEST_MODULES += ["test_credentials", "test_errors", "test_integrity", "test_packaging", "test_pinned"]
TEST_MODULES += ["test_deletes", "test_history", "test_incremental", "test_plans", "test_reads"]
TEST_MODULES += ["test_sharded", "test_uris", "test_writes"]


def test_the_plugin_has_the_shared_module_names_and_is_typed() -> None:
    assert sorted(p.stem for p in PACKAGE.glob("*.py")) == sorted(MODULES)
    assert sorted(p.stem for p in Path(__file__).parent.glob("*.py")) == sorted(TEST_MODULES)
    assert (PACKAGE / "py.typed").is_file()


def test_importing_the_plugin_and_its_config_does_not_import_the_sdk() -> None:
    code = (
        "import sys, flyte_checkpoint_gcs, flyte_checkpoint_gcs.plugin, flyte_checkpoint_gcs.config\n"
        "from flyte_checkpoint.storage.registry import get_registry\n"
        "backend = get_registry().backend_for('gs://bucket/key')\n"
        "assert backend.name == 'gcs', backend\n"
        "sdk = sorted(m for m in sys.modules if m.startswith(('google', 'requests', 'urllib3')))\n"
        "assert not sdk, sdk\n"
        "print('clean')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "clean"


try:
    from conftest import make_venv
except ImportError:  # pragma: no cover - run outside the repository
    make_venv = None

SCRIPT = r"""
import os, sys, tempfile
from pathlib import Path
from flyte_checkpoint.checkpoint import Checkpoint
from flyte_checkpoint.storage.registry import get_registry

root = os.environ["FCP_ROOT"]
backend = get_registry().backend_for(root)
assert backend.distribution == "flyte-checkpoint-gcs", backend
import importlib.resources
assert importlib.resources.files("flyte_checkpoint_gcs").joinpath("py.typed").is_file()
payload = os.urandom(3 * 1024 * 1024 + 5)
with Checkpoint(root + "/bytes") as cp:
    cp.save_sync(payload)
with Checkpoint(root + "/next", root + "/bytes") as cp:
    assert cp.load_sync().read_bytes() == payload

src = Path(tempfile.mkdtemp()) / "state"
(src / "sub").mkdir(parents=True)
(src / "sub" / "w.bin").write_bytes(payload[:100000])
with Checkpoint(root + "/dir") as cp:
    cp.save_sync(src)
with Checkpoint(root + "/next2", root + "/dir") as cp:
    assert (cp.load_sync() / "sub" / "w.bin").read_bytes() == payload[:100000]
print("extra ok")
"""


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.network
def test_pip_install_extra_then_save_and_load(
    gcs_server: GCSServer, wheelhouse: Path, tmp_path: Path
) -> None:
    """Needs the package index: pip installs the extra's dependencies from it (marked
    ``network``; ``-m "not network"`` leaves it out of an offline run)."""
    assert make_venv is not None, "run from the repository: the root conftest provides make_venv"
    python = make_venv(tmp_path / "venv")
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--find-links", str(wheelhouse), "flyte-checkpoint[gcs]"],
        check=True,
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("FLYTE_CHECKPOINT_")},
        "STORAGE_EMULATOR_HOST": gcs_server.endpoint,
        "FLYTE_CHECKPOINT_GCS_PART_SIZE": "256KiB",
        "FCP_ROOT": f"gs://{BUCKET}/{uuid.uuid4().hex}",
    }
    out = subprocess.run([str(python), "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    assert out.stdout.strip() == "extra ok"
