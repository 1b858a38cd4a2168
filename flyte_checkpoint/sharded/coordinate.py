"""How the ranks of a sharded save agree: one session, every rank's report, one outcome.

Rank 0 leads: it opens the session, writes its own segment, collects every rank's report,
commits (or aborts) and announces the outcome; the others follow: they take the session,
write their segments, report, and wait for the outcome. Two channels carry this:

- :class:`TorchCoordinator`, when ``torch.distributed`` is initialized: the session and the
  outcome are broadcast, the reports gathered, by its collectives (bounded by the process
  group's own timeout);
- :class:`StoreCoordinator` otherwise: small JSON markers under the object's coordination
  prefix. Each wait is bounded by the timeout: a rank that does not arrive fails the save.

Every session names its job, its save and its world size, and every report names its rank's
(:mod:`.identity`): a rank takes part only in the save of its own call, and a rank whose world
size differs fails the save on every rank. The markers:

- ``open``: the session in progress (or the last one): token, job, save, world size, the
  leader's process, ``state`` (``packing``, ``collecting``, ``finished``, then with ``ok`` and
  ``announced``: False when the outcome could not be written, so that the others raise at once,
  saying whether rank 0 committed, instead of at their timeout) and a lease
  (``renewal``, a count, and ``expires``, the leader's clock) that the leader renews every
  third of ``$FLYTE_CHECKPOINT_SHARD_LEASE`` while the save runs. A second rank 0 that finds
  a live session of another job refuses (``refused-<job>`` tells its ranks why); one whose
  lease has run out without renewal, whose leader is provably gone, or that its own job left,
  it takes over;
- ``<token>.done-<rank>.<joiner>``: a rank's report (``joiner``: a nonce of its call, so two
  processes reporting as one rank are seen, and the save fails);
- ``<token>.result``: the outcome, naming the report accepted for each rank (a rank whose
  report was not the one committed raises).

What the markers cost (issue 36; counted by ``tests/test_shard_coordination.py``): every wait
polls with backoff and jitter (:class:`_Waiter`): pauses grow by half from 20 ms to a cap, each
lengthened by up to a quarter at random so that ranks do not poll in step. The followers' pauses
start at ``world / 4,000`` s and are capped at four times that (at least 0.2 s), so that all
followers together poll at most 4,000 times a second whatever the world size (S3 serves 5,500
reads a second per prefix). A follower makes, per save, one write (its report) and polls: while it
finds the session, then one read of the outcome a poll (and of ``open`` every fourth poll, to see
a session that replaced its own); a wait of ``W`` seconds takes at most
``2 + ceil(log1.5(cap / first)) + W / cap`` polls. Rank 0 gathers the reports with one listing
a round (``world / 1,000`` pages on S3), its rounds paced the same way (capped at
``max(0.2, world / 4,000)`` s); it reads each report once, the first time a listing shows it,
16 at a time; it removes the markers with :meth:`BlobStore.delete_many` (S3: one request per
1,000). A listing may lag behind the writes (a store that lists eventually consistently): a
rank absent at the deadline is looked for in two more listings before it counts as missing.
"""

from __future__ import annotations

import hashlib
import json
import random
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import NotFoundError, ShardedSaveError, TransientError
from ..storage.blobstore import BlobStore
from ..uri import redact
from ..util.logs import logger
from .identity import Caller, describe_job, describe_process, describe_save, gone, out_of_step

