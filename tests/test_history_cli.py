"""``flyte-checkpoint history URI [--json]`` and ``ls`` hiding the sidecars (issue 37)."""

from __future__ import annotations

import json

import flyte_checkpoint as fc
from flyte_checkpoint.cli import EXIT_NO_CHECKPOINT, main


def _run(tmp_path) -> str:
    run = tmp_path / "run-1"
    cp = fc.Checkpoint(str(run / "0" / "ckpt"), keeps_generations=True)
    cp.save_sync(b"one", step=1, metrics={"loss": 0.5})
    cp.save_sync(b"two", step=2, metrics={"loss": float("nan")})
    fc.Checkpoint(str(run / "1" / "ckpt")).save_sync(b"three")
    return str(run)


def test_history_prints_newest_first(tmp_path, capsys):
    run = _run(tmp_path)
    assert main(["history", run + "/"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["ATTEMPT", "GEN", "STEP", "SIZE"]
    rows = [line.split() for line in lines[1:]]
    assert [(r[0], r[1], r[2]) for r in rows] == [("1", "0", "-"), ("0", "1", "2"), ("0", "0", "1")]
    assert "loss=NaN" in lines[2] and "loss=0.5" in lines[3]
    assert lines[3].endswith("ckpt.fcp-history/g00000000.obj")


def test_history_json(tmp_path, capsys):
    run = _run(tmp_path)
    assert main(["history", run + "/0/ckpt", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["count"] == 2
    first, second = doc["checkpoints"]
    assert (first["step"], first["metrics"], first["manifest"]) == (2, {"loss": "NaN"}, True)
    assert (second["generation"], second["size"], second["metrics"]) == (0, 3, {"loss": 0.5})
    assert second["digest"].startswith("crc32:")


def test_history_of_nothing_exits_3(tmp_path, capsys):
    assert main(["history", str(tmp_path / "none") + "/"]) == EXIT_NO_CHECKPOINT
    assert "no checkpoint at or under" in capsys.readouterr().err


def test_ls_hides_the_sidecars_unless_all(tmp_path, capsys):
    run = _run(tmp_path)
    assert main(["ls", run + "/"]) == 0
    shown = capsys.readouterr().out.split()
    assert [s.rsplit("run-1/", 1)[1] for s in shown] == ["0/ckpt", "1/ckpt"]
    assert main(["ls", "-a", run + "/"]) == 0
    assert any(".fcp-history/g00000000.obj" in s for s in capsys.readouterr().out.split())
