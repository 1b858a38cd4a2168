"""The package: its entry point, boto3 imported only when an S3 URI is used, and
``pip install 'flyte-checkpoint[s3]'`` into an empty venv followed by a round trip on the server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from flyte_checkpoint.storage.registry import Registry

from .helpers import BUCKET

try:
    from conftest import make_venv
except ImportError:  # pragma: no cover - running from inside plugins/s3

    def make_venv(path: Path) -> Path:
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        return path / "bin" / "python"


SDK = ("boto3", "botocore", "s3transfer", "urllib3")


def _modules_after(code: str) -> dict[str, bool]:
    script = code + f"\nimport json, sys\nprint(json.dumps({{m: m in sys.modules for m in {SDK!r}}}))"
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_importing_the_plugin_does_not_import_the_sdk() -> None:
    loaded = _modules_after(
        "import flyte_checkpoint_s3, flyte_checkpoint_s3.plugin\n"
        "from flyte_checkpoint.storage.registry import get_registry\n"
        "assert 's3' in [b.name for b in get_registry().backends()]"
    )
    assert not any(loaded.values()), loaded


def test_the_package_is_typed() -> None:
    import flyte_checkpoint_s3

    assert (Path(flyte_checkpoint_s3.__file__).parent / "py.typed").is_file()


def test_building_the_store_does_not_import_the_sdk_but_using_it_does() -> None:
    code = (
        "from flyte_checkpoint.storage.registry import store_for\n"
        "store = store_for('s3://bucket/key')\n"
        "import sys\n"
        "assert 'boto3' not in sys.modules, 'built'\n"
        "store.client.get()\n"
    )
    assert _modules_after(code)["boto3"]


def test_entry_point_registers_s3_and_s3a() -> None:
    backend = Registry().backend_for("s3a://bucket/key")
    assert backend.name == "s3"
    assert backend.schemes == ("s3", "s3a")
    assert backend.source == "plugin"
    assert backend.distribution == "flyte-checkpoint-s3"


SCRIPT = textwrap.dedent(
    """
    import os, sys
    from flyte_checkpoint.checkpoint import Checkpoint
    from flyte_checkpoint.storage.registry import store_for

    root = os.environ["FCP_TEST_ROOT"]
    payload = os.urandom(300_000)
    with Checkpoint(root + "/attempt-0") as cp:
        cp.save_sync(payload)
    with Checkpoint(root + "/attempt-1", root + "/attempt-0") as cp:
        path = cp.load_sync()
        assert path is not None and path.read_bytes() == payload, "bytes differ"
    print(type(store_for(root)).__module__, "round trip ok")
    """
)


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.network
def test_pip_install_extra_then_save_and_load(
    wheelhouse: Path, s3_env: dict[str, str], raw_s3: object, tmp_path: Path
) -> None:
    """Needs the package index: pip installs the extra's dependencies from it (marked
    ``network``; ``-m "not network"`` leaves it out of an offline run)."""
    python = make_venv(tmp_path / "venv")
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--find-links", str(wheelhouse), "flyte-checkpoint[s3]"],
        check=True,
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    # Reach the server the way a Flyte task pod would.
    env.pop("AWS_ENDPOINT_URL_S3", None)
    env["FLYTE_AWS_ENDPOINT"] = s3_env["AWS_ENDPOINT_URL_S3"]
    env["FCP_TEST_ROOT"] = f"s3://{BUCKET}/{uuid.uuid4().hex}"
    out = subprocess.run(
        [str(python), "-c", SCRIPT], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "flyte_checkpoint_s3.store round trip ok" in out.stdout
    listing = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, check=True
    ).stdout
    assert "flyte-checkpoint-s3==0.1.0" in listing
    assert "flyte-checkpoint==0.1.0" in listing
    assert "moto" not in listing