Doc = dict[str, Any]
#: What a coordinator is given: rank 0's opening of a save (its session), a rank's own part
#: (its report), and rank 0's decision on every rank's report and the problems seen (the outcome).
Begin = Callable[[], Doc]
Own = Callable[[Doc], Doc]
Decide = Callable[[list[Doc], list[str]], Doc]
#: Called with (rank, step) as a save passes each step: "session", "packing", "segment"
#: (written, not yet durable), "reported" (not rank 0), "committing" and "outcome". Tests
#: stop a rank there (synchronised on its own progress).
observers: list[Callable[[int, str], None]] = []
_POLL_FIRST, _POLL_MAX = 0.02, 0.2
#: Polls a second of all followers of a save together, at most (a follower's pauses are at least
#: ``world / _RATE`` s): S3 serves 5,500 reads a second per prefix.
_RATE = 4000.0
#: Each pause grows by this factor, and is lengthened by up to this fraction at random.
_GROWTH, _JITTER = 1.5, 0.25
#: Listings after the deadline that must also lack a rank's report before it counts as missing.
_CONFIRM = 2
#: Reports rank 0 reads at once.
_READERS = 16
#: A follower reads ``open`` while it awaits the outcome on every this many polls (the first included).
_OPEN_EVERY = 4
#: Tokens of sessions this process took part in, per destination and rank: never taken again.
_used: dict[tuple[str, int], set[str]] = {}
#: Tokens of the sessions this process led that have ended: their leader is not coming back.
_ended: set[str] = set()


def step(rank: int, name: str) -> None:
    for observer in list(observers):
        observer(rank, name)


def new_token() -> str:
    return secrets.token_hex(8)


class Markers:
    """JSON documents under a prefix of a store (each written atomically)."""

    def __init__(self, store: BlobStore, prefix: str) -> None:
        self.store = store
        self.prefix = prefix

    def put(self, name: str, doc: Doc) -> None:
        """Write the marker (transient store errors retried by the core's policy)."""
        from ..util.retry import RetryPolicy

        uri, data = self.prefix + name, json.dumps(doc).encode()
        RetryPolicy.from_env().call(lambda: self.store.write_bytes(uri, data), f"write of {redact(uri)}")

    def get(self, name: str) -> Doc | None:
        """The marker, or None when it is absent or could not be read now (a transient error,
        such as the marker being replaced while it was read): the callers poll again. A marker
        that is not a JSON object (damaged, or not ours) counts as absent, with a warning: it is
        replaced by the next one written there."""
        try:
            data = self.store.read_bytes(self.prefix + name)
        except (NotFoundError, TransientError):
            return None
        try:
            doc = json.loads(data)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            logger().warning("ignoring %s: it is not a marker of a sharded save", redact(self.prefix + name))
            return None
        return doc

    def names(self, start: str) -> list[str]:
        """The names of the markers that begin with ``start`` (one listing)."""
        return [uri[len(self.prefix) :] for uri in self.store.list(self.prefix + start)]

    def sweep(self, keep: str) -> None:
        """Remove every marker but ``open`` and ``keep``'s result (one listing, then
        :meth:`BlobStore.delete_many`). Markers it could not remove are left to the next save's
        sweep, with a warning."""
        try:  # never raises: called after the commit, which stands
            gone = []
            for uri in list(self.store.list(self.prefix)):
                name = uri[len(self.prefix) :]
                if ".piece-" not in name and name not in ("open", f"{keep}.result"):
                    gone.append(uri)
            self.store.delete_many(gone)
        except Exception as exc:
            logger().warning(
                "could not remove markers of earlier sharded saves (the next save tries again): %s", exc
            )


def _failed_before_deciding(exc: BaseException) -> Doc:
    """The outcome told to the other ranks when rank 0 fails before it decides (a listing or a
    marker it could not read or write past the retries): nothing was committed."""
    return {
        "ok": False,
        "error": f"rank 0 failed before it could commit ({type(exc).__name__}: {exc}): nothing was committed",
    }


def follower_pauses(world: int) -> tuple[float, float]:
    """(first, cap): a follower's pauses between polls in a world of ``world`` ranks, so that
    all followers together poll at most :data:`_RATE` times a second."""
    floor = world / _RATE
    return max(_POLL_FIRST, floor), max(_POLL_MAX, 4 * floor)


def leader_cap(world: int) -> float:
    """The longest pause between two of rank 0's listings of the reports."""
    return max(_POLL_MAX, world / _RATE)


