"""history/manifest.py: the manifest's JSON, its tolerance of unknown fields and its refusals."""

from __future__ import annotations

import json
import math
import os

import pytest

from flyte_checkpoint.history.manifest import (
    Manifest,
    check_metrics,
    check_step,
    generation_uri,
    manifest_uri,
    parse_sidecar_name,
    read_manifest,
    read_manifests,
    sidecar,
    write_manifest,
)
from flyte_checkpoint.storage.blobstore import ObjectInfo
from flyte_checkpoint.storage.registry import store_for


def _root() -> str:
    return f"memory://manifests-{os.urandom(4).hex()}"


def _m(dest: str, generation: int = 0, **kw) -> Manifest:
    return Manifest(generation=generation, object=dest, size=10, dest=dest, **kw)


def test_round_trip_keeps_every_field_and_nan():
    m = _m(
        "s3://b/k",
        3,
        run="r",
        attempt=2,
        step=100,
        metrics={"loss": float("nan"), "acc": 0.5, "up": float("inf"), "down": float("-inf")},
        time=1.5,
        digest="crc32:0000abcd",
        version='"etag"',
        modified="2026-01-01T00:00:00+00:00",
        made_from="s3://b/j#1",
        made_from_digest="crc32:00000001",
    )
    back = Manifest.from_json(m.to_json())
    assert math.isnan(back.metrics["loss"])
    assert back.metrics["up"] == math.inf and back.metrics["down"] == -math.inf
    assert {k: v for k, v in back.metrics.items() if k != "loss"} == {
        k: v for k, v in m.metrics.items() if k != "loss"
    }
    assert back.__dict__ | {"metrics": {}} == m.__dict__ | {"metrics": {}}
    json.loads(m.to_json())  # strict JSON: no bare NaN


def test_unknown_fields_are_ignored_and_defaults_fill_the_rest():
    data = {"generation": 1, "object": "memory://x", "size": 4, "future": {"a": 1}, "format": 9}
    m = Manifest.from_json(json.dumps(data))
    assert (m.generation, m.object, m.size, m.format, m.step, m.metrics, m.state) == (
        1,
        "memory://x",
        4,
        9,
        None,
        {},
        "committed",
    )


@pytest.mark.parametrize(
    "text",
    [
        b"\xff\xfe",
        "not json",
        "[1, 2]",
        '{"object": "x", "size": 1}',
        '{"generation": "1", "object": "x", "size": 1}',
        '{"generation": true, "object": "x", "size": 1}',
        '{"generation": 1, "object": 3, "size": 1}',
        '{"generation": 1, "object": "x", "size": -1}',
        '{"generation": 1, "object": "x", "size": 1, "metrics": {"a": "b"}}',
        '{"generation": 1, "object": "x", "size": 1, "metrics": [1]}',
        '{"generation": 1, "object": "x", "size": 1, "step": 1.5}',
        '{"generation": 1, "object": "x", "size": 1, "time": "now"}',
    ],
)
def test_what_is_not_a_manifest_raises_value_error(text):
    with pytest.raises(ValueError):
        Manifest.from_json(text)


def test_layout_names():
    assert sidecar("s3://b/run/0/_flytecheckpoints") == "s3://b/run/0/_flytecheckpoints.fcp-history/"
    assert manifest_uri("s3://b/x", 7) == "s3://b/x.fcp-history/g00000007.json"
    assert generation_uri("s3://b/x", 7) == "s3://b/x.fcp-history/g00000007.obj"
    assert parse_sidecar_name("s3://b/x.fcp-history/g00000007.obj") == ("s3://b/x", 7, "obj")
    assert parse_sidecar_name("s3://b/x.fcp-history/g123456789.json") == ("s3://b/x", 123456789, "json")
    assert parse_sidecar_name("s3://b/x.fcp-history/g7.json") is None
    assert parse_sidecar_name("s3://b/x.fcp-history/other") is None
    assert parse_sidecar_name("s3://b/x") is None


def test_write_and_read_back_skipping_what_does_not_parse(caplog):
    dest = f"{_root()}/ckpt"
    store = store_for(dest)
    for g in (2, 0, 1):
        write_manifest(store, _m(dest, g, step=g * 10))
    store.write_bytes(manifest_uri(dest, 3), b"{broken")
    store.write_bytes(generation_uri(dest, 0), b"old bytes")  # not a manifest: not read
    caplog.set_level("DEBUG", logger="flyte_checkpoint")
    found = read_manifests(store, dest)
    assert [(m.generation, m.step) for m in found] == [(0, 0), (1, 10), (2, 20)]
    assert any("g00000003.json" in r.getMessage() for r in caplog.records)
    assert read_manifest(store, manifest_uri(dest, 9)) is None


def test_matches_compares_size_and_listed_time():
    from datetime import datetime, timezone

    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    m = _m("memory://x", modified=when.isoformat())
    assert m.matches(ObjectInfo("memory://x", 10, when))
    assert not m.matches(ObjectInfo("memory://x", 11, when))
    assert not m.matches(ObjectInfo("memory://x", 10, datetime(2026, 1, 2, tzinfo=timezone.utc)))
    assert _m("memory://x").matches(ObjectInfo("memory://x", 10, when))  # nothing else to compare


def test_step_and_metrics_arguments_are_checked():
    assert check_step(None) is None and check_step(5) == 5
    for bad in (True, 1.5, "3"):
        with pytest.raises(TypeError):
            check_step(bad)
    assert check_metrics(None) == {}
    assert check_metrics({"loss": 1, "acc": 0.5}) == {"loss": 1.0, "acc": 0.5}
    for bad in ([1], {"": 1.0}, {1: 1.0}, {"loss": "low"}):
        with pytest.raises(TypeError):
            check_metrics(bad)
