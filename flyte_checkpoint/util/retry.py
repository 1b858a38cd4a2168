"""Retries of whole store operations on transient errors: exponential backoff with jitter."""

from __future__ import annotations

import math
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from ..errors import TransientError
from .logs import logger

if TYPE_CHECKING:
    from .cancellation import Scope

T = TypeVar("T")


def _env_number(name: str, default: float, *, whole: bool = False, least: float = 0) -> float:
    """``$name`` as a number (``default`` when unset or blank).

    Raises:
        ValueError: the value is not a finite number of at least ``least`` (a whole one
            when ``whole``); the message names the variable and the default.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    kind = "a whole number" if whole else "a number of seconds"
    try:
        value = int(raw) if whole else float(raw)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value < least:
        raise ValueError(
            f"{name}={raw!r} is not valid: set it to {kind} of at least {least:g}"
            f" (default {default:g}), or unset it"
        )
    return value


class Clock:
    """Time as the retry policy sees it: one object, so a test can replace it whole (its
    pauses then advance a counter and nothing waits, cancellable or not)."""

    @staticmethod
    def monotonic() -> float:
        return time.monotonic()

    @staticmethod
    def pause(seconds: float, wake: threading.Event | None = None) -> None:
        """Wait ``seconds``, or until ``wake`` is set (a cancelled operation ends its back-off)."""
        if wake is None:
            time.sleep(seconds)
        else:
            wake.wait(seconds)


#: The clock every retry uses.
clock = Clock()


@dataclass(frozen=True)
class RetryPolicy:
    """How transient errors are retried.

    Attributes:
        attempts: tries in all, the first included (1 means no retry).
        base_delay: the first back-off, in seconds; each next one doubles.
        max_delay: the largest single back-off.
        total_timeout: no new try starts after this many seconds from the first.
    """

    attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 10.0
    total_timeout: float = 120.0

    @classmethod
    def from_env(cls) -> RetryPolicy:
        """Defaults, overridden by ``FLYTE_CHECKPOINT_RETRY_ATTEMPTS`` (a whole number, at
        least 1), ``..._BASE_DELAY``, ``..._MAX_DELAY`` and ``..._TOTAL_TIMEOUT`` (seconds, at
        least 0). Unset or blank variables keep the default.

        Raises:
            ValueError: a variable is set to anything else (the message names it).
        """
        d = cls()
        return cls(
            attempts=int(_env_number("FLYTE_CHECKPOINT_RETRY_ATTEMPTS", d.attempts, whole=True, least=1)),
            base_delay=_env_number("FLYTE_CHECKPOINT_RETRY_BASE_DELAY", d.base_delay),
            max_delay=_env_number("FLYTE_CHECKPOINT_RETRY_MAX_DELAY", d.max_delay),
            total_timeout=_env_number("FLYTE_CHECKPOINT_RETRY_TOTAL_TIMEOUT", d.total_timeout),
        )

    def delay(self, attempt: int) -> float:
        """The back-off before try ``attempt + 1`` (full jitter)."""
        return random.uniform(0, min(self.max_delay, self.base_delay * 2 ** (attempt - 1)))

    def call(self, fn: Callable[[], T], what: str, *, scope: Scope | None = None) -> T:
        """Run ``fn``, retrying :class:`TransientError`; anything else is raised at once.

        A cancelled ``scope`` ends a back-off early with its
        :class:`~flyte_checkpoint.errors.OperationCancelledError`.
        """
        start = clock.monotonic()
        attempt = 1
        while True:
            try:
                return fn()
            except TransientError as exc:
                elapsed = clock.monotonic() - start
                pause = self.delay(attempt)
                if attempt >= self.attempts or elapsed + pause > self.total_timeout:
                    raise _gave_up(exc, f"{what} failed after {attempt} tries in {elapsed:.1f}s") from exc
                logger().debug(
                    "%s: transient error (try %d of %d), retrying in %.2fs: %s",
                    what,
                    attempt,
                    self.attempts,
                    pause,
                    exc,
                )
                clock.pause(pause, None if scope is None else scope.event)
                if scope is not None:
                    scope.check()
                attempt += 1


def _gave_up(exc: TransientError, said: str) -> TransientError:
    """The error once the tries are spent: of ``exc``'s kind where it says something of its own (an
    object that saves kept replacing while it was read is not a failing store)."""
    from ..errors import ObjectReplacedError

    if isinstance(exc, ObjectReplacedError):
        return ObjectReplacedError(
            f"{said}: {exc} (saves kept replacing it while it was read: read it once they pause,"
            " or raise FLYTE_CHECKPOINT_RETRY_ATTEMPTS)"
        )
    return TransientError(
        f"{said}: {exc} (the store kept failing; retry later or raise FLYTE_CHECKPOINT_RETRY_ATTEMPTS)"
    )