class _Waiter:
    """Polls with backoff and jitter (``first``, growing by half to ``cap``; each pause up to a
    quarter longer, at random) until a condition holds or ``timeout`` has passed."""

    def __init__(self, timeout: float, first: float = _POLL_FIRST, cap: float = _POLL_MAX) -> None:
        self.deadline = time.monotonic() + timeout
        self.pause = first
        self.cap = cap

    def again(self) -> bool:
        left = self.deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(self.pause * (1 + _JITTER * random.random()), left))
        self.pause = min(self.pause * _GROWTH, self.cap)
        return True


class _Readers:
    """Reads markers :data:`_READERS` at a time (a pool started at the first batch of two or
    more), in the order given."""

    def __init__(self) -> None:
        self._pool: Any = None

    def read(self, markers: Markers, names: list[str]) -> list[tuple[str, Doc | None]]:
        if len(names) <= 1:
            return [(name, markers.get(name)) for name in names]
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(_READERS, "flyte-checkpoint-shard-reports")
        return list(zip(names, self._pool.map(markers.get, names), strict=True))

    def __enter__(self) -> _Readers:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def describe(session: Doc) -> str:
    """A session as a message shows it: its job, save, world size and leader."""
    return (
        f"{describe_job(session.get('job'))}, {describe_save(_save(session))} of {session.get('world')}"
        f" ranks, led by rank 0 on {describe_process(session.get('process'))}"
    )


def _number(value: Any) -> float:
    """A number a marker holds (0 for anything else)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _save(doc: Doc) -> dict[str, Any]:
    """Which save a session is (empty when the marker does not say)."""
    save = doc.get("save")
    return save if isinstance(save, dict) else {}


def _key(doc: Doc | None) -> tuple[Any, ...] | None:
    return None if doc is None else (doc.get("token"), doc.get("renewal"), doc.get("state"))


class _Watch:
    """What one call saw of the ``open`` marker. A session that appeared or changed while the
    call watched was written meanwhile: its leader was alive then, not a killed job's leftover."""

    def __init__(self) -> None:
        self.first: tuple[Any, ...] | None = None
        self.looked = False

    def see(self, doc: Doc | None) -> None:
        if not self.looked:
            self.first, self.looked = _key(doc), True

    def live(self, doc: Doc) -> bool:
        return _key(doc) != self.first


