"""The plugin: registered through its entry point, boto3 imported only when an S3 URI is used."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from flyte_checkpoint_s3.store import S3Store

from flyte_checkpoint.storage.registry import Registry, store_for

from .helpers import BUCKET, key_of

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


def test_building_the_store_does_not_import_the_sdk_but_using_it_does() -> None:
    code = (
        "from flyte_checkpoint.storage.registry import store_for\n"
        "store = store_for('s3://bucket/key')\n"
        "import sys\n"
        "assert 'boto3' not in sys.modules, 'built'\n"
        "store.client\n"
    )
    assert _modules_after(code)["boto3"]


def test_entry_point_registers_s3_and_s3a() -> None:
    backend = Registry().backend_for("s3a://bucket/key")
    assert backend.name == "s3"
    assert backend.schemes == ("s3", "s3a")
    assert backend.source == "plugin"
    assert backend.distribution == "flyte-checkpoint-s3"


@pytest.mark.integration
def test_s3a_is_an_alias_of_s3(s3_env: dict[str, str], s3_root: str) -> None:
    store = store_for(s3_root)
    assert isinstance(store, S3Store)
    assert store_for(s3_root.replace("s3://", "s3a://", 1)) is store
    store.write_bytes(f"{s3_root}/a", b"via s3")
    alias = s3_root.replace("s3://", "s3a://", 1)
    assert store.read_bytes(f"{alias}/a") == b"via s3"
    assert list(store.list(alias)) == [f"{alias}/a"]
    assert list(store.list(s3_root)) == [f"{s3_root}/a"]


@pytest.mark.integration
@pytest.mark.parametrize(
    "name",
    ["with space/and  two", "unicode é ü 文字 🚀.bin", "percent%20not-decoded", "plus+and&amp?q=1#frag"],
)
def test_keys_are_used_as_written(make_s3_store: Any, raw_s3: Any, s3_root: str, name: str) -> None:
    store = make_s3_store()
    uri = f"{s3_root}/{name}"
    store.write_bytes(uri, name.encode())
    assert raw_s3.get_object(Bucket=BUCKET, Key=key_of(uri))["Body"].read() == name.encode()
    assert store.stat(uri) == len(name.encode())
    assert list(store.list(s3_root)) == [uri]
    assert store.read_bytes(uri) == name.encode()
