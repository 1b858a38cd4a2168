"""The crash-safe clean-up: delete what a :class:`~flyte_checkpoint.history.retention.Retention`
does not keep, so that a process killed at any point leaves nothing listed that cannot load.

One deletion is three steps, each atomic on every store:

1. the manifest ``X.fcp-history/gNNNNNNNN.json`` is rewritten with ``state="deleting"`` (from
   then on the history leaves the checkpoint out, and a fallback load never tries it);
2. the object it names is deleted (a kept generation's ``gNNNNNNNN.obj``; an earlier attempt's
   object only when the clean-up is allowed to: see ``objects``);
3. the manifest is deleted.

A clean-up first finishes the deletions a killed one left half done (manifests in state
"deleting"), then decides from the committed manifests what the policy keeps (see
:func:`~flyte_checkpoint.history.retention.decide`) and deletes the rest, oldest first, at most
``limit`` a call (the next call goes on). It is idempotent: a second call deletes nothing more.

What it never deletes, whatever the policy: an object a committed manifest does not describe
(one without a manifest, or whose size or modification time no longer match it: a listing
cannot tell what it is), the destination being written, what the caller protects (the object
loaded), the newest committed checkpoint, anything newer than the triggering save, another
run's checkpoints, and an object that some kept manifest names.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..errors import NotFoundError
from ..uri import redact
from ..util.logs import logger
from .manifest import (
    COMMITTED,
    DELETING,
    Manifest,
    is_generation_copy,
    newness,
    parse_sidecar_name,
    read_manifests,
    sidecar_owners,
    write_manifest,
)
from .retention import Candidate, Decision, Retention, decide

#: Deletions one clean-up call makes at most (the next call goes on).
DEFAULT_LIMIT = 64


@dataclass
class Report:
    """What one clean-up did (or, with ``dry_run``, would do)."""

    decisions: list[Decision] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)  # objects deleted (or that would be)
    finished: list[str] = field(default_factory=list)  # half-done deletions completed
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (uri, why) not deleted
    more: bool = False  # the limit was reached: more to delete at the next call


@dataclass(frozen=True)
class _Found:
    manifest: Manifest
    valid: bool  # the object is there and is still what the manifest describes
    foreign: bool = False  # its object has a sidecar of its own: a user's destination


def _attempt(m: Manifest) -> int | None:
    """The attempt as ``fc.history`` places it: the manifest's, else the one its path holds."""
    if m.attempt is not None:
        return m.attempt
    from .recording import identity

    return identity(m.dest or m.object)[1]


def order_of(m: Manifest) -> tuple[int, int]:
    return newness(_attempt(m), m.generation)


def _scan(store, dests: Iterable[str]) -> tuple[list[_Found], list[Manifest]]:
    """The manifests of ``dests`` (one listing and the manifests' reads per destination): those
    "deleting", and for each object the newest committed manifest that names it, valid when the
    listing's entry of the object matches it (size, modification time). Also the stale ones: an
    older committed manifest naming an object a newer one names describes bytes since replaced
    (a save that kept no generation); it is no checkpoint, and the clean-up removes it."""
    found: list[_Found] = []
    stale: list[Manifest] = []
    for dest in dests:
        infos = {i.uri: i for i in store.list_details(dest)}  # the object and its sidecar
        owners = sidecar_owners(infos)
        newest: dict[str, Manifest] = {}
        for m in read_manifests(store, dest):
            if (m.dest or dest) != dest:
                continue  # a manifest copied from elsewhere: not this sidecar's
            m = m if m.dest is not None else dataclasses.replace(m, dest=dest)
            if m.state == DELETING:
                info = infos.get(m.object)  # valid: the object is still what it describes
                found.append(_Found(m, info is not None and m.matches(info)))
            elif m.state == COMMITTED:
                had = newest.get(m.object)
                if had is None or order_of(m) > order_of(had):
                    newest[m.object] = m
                    if had is not None:
                        stale.append(had)
                else:
                    stale.append(m)
        for m in newest.values():
            info = infos.get(m.object)
            foreign = m.object != dest and not is_generation_copy(m.object, m, owners)
            found.append(_Found(m, info is not None and m.matches(info), foreign))
    return found, stale


