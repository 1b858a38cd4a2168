"""Retention policies: which of a run's checkpoints to keep, decided from manifests alone.

:class:`Retention` is the policy; :func:`decide` (and :func:`select`, its set of kept URIs) is
the pure selection, given :class:`Candidate` entries (a checkpoint's URI and what its manifest
says). Nothing here reads or deletes anything: :mod:`flyte_checkpoint.history.cleanup` does.

A checkpoint is kept when any rule keeps it:

- ``keep_last=N``: the N newest;
- ``keep_best=(metric, "min" | "max", k)`` (or several such triples): the k best by that
  metric; a NaN, a missing or a non-numeric value is the worst, and ties go to the newer;
- ``keep_every_steps=S``: a milestone every S steps: for each window ``[n*S, (n+1)*S)`` of
  steps, the oldest checkpoint whose step is in it (the one at step ``n*S`` when saves land
  on multiples; the first after it when they do not); a checkpoint without a step is none;
- ``keep_every=timedelta``: the same with the manifests' times (windows of that length);
- ``keep_newer_than=timedelta``: those whose manifest time is within that of now.

Rules no policy overrides (a checkpoint they protect is kept, whatever the policy):

- the newest committed checkpoint of each run (among those with a manifest; all of them when
  several tie on (attempt, generation): ties are never broken by names);
- what the caller protects: the destination being written, the object this attempt loaded;
- anything newer than the save that triggered the clean-up (``trigger``);
- objects of another run (``run``), and objects without a committed manifest.

A run is what the manifests name (the runner's run); checkpoints whose manifests name no run
are each destination's own run (only a destination's own generations are weighed against each
other), unless the caller says the destinations it gives are one run's (``one_run``: a
checkpoint's clean-up of its destination and its source). Every rule is applied to each run on
its own.

"Newer" is the order of (attempt, generation) from the manifests
(:func:`~flyte_checkpoint.history.manifest.newness`, the order of ``fc.history`` and of a
fallback load: an unknown attempt after every known one), never names or times; times are used
only by ``keep_every`` and ``keep_newer_than``. Where candidates tie at a rule's limit (the
same order, the same metric), all of them are kept.
"""

from __future__ import annotations

import math
import time as _time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal, ParamSpec

from ..errors import ConfigurationError
from .manifest import newness

Mode = Literal["min", "max"]
BestRule = tuple[str, Mode, int]
P = ParamSpec("P")