class _Lease:
    """The leader's ``open`` marker: written by :meth:`start`, then renewed every third of
    ``lease`` seconds on a thread of its own until :meth:`stop`. A renewal that finds another
    session in ``open`` stops and records it in :attr:`lost` (the save then fails)."""

    def __init__(self, markers: Markers, session: Doc, lease: float) -> None:
        self.markers = markers
        self.doc = dict(session, renewal=0)
        self.lease = lease
        self.lost: Doc | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flyte-checkpoint-shard-lease", daemon=True)

    def _write(self) -> None:
        self.doc["expires"] = time.time() + self.lease
        self.markers.put("open", self.doc)

    def start(self) -> None:
        self._write()
        self._thread.start()

    def update(self, **fields: Any) -> None:
        """Write the session with ``fields`` changed (a renewal too)."""
        with self._lock:
            self.doc.update(fields)
            self.doc["renewal"] += 1
            self._write()

    def _run(self) -> None:
        while not self._stop.wait(self.lease / 3):
            try:
                with self._lock:
                    if self._stop.is_set():
                        return
                    current = self.markers.get("open")
                    if current is not None and current.get("token") != self.doc["token"]:
                        self.lost = current
                        return
                    self.doc["renewal"] += 1
                    self._write()
            except Exception as exc:  # the next renewal tries again; the lease is long enough
                logger().debug("could not renew the sharded save's session: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def still_ours(self) -> Doc | None:
        """The session that replaced ours in ``open`` (None when it is still ours)."""
        if self.lost is not None:
            return self.lost
        current = self.markers.get("open")
        if current is not None and current.get("token") != self.doc["token"]:
            return current
        return None


class StoreCoordinator:
    """Coordination through markers on the store (see the module docstring)."""

    def __init__(
        self, store: BlobStore, uri: str, prefix: str, caller: Caller, timeout: float, lease: float
    ) -> None:
        self.markers = Markers(store, prefix)
        self.uri = uri
        self.caller = caller
        self.rank = caller.rank
        self.world = caller.world
        self.timeout = timeout
        self.lease = lease
        self.used = _used.setdefault((uri, caller.rank), set())

    # -- rank 0 -------------------------------------------------------------------------------

    def lead(self, begin: Begin, own: Own, decide: Decide) -> Doc:
        self._claim()
        session = begin()
        session.update(self.caller.stamp(), state="packing", lease=self.lease)
        token = session["token"]
        self.used.add(token)
        lease = _Lease(self.markers, session, self.lease)
        try:
            try:
                try:
                    lease.start()
                    step(0, "session")
                    mine = own(session)
                    mine.update(self.caller.stamp())
                    lease.update(state="collecting")
                    reports, problems = self._collect(token, mine)
                    if not problems and all(r["ok"] for r in reports):
                        other = lease.still_ours()
                        if other is not None:
                            problems.append(
                                f"another sharded save took over {redact(self.uri)} while this one ran"
                                f" ({describe(other)}): two jobs must not save to one URI at once"
                            )
                except Exception as exc:
                    # Before anything was committed (decide() never raises): the others are told
                    # now, not at their timeout; this rank raises the store's error.
                    self._announce(token, _failed_before_deciding(exc))
                    raise
                outcome = decide(reports, problems)
                if outcome["ok"]:
                    outcome["accepted"] = {
                        str(r["rank"]): {"joiner": r["joiner"], "process": r["process"]} for r in reports
                    }
                    # While the session is held: once it says "finished", another job's rank 0
                    # may begin, and its markers must not be swept with those of earlier saves.
                    self.markers.sweep(token)
                announced = self._announce(token, outcome)
            finally:
                lease.stop()
            try:
                if lease.still_ours() is None:  # never hide another job's session from its ranks
                    lease.update(state="finished", ok=outcome["ok"], announced=announced)
            except Exception as exc:  # the outcome stands: a session not marked finished is taken over
                logger().warning(
                    "rank 0: could not mark the sharded save session at %s finished (%s: %s); the"
                    " next save of this job takes it over at once, another job's once its lease has"
                    " run out",
                    redact(self.uri),
                    type(exc).__name__,
                    exc,
                )
        finally:
            _ended.add(token)  # also when this thread is stopped (a test's "killed" rank)
        step(0, "outcome")
        return outcome

    def _announce(self, token: str, outcome: Doc) -> bool:
        """Write the outcome for the other ranks (True), or warn that it could not be written
        (False): rank 0's own outcome stands either way (the commit, if any, is done)."""
        try:
            self.markers.put(f"{token}.result", outcome)
            return True
        except Exception as exc:
            done = "was committed"
            if not outcome["ok"]:
                done = "was not committed (the previous checkpoint is unchanged)"
            logger().warning(
                "rank 0: the sharded save to %s %s, but its outcome could not be written for the other"
                " ranks (%s: %s). They raise ShardedSaveError: saying whether rank 0 committed, from the"
                " session marker, or, if that cannot be written either, 'rank 0 announced no outcome'"
                " at their timeout (%gs)",
                redact(self.uri),
                done,
                type(exc).__name__,
                exc,
                self.timeout,
            )
            return False

    def _claim(self) -> None:
        """Return once this rank 0 may open a session; raise when another live job's is open."""
        watched: tuple[Any, ...] | None = None
        deadline = 0.0
        while True:
            doc = self.markers.get("open")
            if doc is None or doc.get("state") == "finished" or doc.get("token") in _ended:
                return
            if self.caller.job is not None and doc.get("job") == self.caller.job:
                return  # left by an earlier run of this job's rank 0 (a job has one): it is gone
            if gone(doc.get("process")):
                return
            if self.markers.get(f"{doc.get('token')}.result") is not None:
                return  # it ended, and its leader died before saying so in the session
            if watched is None:
                lease = _number(doc.get("lease")) or self.lease  # its leader's, renewed every third
                left = _number(doc.get("expires")) - time.time()
                if 0 < left <= 2 * lease:
                    self._refuse(doc)
                # Its lease ran out by this clock (or runs longer than a lease can: the leader's
                # clock is ahead): taken over only after a whole lease more without a renewal
                # (clocks differ, and a busy leader may renew late).
                watched, deadline = _key(doc), time.monotonic() + max(lease, self.lease)
            elif _key(doc) != watched:
                self._refuse(doc)
            elif time.monotonic() >= deadline:
                logger().warning(
                    "taking over the sharded save session at %s (%s): it was not renewed for %gs",
                    redact(self.uri),
                    describe(doc),
                    max(lease, self.lease),
                )
                return
            time.sleep(min(self.lease / 10, _POLL_MAX))

    def _refusal(self) -> str:
        return "refused-" + hashlib.sha256(str(self.caller.job).encode()).hexdigest()[:16]

    def _refuse(self, doc: Doc) -> None:
        error = (
            f"rank 0: another sharded save is in progress at {redact(self.uri)} ({describe(doc)}):"
            " two jobs must not save to one URI at once. Stop the other job or give this one its"
            " own URI; a session left by a killed job is taken over once its lease has run out"
            f" ({self.lease:g}s, FLYTE_CHECKPOINT_SHARD_LEASE). Nothing was committed: the previous"
            " checkpoint is unchanged"
        )
        try:  # tells this job's other ranks at once, instead of at their timeout
            self.markers.put(
                self._refusal(), {"job": self.caller.job, "save": self.caller.save, "error": error}
            )
        except Exception as exc:
            logger().warning("could not tell the other ranks why: %s", exc)
        raise ShardedSaveError(error)

    def _collect(self, token: str, mine: Doc) -> tuple[list[Doc], list[str]]:
        """Every rank's report, in rank order (a failure for each rank that did not report in
        time), and what fails the save beyond them (a report from outside the world, two
        processes reporting as one rank)."""
        found: dict[int, Doc] = {0: mine}
        problems: list[str] = []
        read: set[str] = set()
        waiter = _Waiter(self.timeout, cap=leader_cap(self.world))
        confirm = _CONFIRM  # listings after the deadline
        with _Readers() as readers:
            # Every rank is awaited, even after a failure: a rank that comes late then still finds
            # the session open, and hears the outcome instead of waiting for its timeout.
            while len(found) < self.world and not problems:
                new = [name for name in self.markers.names(f"{token}.done-") if name not in read]
                for name, doc in readers.read(self.markers, new):
                    if doc is not None:  # else not readable yet: the next round reads it again
                        read.add(name)
                        self._take(doc, found, problems)
                if len(found) < self.world and not problems and not waiter.again():
                    # The deadline passed. A listing may lag behind the writes: a rank counts as
                    # missing only once more listings lacked it too.
                    if confirm <= 0:
                        break
                    confirm -= 1
                    time.sleep(waiter.pause * (1 + _JITTER * random.random()))
        failed = not all(doc.get("ok") for doc in found.values())
        reports = []
        for rank in range(self.world):  # after a failure, only the failure is told
            reports.append(
                found.get(rank)
                or {
                    "ok": False,
                    "rank": rank,
                    "error": ""
                    if failed or problems
                    else f"rank {rank} did not report within {self.timeout:g}s (it died, hangs, or"
                    " never called save_sharded)",
                }
            )
        return reports, problems

    def _take(self, doc: Doc, found: dict[int, Doc], problems: list[str]) -> None:
        """Record a report in ``found`` (by rank), or what is wrong with it in ``problems``."""
        rank = doc.get("rank")
        if not isinstance(rank, int) or not 0 < rank < self.world:
            problems.append(
                f"rank {rank} (started with WORLD_SIZE={doc.get('world')}) reported to this save"
                f" of {self.world} ranks: every rank of a job needs the same world size"
            )
        elif rank in found:
            problems.append(
                f"two processes reported as rank {rank}, on"
                f" {describe_process(found[rank].get('process'))} and on"
                f" {describe_process(doc.get('process'))}: two jobs are saving to {redact(self.uri)}"
                " at once, or a rank was started twice. Give each job its own URI, or name each job"
                " (job= or FLYTE_CHECKPOINT_JOB)"
            )
        else:
            found[rank] = doc

    # -- the other ranks ----------------------------------------------------------------------

    def follow(self, own: Own) -> Doc:
        watch = _Watch()
        session = self._find(watch)
        while True:
            token = session["token"]
            self.used.add(token)
            step(self.rank, "session")
            report = own(session)
            report.update(self.caller.stamp())
            try:
                self.markers.put(f"{token}.done-{self.rank}.{self.caller.joiner}", report)
            except Exception as exc:
                raise ShardedSaveError(
                    f"rank {self.rank}: could not report to rank 0 of the sharded save to"
                    f" {redact(self.uri)} ({type(exc).__name__}: {exc}): save again"
                ) from exc
            step(self.rank, "reported")
            outcome, newer = self._await(session)
            if newer is None:
                return self._accepted(outcome, report)  # type: ignore[arg-type]
            session = newer  # ours was a killed leader's session: join its successor

    def _find(self, watch: _Watch) -> Doc:
        """The session of this call's save, once rank 0 opened it."""
        waiter = _Waiter(self.timeout, *follower_pauses(self.world))
        doc = None
        while True:
            doc = self.markers.get("open")
            watch.see(doc)
            if doc is not None and doc.get("token") not in self.used:
                if self._joinable(doc, watch):
                    return doc
                if doc.get("state") != "finished":
                    self._check_refusal()
            if not waiter.again():
                if doc is not None and self._committed_without_me(doc):
                    raise ShardedSaveError(
                        f"rank {self.rank}: rank 0 committed {describe_save(self.caller.save)} of"
                        f" {describe_job(self.caller.job)} to {redact(self.uri)} without this call"
                        f" (its session, {describe(doc)}, had ended before this call could join it)"
                        f" and began no other within {self.timeout:g}s. This call's files are not in"
                        f" the checkpoint: two processes ran as rank {self.rank} (two jobs saving to"
                        " one URI under one name, or a rank started twice), or this rank called"
                        " save_sharded again for a save that was done, or a restarted job's rank 0"
                        " has not yet begun it (raise the timeout). Give each job its own URI or name"
                        " (job= or FLYTE_CHECKPOINT_JOB), and call save_sharded once a save on every"
                        " rank"
                    )
                seen = ""
                if doc is not None and doc.get("token") not in self.used:
                    seen = (
                        f" (the session there is {describe(doc)}, {doc.get('state')}; this rank is"
                        f" {describe_job(self.caller.job)} at {describe_save(self.caller.save)})"
                    )
                raise ShardedSaveError(
                    f"rank {self.rank}: rank 0 did not open the sharded save to {redact(self.uri)}"
                    f" within {self.timeout:g}s{seen}: check that every rank calls save_sharded, or"
                    " raise the timeout (FLYTE_CHECKPOINT_SHARD_TIMEOUT)"
                )

    def _committed_without_me(self, doc: Doc) -> bool:
        """Whether ``doc`` is a committed session of this call's job and save, that this call
        did not join (it had ended when this call began, or this process took part already)."""
        return (
            doc.get("state") == "finished"
            and doc.get("ok") is True
            and doc.get("job") == self.caller.job
            and _save(doc) == self.caller.save
        )

    def _joinable(self, doc: Doc, watch: _Watch) -> bool:
        """Whether ``doc`` is the session of this call's save; raises when it proves that
        rank 0 is past this call's save (a session that appeared or changed during the call)."""
        if doc.get("job") != self.caller.job:
            return False  # another job's: its rank 0 or ours will say (refused-)
        theirs, mine = _save(doc), self.caller.save
        if doc.get("state") == "finished":
            # Maybe this save, ended without this rank; maybe an earlier run's, whose counts
            # started from 1 too: rank 0's next save, or the timeout, tells.
            return False
        if theirs == mine:
            return True
        if watch.live(doc) and (theirs.get("by") != mine.get("by") or _number(theirs.get("n")) > mine["n"]):
            raise ShardedSaveError(
                f"rank {self.rank}: {out_of_step(theirs, mine)}. Nothing was committed by this call"
                f" (sharded save to {redact(self.uri)})"
            )
        return False  # rank 0 is behind (it opens this save next), or the session was left by a killed job

    def _check_refusal(self) -> None:
        name = "refused-" + hashlib.sha256(str(self.caller.job).encode()).hexdigest()[:16]
        refusal = self.markers.get(name)
        if (
            refusal is not None
            and refusal.get("job") == self.caller.job
            and refusal.get("save") == self.caller.save
        ):
            raise ShardedSaveError(
                f"rank {self.rank}: rank 0 of this job did not begin {describe_save(self.caller.save)}:"
                f" {refusal.get('error')}"
            )

    def _await(self, session: Doc) -> tuple[Doc | None, Doc | None]:
        """(the outcome, None), or (None, a newer session of this save) when the one joined was
        left by a killed leader and its successor opened this save again."""
        token = session["token"]
        # Rank 0 decides a little after its deadline (its listings after it): a rank that awaits
        # its outcome waits that much longer, so that it hears why rather than its own timeout.
        patience = self.timeout + (_CONFIRM + 1) * leader_cap(self.world) * (1 + _JITTER)
        waiter = _Waiter(patience, *follower_pauses(self.world))
        collecting = session.get("state") != "packing"
        polls = 0
        while True:
            outcome = self.markers.get(f"{token}.result")
            if outcome is not None:
                step(self.rank, "outcome")
                if not isinstance(outcome.get("ok"), bool) or not isinstance(outcome.get("error", ""), str):
                    raise ShardedSaveError(
                        f"rank {self.rank}: the outcome of the sharded save to {redact(self.uri)} is"
                        " damaged: whether rank 0 committed or not, the object is whole: save again"
                    )
                return outcome, None
            polls += 1
            # ``open`` on the first poll and every few after it: it changes rarely (rank 0 begins
            # to collect; a successor took over a killed leader's session).
            doc = self.markers.get("open") if (polls - 1) % _OPEN_EVERY == 0 else None
            if doc is not None and doc.get("token") == token and doc.get("announced") is False:
                if self.markers.get(f"{token}.result") is None:  # rank 0 could not write it
                    self._unannounced(doc)
                continue
            if doc is not None and doc.get("token") == token:
                if not collecting and doc.get("state") != "packing":
                    collecting = True  # rank 0 now awaits the others: the timeout starts again
                    waiter = _Waiter(patience, waiter.pause, waiter.cap)
            elif (
                doc is not None
                and doc.get("token") not in self.used
                and doc.get("state") != "finished"
                and doc.get("job") == self.caller.job
                and doc.get("save") == self.caller.save
            ):
                if self.markers.get(f"{token}.result") is None:
                    return None, doc
                continue
            if not waiter.again():
                raise ShardedSaveError(
                    f"rank {self.rank}: rank 0 announced no outcome of the sharded save to"
                    f" {redact(self.uri)} within {self.timeout:g}s; it may have died. Whether it"
                    " committed or not, the object is whole (the new one or the previous one):"
                    " save again"
                )

    def _unannounced(self, session: Doc) -> None:
        """Raise: rank 0 ended this rank's session (committed or not, as ``session`` says) but
        could not write its outcome."""
        if session.get("ok") is True:
            raise ShardedSaveError(
                f"rank {self.rank}: rank 0 committed the sharded save to {redact(self.uri)}: the new"
                " checkpoint is in place, but rank 0 could not write the outcome that names the part"
                f" it committed for each rank, so this rank cannot confirm its own (it is, unless two"
                f" processes ran as rank {self.rank}). Rank 0's log has the store's error"
            )
        raise ShardedSaveError(
            f"rank {self.rank}: rank 0 did not commit the sharded save to {redact(self.uri)}, and could"
            " not write the outcome that says why (rank 0 raised it, and its log has the store's"
            " error). Nothing was committed: the previous checkpoint is unchanged"
        )

    def _accepted(self, outcome: Doc, report: Doc) -> Doc:
        """``outcome``, unless it committed without this call's ``report`` (raises)."""
        if outcome.get("ok"):
            named = outcome.get("accepted")
            accepted = named.get(str(self.rank)) if isinstance(named, dict) else None
            if not isinstance(accepted, dict):  # outside rank 0's world, and came after its decision
                raise ShardedSaveError(
                    f"rank {self.rank}: rank 0 committed the sharded save to {redact(self.uri)} without"
                    f" this rank ({report.get('error') or 'it was not among the ranks awaited'}). This"
                    " call's files are not in the checkpoint"
                )
            if accepted.get("joiner") != self.caller.joiner:
                raise ShardedSaveError(
                    f"rank {self.rank}: rank 0 committed the sharded save to {redact(self.uri)} with"
                    f" another process's part for rank {self.rank} (on"
                    f" {describe_process(accepted.get('process'))}): two processes ran as rank"
                    f" {self.rank}, from two jobs saving to one URI or a rank started twice. This"
                    " call's files are not in the checkpoint: give each job its own URI, or name each"
                    " job (job= or FLYTE_CHECKPOINT_JOB)"
                )
        return outcome


class TorchCoordinator:
    """Coordination through ``torch.distributed``'s collectives (the default process group).

    One process group is one job, so no other job's rank can take part; the session still
    names the world size and the save, and a rank whose call differs fails the save."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller
        self.rank = caller.rank
        self.world = caller.world

    def _collective(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:
            raise ShardedSaveError(
                f"rank {self.rank}: a torch.distributed collective of the sharded save failed"
                f" ({type(exc).__name__}: {str(exc)[:300]}); another rank probably died. Nothing was"
                " committed by this save: the previous checkpoint is unchanged"
            ) from exc

    def lead(self, begin: Begin, own: Own, decide: Decide) -> Doc:
        import torch.distributed as dist

        session = begin()
        session.update(self.caller.stamp())
        self._collective(lambda: dist.broadcast_object_list([session], src=0))
        step(0, "session")
        report = own(session)
        reports: list[Any] = [None] * self.world
        try:
            self._collective(lambda: dist.gather_object(report, reports, dst=0))
        except ShardedSaveError as exc:
            decide([{"ok": False, "error": str(exc)}], [])
            raise
        outcome = decide(reports, [])
        self._collective(lambda: dist.broadcast_object_list([outcome], src=0))
        step(0, "outcome")
        return outcome

    def follow(self, own: Own) -> Doc:
        import torch.distributed as dist

        box: list[Any] = [None]
        self._collective(lambda: dist.broadcast_object_list(box, src=0))
        step(self.rank, "session")
        report = own(box[0])
        self._collective(lambda: dist.gather_object(report, None, dst=0))
        step(self.rank, "reported")
        self._collective(lambda: dist.broadcast_object_list(box, src=0))
        step(self.rank, "outcome")
        return box[0]
