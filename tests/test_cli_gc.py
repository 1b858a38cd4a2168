"""``flyte-checkpoint gc``: a retention policy applied from the manifests, with --dry-run."""

from __future__ import annotations

import json

from flyte_checkpoint.cli import main
from flyte_checkpoint.history.manifest import generation_uri, read_manifests
from flyte_checkpoint.storage.registry import store_for
from tests.test_retention_cleanup import series


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def make(tmp_path):
    dests = [str(tmp_path / f"run/{k}/ckpt") for k in range(3)]
    for k, d in enumerate(dests):
        series(store_for(d), d, 3, attempt=k, metrics={"loss": 3.0 - k})
    return dests


def test_dry_run_says_what_and_why_and_deletes_nothing(tmp_path, capsys):
    dests = make(tmp_path)
    code, out, _ = run(capsys, "gc", dests[2], "--keep-last", "2", "--dry-run")
    assert code == 0
    assert f"keep    {dests[2]}  (the newest committed; keep_last=2 (#1 newest))" in out
    assert f"delete {generation_uri(dests[2], 0)}" in out
    assert "would delete 1 checkpoint, kept 2 (keep_last=2)" in out
    assert len(read_manifests(store_for(dests[2]), dests[2])) == 3


def test_a_prefix_collects_every_attempt_of_the_run(tmp_path, capsys):
    dests = make(tmp_path)
    code, out, _ = run(capsys, "gc", str(tmp_path / "run") + "/", "--keep-last", "1", "--json")
    assert code == 0
    result = json.loads(out)
    assert result["ok"] and len(result["deleted"]) == 8 and not result["more"]
    assert [k["uri"] for k in result["kept"]] == [dests[2]]
    assert store_for(dests[0]).stat(dests[0]) is None
    assert store_for(dests[2]).stat(dests[2]) is not None
    code, out, _ = run(capsys, "gc", str(tmp_path / "run") + "/", "--keep-last", "1")
    assert code == 0 and "deleted 0 checkpoints, kept 1" in out  # idempotent


def test_keep_best_and_limit(tmp_path, capsys):
    make(tmp_path)
    code, out, _ = run(
        capsys, "gc", str(tmp_path / "run") + "/", "--keep-best", "loss:max:1", "--limit", "2", "--json"
    )
    result = json.loads(out)
    assert code == 0 and len(result["deleted"]) == 2 and result["more"]
    assert any("keep_best loss max" in why for k in result["kept"] for why in k["why"])


def test_usage_and_missing_history(tmp_path, capsys):
    make(tmp_path)
    code, _, err = run(capsys, "gc", str(tmp_path / "run") + "/")
    assert code == 2 and "gc needs a policy" in err
    code, _, err = run(capsys, "gc", str(tmp_path / "run") + "/", "--keep-best", "loss:low:1")
    assert code == 2 and "METRIC:min:K" in err
    code, _, err = run(capsys, "gc", str(tmp_path / "run") + "/", "--keep-last", "0")
    assert code == 2
    code, _, err = run(capsys, "gc", str(tmp_path / "elsewhere") + "/", "--keep-last", "1")
    assert code == 3 and "no checkpoint history" in err