@dataclass(frozen=True)
class Retention:
    """Which checkpoints to keep; see the module's doc. At least one rule must be given.

    Raises (on construction):
        ConfigurationError: a rule's value is of the wrong type or out of range, or no rule is given.
    """

    keep_last: int | None = None
    keep_best: BestRule | Sequence[BestRule] | None = None
    keep_every_steps: int | None = None
    keep_every: timedelta | None = None
    keep_newer_than: timedelta | None = None
    #: Inside a Flyte task, also delete earlier attempts' objects (the platform's folders);
    #: generations within an attempt are always the library's. Off by default.
    earlier_attempts: bool = False
    #: The normalized ``keep_best`` rules (set on construction).
    best: tuple[BestRule, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_count("keep_last", self.keep_last)
        _check_count("keep_every_steps", self.keep_every_steps)
        _check_span("keep_every", self.keep_every)
        _check_span("keep_newer_than", self.keep_newer_than)
        if not isinstance(self.earlier_attempts, bool):
            raise ConfigurationError(
                f"Retention(earlier_attempts={self.earlier_attempts!r}) must be True or False"
            )
        best = _best_rules(self.keep_best)
        object.__setattr__(self, "best", best)
        # one spelling (hashable, and equal whether given as one triple or a list of one)
        object.__setattr__(self, "keep_best", None if not best else best[0] if len(best) == 1 else best)
        if (
            self.keep_last is None
            and not self.best
            and self.keep_every_steps is None
            and self.keep_every is None
            and self.keep_newer_than is None
        ):
            raise ConfigurationError(
                "Retention() needs at least one rule: keep_last=N, keep_best=(metric, 'min' or"
                " 'max', k), keep_every_steps=S, keep_every=timedelta(...) or"
                " keep_newer_than=timedelta(...) (without a policy, nothing is deleted)"
            )

    @property
    def keeps_generations(self) -> bool:
        """Whether the policy may keep more than the newest checkpoint of an attempt (saves then
        keep the object they replace as a generation)."""
        only_last_one = (
            self.keep_last == 1
            and not self.best
            and self.keep_every_steps is None
            and self.keep_every is None
            and self.keep_newer_than is None
        )
        return not only_last_one

    def describe(self) -> str:
        """The rules, as a user would write them."""
        parts = []
        if self.keep_last is not None:
            parts.append(f"keep_last={self.keep_last}")
        for metric, mode, k in self.best:
            parts.append(f"keep_best=({metric!r}, {mode!r}, {k})")
        if self.keep_every_steps is not None:
            parts.append(f"keep_every_steps={self.keep_every_steps}")
        if self.keep_every is not None:
            parts.append(f"keep_every={self.keep_every}")
        if self.keep_newer_than is not None:
            parts.append(f"keep_newer_than={self.keep_newer_than}")
        return ", ".join(parts)


def _check_count(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"Retention({name}={value!r}) must be a whole number of at least 1")


def _check_span(name: str, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise ConfigurationError(
            f"Retention({name}={value!r}) must be a positive datetime.timedelta, e.g. timedelta(hours=1)"
        )


def _best_rules(value: object) -> tuple[BestRule, ...]:
    if value is None:
        return ()
    if isinstance(value, tuple) and len(value) == 3 and isinstance(value[0], str):
        rules: list[object] = [value]
    elif isinstance(value, (list, tuple)):
        rules = list(value)
    else:
        rules = [value]
    out: list[BestRule] = []
    for rule in rules:
        if not (isinstance(rule, (tuple, list)) and len(rule) == 3):
            raise ConfigurationError(
                f"Retention(keep_best={value!r}): each rule is (metric, 'min' or 'max', k),"
                " e.g. keep_best=('val_loss', 'min', 3)"
            )
        metric, mode, k = rule
        if not isinstance(metric, str) or not metric:
            raise ConfigurationError(
                f"Retention(keep_best=...): the metric {metric!r} must be a non-empty name"
            )
        if mode not in ("min", "max"):
            raise ConfigurationError(
                f"Retention(keep_best=...): the mode of {metric!r} is {mode!r}; use 'min' (lower is"
                " better, a loss) or 'max' (higher is better, an accuracy)"
            )
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigurationError(
                f"Retention(keep_best=...): k of {metric!r} is {k!r}; it must be a whole number of at least 1"
            )
        out.append((metric, mode, k))
    return tuple(out)


@dataclass(frozen=True)
class Candidate:
    """One checkpoint as the selection sees it (from its manifest; see
    :mod:`flyte_checkpoint.history.manifest`).

    Attributes:
        uri: the object's URI (its identity).
        attempt: the attempt that wrote it (``None``: unknown, after every known attempt).
        generation: its generation within the attempt.
        step: the training step the save gave, if any.
        metrics: the save's metrics.
        time: the manifest's time (unix seconds); used only by the time rules.
        run: the run that wrote it.
        managed: it has a committed manifest (objects without one are never deleted).
        dest: the destination it was saved to (a run of its own when ``run`` is None).
    """

    uri: str
    attempt: int | None
    generation: int
    step: int | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    time: float = 0.0
    run: str | None = None
    managed: bool = True
    dest: str | None = None

    @property
    def order(self) -> tuple[int, int]:
        """The order of commits: (attempt, generation); higher is newer (see
        :func:`~flyte_checkpoint.history.manifest.newness`)."""
        return newness(self.attempt, self.generation)


@dataclass(frozen=True)
class Decision:
    """What the selection decided for one candidate: kept when ``reasons`` is not empty."""

    candidate: Candidate
    reasons: tuple[str, ...]

    @property
    def keep(self) -> bool:
        return bool(self.reasons)


def metric_value(candidate: Candidate, metric: str, mode: Mode) -> float | None:
    """The metric as a float, or ``None`` when missing, NaN or not a number (the worst)."""
    value = candidate.metrics.get(metric)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _best_order(candidate: Candidate, metric: str, mode: Mode) -> tuple[int, float, tuple[int, int]]:
    value = metric_value(candidate, metric, mode)
    if value is None:
        return (1, 0.0, _neg(candidate.order))
    return (0, value if mode == "min" else -value, _neg(candidate.order))


def _neg(order: tuple[int, int]) -> tuple[int, int]:
    return (-order[0], -order[1])


def _newest_first(candidates: Iterable[Candidate]) -> list[Candidate]:
    # the URI only makes the listing's order stable; no rule breaks a tie by it
    return sorted(candidates, key=lambda c: (_neg(c.order), c.uri))


def _run_of(c: Candidate, one_run: bool) -> tuple[str, str | None]:
    if c.run is not None:
        return ("run", c.run)
    return ("dest", None if one_run else c.dest)


def decide(
    candidates: Iterable[Candidate],
    policy: Retention,
    protected: Iterable[str] = (),
    *,
    run: str | None = None,
    trigger: tuple[int, int] | None = None,
    now: float | None = None,
    infer_run: bool = True,
    one_run: bool = False,
) -> list[Decision]:
    """Each candidate with why it is kept (no reason: delete it), newest first.

    Args:
        candidates: the checkpoints found (of any run; with or without a manifest).
        policy: the rules.
        protected: URIs kept whatever the policy: the destination being written, the object
            loaded.
        run: the run cleaned up; candidates of another run are kept (untouched). ``None`` with
            ``infer_run``: the run of the newest managed candidate that names one (every
            candidate when none does); without ``infer_run``, ``None`` is the checkpoints whose
            manifests name no run.
        trigger: the (attempt, generation) of the save that triggered the clean-up; newer
            candidates are kept.
        now: unix seconds for ``keep_newer_than`` (default: the clock).
        one_run: candidates naming no run are one run (the caller's destinations are one
            run's), not one run per destination.
    """
    everything = _newest_first(candidates)
    any_run = False
    if run is None and infer_run:
        runs = [c.run for c in everything if c.managed and c.run is not None]
        run = runs[0] if runs else None
        any_run = run is None
    guarded = set(protected)
    reasons: dict[str, list[str]] = {c.uri: [] for c in everything}
    groups: dict[tuple[str, str | None], list[Candidate]] = {}
    for c in everything:
        if not c.managed:
            reasons[c.uri].append("no committed manifest")
        elif not any_run and c.run != run:
            reasons[c.uri].append(f"another run ({c.run})")
        else:
            groups.setdefault(_run_of(c, one_run), []).append(c)
    for c in everything:
        if c.uri in guarded:
            reasons[c.uri].append("protected (being written or loaded)")
    for eligible in groups.values():  # newest first; each run on its own
        _apply(eligible, policy, reasons, trigger, now)
    return [Decision(c, tuple(reasons[c.uri])) for c in everything]


def _apply(
    eligible: list[Candidate],
    policy: Retention,
    reasons: dict[str, list[str]],
    trigger: tuple[int, int] | None,
    now: float | None,
) -> None:
    """The rules applied to one run's managed candidates (newest first)."""
    newest = eligible[0].order
    for c in eligible:
        if c.order == newest:
            reasons[c.uri].append("the newest committed")
    if trigger is not None:
        for c in eligible:
            if c.order > trigger:
                reasons[c.uri].append("newer than the save that triggered the clean-up")
    if policy.keep_last is not None:
        limit = eligible[min(policy.keep_last, len(eligible)) - 1].order
        for i, c in enumerate(c for c in eligible if c.order >= limit):
            reasons[c.uri].append(f"keep_last={policy.keep_last} (#{i + 1} newest)")
    for metric, mode, k in policy.best:
        ranked = sorted(eligible, key=lambda c, m=metric, d=mode: _best_order(c, m, d))  # type: ignore[misc]
        worst = _best_order(ranked[min(k, len(ranked)) - 1], metric, mode)
        for i, c in enumerate(c for c in ranked if _best_order(c, metric, mode) <= worst):
            value = metric_value(c, metric, mode)
            shown = "missing/NaN" if value is None else f"{value:g}"
            reasons[c.uri].append(f"keep_best {metric} {mode} #{i + 1} of {k} ({shown})")
    if policy.keep_every_steps is not None:
        every = policy.keep_every_steps
        for window, firsts in _first_in_windows(eligible, lambda c: c.step, every).items():
            for c in firsts:
                reasons[c.uri].append(f"keep_every_steps={every} (first at step >= {window * every})")
    if policy.keep_every is not None:
        span = policy.keep_every.total_seconds()
        for window, firsts in _first_in_windows(eligible, lambda c: c.time, span).items():
            for c in firsts:
                reasons[c.uri].append(f"keep_every={policy.keep_every} (first in window {window})")
    if policy.keep_newer_than is not None:
        clock = _time.time() if now is None else now
        limit_s = policy.keep_newer_than.total_seconds()
        for c in eligible:
            if clock - c.time < limit_s:
                reasons[c.uri].append(f"keep_newer_than={policy.keep_newer_than}")


def _first_in_windows(eligible, value, width) -> dict[int, list[Candidate]]:
    """For each window ``floor(value / width)``, its oldest candidates (several when they tie
    on (attempt, generation))."""
    first: dict[int, list[Candidate]] = {}
    for c in reversed(eligible):  # oldest first
        v = value(c)
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            continue
        window = math.floor(v / width)
        had = first.setdefault(window, [c])
        if had[0] is not c and had[0].order == c.order:
            had.append(c)
    return first


def _uris_kept(decide: Callable[P, list[Decision]]) -> Callable[P, frozenset[str]]:
    """:func:`select` from :func:`decide`: the same arguments (stated once, in ``decide``)."""

    def select(*args: P.args, **kwargs: P.kwargs) -> frozenset[str]:
        """The URIs :func:`decide` keeps; it takes ``decide``'s arguments."""
        return frozenset(d.candidate.uri for d in decide(*args, **kwargs) if d.keep)

    return select


select = _uris_kept(decide)


__all__ = ["Candidate", "Decision", "Retention", "decide", "metric_value", "select"]
