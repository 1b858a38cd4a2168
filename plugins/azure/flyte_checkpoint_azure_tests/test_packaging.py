"""The plugin as users install it: lazy SDK import, the wheel, and the [azure] extra."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from .server import AzureServer

try:
    from conftest import make_venv
except ImportError:  # pragma: no cover - run from outside the repository

    def make_venv(path: Path) -> Path:
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        return path / "bin" / "python"


def _run(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, check=False
    )


def test_plugin_and_registry_listing_import_no_azure_sdk() -> None:
    done = _run(
        """
        import sys
        import flyte_checkpoint_azure, flyte_checkpoint_azure.plugin
        from flyte_checkpoint.storage.registry import get_registry
        backend = get_registry().backend_for("abfs://c@a.dfs.core.windows.net/x")
        assert backend.name == "azure", backend
        loaded = sorted(m for m in sys.modules if m == "azure" or m.startswith("azure."))
        assert not loaded, loaded
        """
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.integration
def test_key_configuration_never_imports_azure_identity(azure_server: AzureServer) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AZURE_")}
    env["AZURE_STORAGE_CONNECTION_STRING"] = azure_server.connection_string
    done = _run(
        """
        import sys
        from flyte_checkpoint.storage.registry import store_for
        store = store_for("az://fcp-tests/lazy")
        store.write_bytes("az://fcp-tests/lazy/x", b"x")
        assert store.read_bytes("az://fcp-tests/lazy/x") == b"x"
        assert "azure.storage.blob" in sys.modules
        assert "azure.identity" not in sys.modules
        """,
        env,
    )
    assert done.returncode == 0, done.stderr


SCRIPT = """
import os, pathlib, sys, tempfile
from flyte_checkpoint.checkpoint import Checkpoint
from flyte_checkpoint.storage.registry import get_registry

root = "az://fcp-tests/" + sys.argv[1]
backend = get_registry().backend_for(root)
assert backend.distribution == "flyte-checkpoint-azure", backend
with Checkpoint(root + "/a1") as cp:
    cp.save_sync(b"step-7")
with Checkpoint(root + "/a2", root + "/a1") as cp:
    assert cp.load_sync().read_bytes() == b"step-7"
    src = pathlib.Path(tempfile.mkdtemp()) / "state"
    src.mkdir()
    (src / "model.bin").write_bytes(os.urandom(3_000_000))
    cp.save_sync(src)
with Checkpoint(root + "/a3", root + "/a2") as cp:
    assert (cp.load_sync() / "model.bin").read_bytes() == (src / "model.bin").read_bytes()
try:
    import azure.identity
except ImportError:
    print("identity: absent")
print("ok")
"""


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.network
def test_pip_install_azure_extra_into_an_empty_venv(
    wheelhouse: Path, azure_server: AzureServer, tmp_path: Path, prefix: str
) -> None:
    """Needs the package index: pip installs the extra's dependencies from it (marked
    ``network``; ``-m "not network"`` leaves it out of an offline run)."""
    wheels = sorted(p.name for p in wheelhouse.glob("flyte_checkpoint_azure-*.whl"))
    assert wheels == ["flyte_checkpoint_azure-0.1.0-py3-none-any.whl"], wheels
    names = zipfile.ZipFile(wheelhouse / wheels[0]).namelist()
    assert "flyte_checkpoint_azure/plugin.py" in names
    assert not [n for n in names if n.startswith("flyte_checkpoint_azure_tests")]
    python = make_venv(tmp_path / "venv")
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "--find-links", str(wheelhouse), "flyte-checkpoint[azure]==0.1.0"],
        check=True,
    )  # fmt: skip
    script = tmp_path / "smoke.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "FLYTE_CHECKPOINT_"))}
    env["AZURE_STORAGE_CONNECTION_STRING"] = azure_server.connection_string
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [str(python), str(script), prefix], capture_output=True, text=True, env=env, cwd=tmp_path, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["identity:", "absent", "ok"]  # the extra needs no azure-identity
