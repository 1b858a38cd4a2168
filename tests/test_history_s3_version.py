"""Proves (issue 37): on S3 (moto; CI=true), an object replaced by another writer (Flyte's own
save, a plain PUT) with as many bytes within the same second does not match its old manifest: the
listing's ETag is compared with the manifest's version (S3's LastModified has one-second
precision). So ``fc.history`` lists it without a manifest, ``load(fallback=True)`` returns it as
it is, and ``flyte-checkpoint gc PREFIX/ --keep-last 1`` leaves it (an object without a matching
manifest is never deleted).

The saves wait for the start of a second only to put both writes in one second (the case the
bug needed); the tests pass whatever the machine's speed.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import flyte_checkpoint as fc

server = pytest.importorskip("flyte_checkpoint_s3_tests.server")
boto3 = pytest.importorskip("boto3")


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    if not server.server_installed():
        pytest.skip("moto server not installed")
    env = dict(
        AWS_ACCESS_KEY_ID="AKIAADV37",
        AWS_SECRET_ACCESS_KEY="adv37",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
    )
    with server.run_server() as running:
        running.create_bucket("adv37")
        old = {k: os.environ.get(k) for k in [*env, "AWS_ENDPOINT_URL_S3"]}
        os.environ.update(env, AWS_ENDPOINT_URL_S3=running.endpoint)
        try:
            yield "s3://adv37"
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _setup(base: str) -> str:
    dest = base + "/r/0/ckpt"
    cp = fc.Checkpoint(dest, keeps_generations=True)
    cp.save_sync(b"OLD-STATE-1", step=1, metrics={"loss": 1.0})
    while time.time() % 1 > 0.3:  # the save and the foreign PUT within one second
        time.sleep(0.02)
    cp.save_sync(b"OLD-STATE-2", step=2, metrics={"loss": 0.5})
    bucket, key = dest[5:].split("/", 1)
    boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"]).put_object(
        Bucket=bucket, Key=key, Body=b"FLYTE-SAVE!"
    )  # same size (11 bytes), no manifest
    return dest


def test_history_does_not_give_the_foreign_object_the_old_manifest(s3: str) -> None:
    """Proves (issue 37): the replaced object is listed without the old manifest."""
    dest = _setup(s3 + "/h")
    entries = fc.history(dest)
    assert not entries[0].has_manifest, [(e.uri, e.step, e.has_manifest) for e in entries]


def test_fallback_load_returns_the_foreign_object(s3: str) -> None:
    """Proves (issue 37): a fallback load returns the other writer's valid object, not an older generation."""
    dest = _setup(s3 + "/fb")
    got = fc.Checkpoint(s3 + "/fb/r/1/ckpt", dest).load_sync(fallback=True)
    assert got is not None and got.read_bytes() == b"FLYTE-SAVE!"


def test_gc_does_not_delete_the_foreign_object(s3: str) -> None:
    """Proves (issue 37): gc of the run's prefix leaves the other writer's object."""
    dest = _setup(s3 + "/gc")
    fc.Checkpoint(s3 + "/gc/r/1/ckpt").save_sync(b"attempt 1", step=3)
    exe = Path(sys.executable).with_name("flyte-checkpoint")
    r = subprocess.run([str(exe), "gc", s3 + "/gc/r/", "--keep-last", "1"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    bucket, key = dest[5:].split("/", 1)
    body = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"]).get_object(
        Bucket=bucket, Key=key
    )
    assert body["Body"].read() == b"FLYTE-SAVE!", r.stdout
