"""The load limits of a sharded save's union (issue 36, item 1): each rank's folder is checked
as it is packed, and rank 0 checks the union (every rank's report) before it commits, so that a
sharded save never commits what a load in the same environment refuses: refused on every rank
as a plain save of the union is (UnsupportedDataError), the previous checkpoint kept."""

from __future__ import annotations

from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import UnsupportedDataError
from flyte_checkpoint.format import tarstream as ts
from flyte_checkpoint.util.limits import MAX_MEMBERS_ENV, MAX_UNPACKED_ENV
from tests import shardranks as sr

#: Each rank's folder within the limit, the union over it: (variable, limit, each rank's files).
OVER = {
    "members": (MAX_MEMBERS_ENV, "10", {f"f{i}": 1 for i in range(7)}),
    "bytes": (MAX_UNPACKED_ENV, str(1 << 20), {"f.bin": 700_000}),
}


def _uri(tmp_path: Path, scheme: str, name: str) -> str:
    if scheme == "file":
        return str(tmp_path / "store" / name)
    return f"memory://limits-{tmp_path.name}/{name}"


def _folders(tmp_path: Path, files: dict[str, int], world: int = 2) -> list[Path]:
    folders = []
    for r in range(world):
        d = tmp_path / f"r{r}"
        d.mkdir()
        for name, size in files.items():
            (d / f"r{r}-{name}").write_bytes(bytes([r + 1]) * size)
        folders.append(d)
    return folders


def _save(uri: str, folders: list[Path]) -> list[object]:
    """Every rank as a thread of this process: "ok" or its error, by rank."""
    return sr.rank_outcomes(uri, folders, job="limits")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("scheme", ["file", "memory"])
@pytest.mark.parametrize("case", sorted(OVER))
def test_a_union_over_a_load_limit_is_refused_on_every_rank_and_keeps_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scheme: str, case: str
) -> None:
    """Proves: a sharded save whose ranks each fit FLYTE_CHECKPOINT_MAX_MEMBERS (or
    MAX_UNPACKED_BYTES) but whose union does not raises UnsupportedDataError on every rank, naming
    the setting, and commits nothing: the previous checkpoint still loads."""
    variable, limit, files = OVER[case]
    uri = _uri(tmp_path, scheme, "ckpt")
    good = tmp_path / "good"
    good.mkdir()
    (good / "state").write_bytes(b"the previous checkpoint")
    with fc.Checkpoint(uri) as cp:
        cp.save_sync(good)
    monkeypatch.setenv(variable, limit)
    folders = _folders(tmp_path, files)
    with fc.Checkpoint(_uri(tmp_path, scheme, "one")) as cp:
        cp.save_sync(folders[0])  # one rank's folder alone is within the limit
    outcomes = _save(uri, folders)
    assert all(isinstance(o, UnsupportedDataError) for o in outcomes), outcomes
    for o in outcomes:
        assert variable in str(o) and "the previous checkpoint" in str(o)
    assert str(outcomes[1]).startswith("rank 0 refused the union: ")
    assert sr.restore(uri, tmp_path) == {"state": b"the previous checkpoint"}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", ["members", "bytes"])
def test_the_union_limits_are_those_of_a_plain_save_of_the_union_to_the_member_and_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """Proves: the union is held to exactly the counts a plain save of the same tree is held to
    (and a load applies): at the smallest limit a plain save of the union accepts, the sharded
    save commits and loads; one less and both are refused."""
    files = {f"f{i}.bin": 700 for i in range(3)}  # one size: the last member's padding is the same
    folders = _folders(tmp_path, files)
    union = tmp_path / "union"
    union.mkdir()
    for folder in folders:
        for f in folder.iterdir():
            (union / f.name).write_bytes(f.read_bytes())
    if case == "members":
        variable, exact = MAX_MEMBERS_ENV, 6
    else:
        size = 700
        variable, exact = MAX_UNPACKED_ENV, 6 * (ts.BLOCK + size + ts.padding(size)) - ts.padding(size)
    for limit, accepted in ((exact, True), (exact - 1, False)):
        monkeypatch.setenv(variable, str(limit))
        plain = str(tmp_path / f"plain-{limit}")
        if accepted:
            with fc.Checkpoint(plain) as cp:
                cp.save_sync(union)
        else:
            with pytest.raises(UnsupportedDataError), fc.Checkpoint(plain) as cp:
                cp.save_sync(union)
        uri = str(tmp_path / "store" / f"sharded-{limit}")
        outcomes = _save(uri, folders)
        if accepted:
            assert outcomes == ["ok", "ok"]
            assert sr.restore(uri, tmp_path / f"load-{limit}") == sr.tree(union)
        else:
            assert all(isinstance(o, UnsupportedDataError) for o in outcomes), outcomes
            assert not Path(uri).exists()


@pytest.mark.timeout(180)
def test_a_folder_two_ranks_share_counts_as_one_member_for_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Proves: a folder that both ranks save is two members of the union's tar stream (a load
    counts both headers), so the union's member count includes it twice."""
    folders = []
    for r in range(2):
        d = tmp_path / f"r{r}" / "shared"
        d.mkdir(parents=True)
        (d / f"f{r}").write_bytes(b"x")
        folders.append(d.parent)
    monkeypatch.setenv(MAX_MEMBERS_ENV, "3")  # "shared/" twice and two files: 4
    outcomes = _save(str(tmp_path / "store" / "ckpt"), folders)
    assert all(isinstance(o, UnsupportedDataError) for o in outcomes), outcomes
    assert "holds 4 members" in str(outcomes[0])
    monkeypatch.setenv(MAX_MEMBERS_ENV, "4")
    assert _save(str(tmp_path / "store" / "ckpt"), folders) == ["ok", "ok"]