def _deletable(m: Manifest, objects: str, foreign: bool = False) -> str | None:
    """Why the object of ``m`` may not be deleted by this clean-up (None: it may)."""
    parsed = parse_sidecar_name(m.object)
    if parsed is not None:
        if not foreign and parsed[0] == m.dest and is_generation_copy(m.object, m):
            return None  # a kept generation: always the library's
        return "its object is not its own generation's copy"
    if m.object != m.dest:
        return "its object is outside its sidecar"
    if objects == "generations":
        return "an attempt's own object (deleting those is opt-in: Retention(earlier_attempts=True))"
    return None


def clean(
    store,
    dests: Sequence[str],
    policy: Retention,
    *,
    protected: Iterable[str] = (),
    writing: str | None = None,
    run: str | None = None,
    trigger: tuple[int, int] | None = None,
    objects: str = "generations",
    limit: int = DEFAULT_LIMIT,
    dry_run: bool = False,
    now: float | None = None,
    infer_run: bool = True,
    one_run: bool = False,
) -> Report:
    """Apply ``policy`` to the checkpoints of ``dests`` (objects and their generations).

    Args:
        store: the store of every URI in ``dests``.
        dests: the destinations whose checkpoints are considered (one attempt's, or a run's).
        policy: what to keep.
        protected: URIs never deleted (the object this attempt loaded, and the kept generation
            that holds its bytes once a save in place replaced it).
        writing: the destination being written (never deleted, nor its newest manifest's object).
        run: the run cleaned up (others' are left alone); None: the newest manifest's run, or
            (``infer_run=False``) the checkpoints whose manifests name no run.
        trigger: (attempt, generation) of the save that triggered this; newer ones are kept.
        objects: ``"generations"``: delete only kept generations' copies; ``"all"``: an
            attempt's own object too (the local runner's attempts, opted-in Flyte attempts, gc).
        limit: most deletions in this call (half-done ones included).
        dry_run: decide and report, delete nothing.
        one_run: the checkpoints of ``dests`` whose manifests name no run are one run (a
            checkpoint's own clean-up: its destination and its source); otherwise each such
            destination is a run of its own (gc of a prefix).
    """
    report = Report()
    found, stale = _scan(store, dests)
    budget = limit
    if not dry_run:  # records of bytes since replaced: no checkpoint, and nothing else names them
        for m in stale:
            _delete_quietly(store, m.uri)
    named_by_committed = {f.manifest.object for f in found if f.manifest.state == COMMITTED}
    # 1. finish what a killed clean-up began
    for f in found:
        m = f.manifest
        if m.state != DELETING:
            continue
        if budget <= 0:
            report.more = True
            break
        if not dry_run:
            _finish(store, m, f, named_by_committed, writing)
        report.finished.append(m.object)
        budget -= 1
    # 2. decide
    candidates = [
        Candidate(
            uri=f.manifest.object,
            attempt=_attempt(f.manifest),
            generation=f.manifest.generation,
            step=f.manifest.step,
            metrics=f.manifest.metrics,
            time=f.manifest.time,
            run=f.manifest.run,
            managed=f.valid and not f.foreign,
            dest=f.manifest.dest,
        )
        for f in found
        if f.manifest.state == COMMITTED
    ]
    guard = set(protected) | ({writing} if writing else set())
    report.decisions = decide(
        candidates, policy, guard, run=run, trigger=trigger, now=now, infer_run=infer_run, one_run=one_run
    )
    by_object = {f.manifest.object: f.manifest for f in found if f.manifest.state == COMMITTED}
    foreign = {f.manifest.object for f in found if f.foreign}
    # 3. delete, oldest first
    for d in reversed(report.decisions):
        if d.keep:
            continue
        uri = d.candidate.uri
        m = by_object[uri]
        why = _deletable(m, objects, uri in foreign)
        if why is not None:
            report.skipped.append((uri, why))
            continue
        if budget <= 0:
            report.more = True
            break
        if not dry_run:
            _delete(store, m)
        report.deleted.append(uri)
        budget -= 1
    if report.deleted or report.finished:
        logger().info(
            "retention (%s): %s %d checkpoint(s) of %s%s",
            policy.describe(),
            "would delete" if dry_run else "deleted",
            len(report.deleted) + len(report.finished),
            ", ".join(redact(d) for d in dests),
            "; more at the next clean-up" if report.more else "",
        )
    return report


