"""The retry policy of loads and saves: its documented defaults, the backoff, and its variables."""

from __future__ import annotations

import threading

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import NotFoundError, TransientError
from flyte_checkpoint.util import retry
from flyte_checkpoint.util.retry import RetryPolicy

VARIABLES = (
    "FLYTE_CHECKPOINT_RETRY_ATTEMPTS",
    "FLYTE_CHECKPOINT_RETRY_BASE_DELAY",
    "FLYTE_CHECKPOINT_RETRY_MAX_DELAY",
    "FLYTE_CHECKPOINT_RETRY_TOTAL_TIMEOUT",
)


@pytest.fixture(autouse=True)
def unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


class Clock:
    """Stands in for the retry module's clock: pausing advances it, nothing waits (a pause a
    cancellation may end is recorded the same way)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def pause(self, seconds: float, wake: threading.Event | None = None) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(retry, "clock", c)
    monkeypatch.setattr(retry.random, "uniform", lambda low, high: high)  # the longest pause
    return c


def always_transient(calls: list[int]):
    def fn() -> None:
        calls.append(1)
        raise TransientError("the store is busy")

    return fn


def test_defaults_are_the_documented_ones():
    """README: 5 tries, 0.5 s doubling, at most 10 s, 120 s in all."""
    assert RetryPolicy.from_env() == RetryPolicy() == RetryPolicy(5, 0.5, 10.0, 120.0)


def test_default_backoff_doubles_from_half_a_second_up_to_ten(clock: Clock):
    policy = RetryPolicy(attempts=9)
    assert [policy.delay(n) for n in range(1, 9)] == [0.5, 1, 2, 4, 8, 10, 10, 10]
    calls: list[int] = []
    with pytest.raises(
        TransientError, match=r"failed after 5 tries .* raise FLYTE_CHECKPOINT_RETRY_ATTEMPTS"
    ):
        RetryPolicy.from_env().call(always_transient(calls), "save of x")
    assert len(calls) == 5 and clock.sleeps == [0.5, 1, 2, 4]


def test_no_try_starts_after_the_total_timeout(clock: Clock, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FLYTE_CHECKPOINT_RETRY_ATTEMPTS", "1000")
    calls: list[int] = []
    with pytest.raises(TransientError, match="failed after 16 tries"):
        RetryPolicy.from_env().call(always_transient(calls), "load of x")
    # 0.5 + 1 + 2 + 4 + 8 + 10 x 10 = 115.5 s of pauses; one more 10 s would pass 120 s
    assert len(calls) == 16 and sum(clock.sleeps) == 115.5


def test_only_transient_errors_are_retried(clock: Clock):
    calls: list[int] = []

    def missing() -> None:
        calls.append(1)
        raise NotFoundError("no object at x")

    with pytest.raises(NotFoundError):
        RetryPolicy().call(missing, "load of x")
    assert len(calls) == 1 and clock.sleeps == []


def test_variables_set_the_policy_and_blank_keeps_the_default(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FLYTE_CHECKPOINT_RETRY_ATTEMPTS", " 3 ")
    monkeypatch.setenv("FLYTE_CHECKPOINT_RETRY_BASE_DELAY", "0.25")
    monkeypatch.setenv("FLYTE_CHECKPOINT_RETRY_MAX_DELAY", "0")
    monkeypatch.setenv("FLYTE_CHECKPOINT_RETRY_TOTAL_TIMEOUT", "")
    assert RetryPolicy.from_env() == RetryPolicy(3, 0.25, 0.0, 120.0)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FLYTE_CHECKPOINT_RETRY_ATTEMPTS", "five"),
        ("FLYTE_CHECKPOINT_RETRY_ATTEMPTS", "0"),
        ("FLYTE_CHECKPOINT_RETRY_ATTEMPTS", "2.5"),
        ("FLYTE_CHECKPOINT_RETRY_BASE_DELAY", "-1"),
        ("FLYTE_CHECKPOINT_RETRY_BASE_DELAY", "1s"),
        ("FLYTE_CHECKPOINT_RETRY_MAX_DELAY", "nan"),
        ("FLYTE_CHECKPOINT_RETRY_TOTAL_TIMEOUT", "inf"),
    ],
)
def test_an_invalid_value_is_an_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path, name: str, value: str
):
    """Not silently the default: the Checkpoint (and so every load and save) refuses to start."""
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError) as info:
        RetryPolicy.from_env()
    message = str(info.value)
    assert message.startswith(f"{name}={value!r} is not valid: set it to ") and message.endswith(
        ", or unset it"
    )
    with pytest.raises(ValueError, match=name):
        fc.Checkpoint(str(tmp_path / "dest"))
