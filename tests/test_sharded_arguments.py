"""The arguments of save_sharded and load_sharded (issue 36, items 2 to 4): a rank, world size or
timeout that is not one is refused with ConfigurationError on every rank, before any request, as
the environment variables that carry them are; load_sharded(own=True) restores only the files of
a rank that saved the object."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import ConfigurationError
from flyte_checkpoint.sharded import load_sharded, save_sharded
from flyte_checkpoint.sharded.api import TIMEOUT_ENV, shard_timeout
from flyte_checkpoint.testing.counting import CountingLatencyStore
from tests import shardranks as sr


def _ranks(tmp_path: Path, world: int = 2) -> list[Path]:
    folders = []
    for r in range(world):
        d = tmp_path / f"r{r}"
        d.mkdir()
        (d / f"only-rank-{r}.bin").write_bytes(bytes([r]) * 100)
        folders.append(d)
    return folders


def _threads(fn, n: int) -> dict[int, object]:
    """``fn(r)`` on a thread for each rank: "ok" or its error, by rank."""
    outcomes: dict[int, object] = {}

    def run(r: int) -> None:
        try:
            fn(r)
            outcomes[r] = "ok"
        except Exception as exc:  # returned to the test
            outcomes[r] = exc

    threads = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


@pytest.fixture
def saved(tmp_path: Path) -> str:
    """A sharded checkpoint of two ranks, each with a file of its own."""
    uri = str(tmp_path / "store" / "ckpt")
    assert sr.save_threads(uri, _ranks(tmp_path), job="args") == []
    return uri


@pytest.mark.parametrize("rank", [-1, -2, True, 1.0, "1"])
def test_load_own_refuses_a_rank_that_is_not_a_whole_number_of_0_or_more(
    tmp_path: Path, saved: str, rank: object
) -> None:
    """Proves: load_sharded(own=True, rank=-1) is refused, not taken as a Python index into the
    object's ranks (which restored the last rank's files as rank -1's)."""
    with (
        fc.Checkpoint(str(tmp_path / "next"), saved) as cp,
        pytest.raises(ConfigurationError, match=r"rank="),
    ):
        load_sharded(cp, own=True, rank=rank)  # type: ignore[arg-type]


@pytest.mark.parametrize("rank", [2, 7])
def test_load_own_refuses_a_rank_past_the_world_that_saved_naming_it(
    tmp_path: Path, saved: str, rank: int
) -> None:
    """Proves: a rank past the saved world (rank 2 of a 2-rank save) is refused, naming the world
    the checkpoint was saved with, instead of restoring an empty folder without complaint."""
    with (
        fc.Checkpoint(str(tmp_path / "next"), saved) as cp,
        pytest.raises(ConfigurationError, match=rf"rank {rank} is outside the world of 2 ranks that saved"),
    ):
        load_sharded(cp, own=True, rank=rank)


def test_load_own_still_restores_each_saved_ranks_files(tmp_path: Path, saved: str) -> None:
    """Proves: ranks 0 and 1 of the saved world get their own files (the checks refuse no rank that saved)."""
    for rank in range(2):
        with fc.Checkpoint(str(tmp_path / f"next{rank}"), saved) as cp:
            path = load_sharded(cp, own=True, rank=rank)
            assert path is not None and sorted(sr.tree(Path(path))) == [f"only-rank-{rank}.bin"]


@pytest.mark.parametrize("timeout", [math.nan, -1.0, math.inf, 1e309, -math.inf, True, "soon"])
def test_a_timeout_argument_that_is_not_a_finite_duration_is_refused(tmp_path: Path, timeout: object) -> None:
    """Proves: save_sharded(timeout=nan/-1/inf) is refused with ConfigurationError before any
    request (nan waited for a missing rank forever, -1 failed "within -1s", inf never ended)."""
    folder = _ranks(tmp_path, 1)[0]
    store = CountingLatencyStore()
    fc.register_store("argstimeout", ("argstimeout",), lambda: store)
    with pytest.raises(ConfigurationError, match=r"timeout="):
        save_sharded("argstimeout://b/ckpt", folder, rank=0, world_size=2, job="args", timeout=timeout)  # type: ignore[arg-type]
    assert store.total() == 0


def test_the_timeout_variable_is_held_to_the_same_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """Proves: the variable and the argument agree: a finite duration of 0 or more, else refused."""
    assert shard_timeout(90) == shard_timeout("90s") == 90.0
    assert shard_timeout(0) == 0.0
    for raw in ("nan", "-1", "inf", "1" * 400):
        monkeypatch.setenv(TIMEOUT_ENV, raw)
        with pytest.raises(ConfigurationError, match=TIMEOUT_ENV):
            shard_timeout()
    monkeypatch.setenv(TIMEOUT_ENV, "2m")
    assert shard_timeout() == 120.0


@pytest.mark.parametrize(
    ("label", "rank", "world"),
    [("world float", None, 2.0), ("world bool", None, True), ("rank bool", True, 2), ("rank float", 1.0, 2)],
)
def test_a_rank_or_world_size_that_is_not_an_int_is_refused_on_every_rank_before_any_request(
    tmp_path: Path, label: str, rank: object, world: object
) -> None:
    """Proves: world_size=2.0 or True, rank=True or 1.0 are refused with ConfigurationError on
    every rank and nothing is sent (2.0 raised a bare TypeError on rank 0 after it opened the save,
    True committed rank 0 alone)."""
    folders = _ranks(tmp_path)
    store = CountingLatencyStore()
    fc.register_store("argsworld", ("argsworld",), lambda: store)

    def call(r: int) -> None:
        given = r if rank is None else rank
        save_sharded("argsworld://b/ckpt", folders[r], rank=given, world_size=world, job="args", timeout=5)  # type: ignore[arg-type]

    outcomes = _threads(call, 2)
    assert all(isinstance(outcomes[r], ConfigurationError) for r in range(2)), (label, outcomes)
    assert store.total() == 0


class Index:
    """An integer type other than int (as numpy's int64): it has ``__index__``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __index__(self) -> int:
        return self.n


def test_integer_types_other_than_int_are_taken_as_their_value(tmp_path: Path) -> None:
    """Proves: a rank and world size of an integer type (numpy's int64 has ``__index__``) save
    and load as the ints they are, while True and 2.0 stay refused."""
    uri = str(tmp_path / "store" / "ckpt")
    folders = _ranks(tmp_path)

    def call(r: int) -> None:
        save_sharded(uri, folders[r], rank=Index(r), world_size=Index(2), job="args", timeout=60)  # type: ignore[arg-type]

    assert _threads(call, 2) == {0: "ok", 1: "ok"}
    with fc.Checkpoint(str(tmp_path / "next"), uri) as cp:
        path = load_sharded(cp, own=True, rank=Index(1))  # type: ignore[arg-type]
        assert path is not None and sorted(sr.tree(Path(path))) == ["only-rank-1.bin"]