def _delete(store, m: Manifest) -> None:
    write_manifest(store, dataclasses.replace(m, state=DELETING))  # 1. out of the history
    _delete_quietly(store, m.object)  # 2. the bytes
    _delete_quietly(store, m.uri)  # 3. the record


def _finish(store, m: Manifest, f: _Found, named_by_committed: set[str], writing: str | None) -> None:
    # The object is deleted only while it is still the bytes this manifest describes (its size,
    # and its modification time where the store gives one), and no committed manifest names it:
    # a destination written again since (by a save without a manifest too) belongs to that save.
    if f.valid and m.object not in named_by_committed and m.object != writing:
        _delete_quietly(store, m.object)
    _delete_quietly(store, m.uri)


def _delete_quietly(store, uri: str) -> None:
    try:
        store.delete(uri)
    except NotFoundError:
        pass


class Janitor:
    """Runs clean-ups off the caller's thread, one at a time: a request while one runs makes
    one more run after it (requests coalesce). :meth:`wait` waits for all requested to end."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending: object | None = None  # the newest request's work, not started
        self._running = False

    def request(self, work) -> None:
        """Run ``work()`` in the background (after the one running, replacing one waiting)."""
        with self._lock:
            self._pending = work
            if self._running:
                return
            self._running = True
        threading.Thread(target=self._loop, name=f"fcp-retention-{self._name}", daemon=True).start()

    def _loop(self) -> None:
        try:
            while True:
                with self._lock:
                    work, self._pending = self._pending, None
                    if work is None:
                        return
                try:
                    work()  # type: ignore[operator]
                except Exception as exc:  # never the training's failure: the next clean-up retries
                    logger().warning(
                        "the retention clean-up of %s failed (the next one retries): %s", self._name, exc
                    )
        finally:  # also when something else ends the thread (SystemExit): wait() must not hang
            with self._lock:
                self._running = False
                self._pending = None
                self._idle.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until no clean-up runs or waits; False if ``timeout`` passed first."""
        with self._lock:
            return self._idle.wait_for(lambda: not self._running, timeout)


def destinations_under(store, prefix: str) -> list[str]:
    """The checkpoint destinations under ``prefix`` that have a sidecar (one listing)."""
    return sorted({p[0] for p in map(parse_sidecar_name, store.list(prefix)) if p is not None})


def clean_prefix(
    store,
    prefix: str,
    policy: Retention,
    *,
    run: str | None = None,
    infer_run: bool = True,
    rounds: int = 1000,
) -> int:
    """Apply ``policy`` to every checkpoint under ``prefix`` (a finished run's folder: its
    attempts' objects included), call after call until nothing is left to delete; how many
    checkpoints were deleted."""
    dests = destinations_under(store, prefix)
    if not dests:
        return 0
    total = 0
    for _ in range(rounds):
        report = clean(store, dests, policy, run=run, objects="all", infer_run=infer_run)
        total += len(report.deleted) + len(report.finished)
        if not report.more:
            break
    return total


__all__ = ["DEFAULT_LIMIT", "Janitor", "Report", "clean", "clean_prefix", "destinations_under", "order_of"]
