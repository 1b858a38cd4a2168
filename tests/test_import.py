"""``import flyte_checkpoint`` loads no entry point, no plugin registry and no cloud SDK."""

from __future__ import annotations

import json
import subprocess
import sys

SDKS = (
    "boto3",
    "botocore",
    "google.cloud",
    "azure",
    "pluggy",
    "importlib.metadata",
    "flyte_checkpoint_s3",
    "flyte_checkpoint_gcs",
    "flyte_checkpoint_azure",
    "flyte_checkpoint.testing",
    "asyncio",
    "tarfile",
    "flyte",
    "flyteplugins",
    "torch",
)

PROBE = f"""
import json, sys
import flyte_checkpoint as fc
before = {{m for m in {SDKS!r} if m in sys.modules}}
fc.Checkpoint("/tmp/x")
fc.ctx()
print(json.dumps(sorted(before)))
"""


def test_import_loads_no_sdk_and_no_entry_point():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_using_a_local_uri_imports_no_cloud_sdk(tmp_path):
    code = (
        "import sys, flyte_checkpoint as fc\n"
        f"cp = fc.Checkpoint({str(tmp_path / 'o')!r}); cp.save_sync(b'x')\n"
        "print([m for m in ('boto3', 'google.cloud.storage', 'azure.storage.blob') if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_registry_functions_are_real_functions_that_import_the_registry_when_called():
    """No module ``__getattr__`` (it would make a type checker accept any name, ``fc.Chekpoint``):
    ``register_store``, ``unregister_store`` and ``configure_store`` are plain functions, and
    reaching them loads no pluggy; calling one does."""
    code = (
        "import inspect, sys, flyte_checkpoint as fc\n"
        "names = ('register_store', 'unregister_store', 'configure_store')\n"
        "print([inspect.isfunction(getattr(fc, n)) for n in names], 'pluggy' in sys.modules,\n"
        "      hasattr(fc, '__getattr__'))\n"
        "fc.unregister_store('nothing')\n"
        "print('pluggy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[True, True, True] False False", "True"]
