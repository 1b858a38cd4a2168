"""How the ranks of a sharded save agree: one session, every rank's report, one outcome.

Rank 0 leads: it opens the session, writes its own segment, collects every rank's report,
commits (or aborts) and announces the outcome; the others follow: they take the session,
write their segments, report, and wait for the outcome. Two channels carry this:

- :class:`TorchCoordinator`, when ``torch.distributed`` is initialized: the session and the
  outcome are broadcast, the reports gathered, by its collectives (bounded by the process
  group's own timeout);
- :class:`StoreCoordinator` otherwise: small JSON markers under the object's coordination
  prefix. Each wait is bounded by the timeout: a rank that does not arrive fails the save.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from typing import Any

from ..errors import NotFoundError, ShardedSaveError, TransientError
from ..storage.blobstore import BlobStore
from ..uri import redact

Doc = dict[str, Any]
#: Called with (rank, step) as a save passes each step: "session", "packing", "segment"
#: (written, not yet durable), "reported" (not rank 0), "committing" and "outcome". Tests
#: stop a rank there (synchronised on its own progress).
observers: list[Callable[[int, str], None]] = []
_POLL_FIRST, _POLL_MAX = 0.01, 0.2
#: Tokens of sessions this process took part in, per destination and rank: never taken again.
_used: dict[tuple[str, int], set[str]] = {}


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
        from ..retry import RetryPolicy

        uri, data = self.prefix + name, json.dumps(doc).encode()
        RetryPolicy.from_env().call(lambda: self.store.write_bytes(uri, data), f"write of {redact(uri)}")

    def get(self, name: str) -> Doc | None:
        """The marker, or None when it is absent or could not be read now (a transient error,
        such as the marker being replaced while it was read): the callers poll again."""
        try:
            return json.loads(self.store.read_bytes(self.prefix + name))
        except (NotFoundError, TransientError):
            return None

    def sweep(self, keep: str) -> None:
        """Remove every marker but ``open`` and ``keep``'s result."""
        for uri in list(self.store.list(self.prefix)):
            name = uri[len(self.prefix) :]
            if ".piece-" not in name and name not in ("open", f"{keep}.result"):
                self.store.delete(uri)


class _Waiter:
    """Polls (10 ms, growing to 0.2 s) until a condition holds or ``timeout`` has passed."""

    def __init__(self, timeout: float) -> None:
        self.deadline = time.monotonic() + timeout
        self.pause = _POLL_FIRST

    def again(self) -> bool:
        left = self.deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(self.pause, left))
        self.pause = min(self.pause * 1.5, _POLL_MAX)
        return True


class StoreCoordinator:
    """Coordination through markers on the store (see the module docstring)."""

    def __init__(
        self, store: BlobStore, uri: str, prefix: str, rank: int, world: int, timeout: float
    ) -> None:
        self.markers = Markers(store, prefix)
        self.uri = uri
        self.rank = rank
        self.world = world
        self.timeout = timeout
        self.used = _used.setdefault((uri, rank), set())

    def lead(self, session: Doc, own: Callable[[Doc], Doc], decide: Callable[[list[Doc]], Doc]) -> Doc:
        token = session["token"]
        self.used.add(token)
        self.markers.put("open", session)
        step(0, "session")
        mine = own(session)
        reports: list[Doc | None] = [mine] + [None] * (self.world - 1)
        self.markers.put(f"{token}.packed", {})
        waiter = _Waiter(self.timeout)
        missing = set(range(1, self.world))
        failed = not mine["ok"]
        # Every rank is awaited, even after a failure: a rank that comes late then still finds
        # the session open, and hears the outcome instead of waiting for the next session.
        while missing:
            for rank in sorted(missing):
                doc = self.markers.get(f"{token}.done-{rank}")
                if doc is not None:
                    reports[rank] = doc
                    missing.discard(rank)
                    failed = failed or not doc["ok"]
            if missing and not waiter.again():
                break
        for rank in missing:  # after a failure, only the failure is told
            reports[rank] = {
                "ok": False,
                "error": ""
                if failed
                else f"rank {rank} did not report within {self.timeout:g}s (it died, hangs, or never"
                " called save_sharded)",
            }
        outcome = decide(reports)  # type: ignore[arg-type]
        self.markers.put(f"{token}.result", outcome)
        if outcome["ok"]:
            self.markers.sweep(token)
        step(0, "outcome")
        return outcome

    def follow(self, own: Callable[[Doc], Doc]) -> Doc:
        session = self._take_session(_Waiter(self.timeout))
        while True:
            token = session["token"]
            self.used.add(token)
            step(self.rank, "session")
            report = own(session)
            self.markers.put(f"{token}.done-{self.rank}", report)
            step(self.rank, "reported")
            waiter = _Waiter(self.timeout)
            packed = False
            while True:
                outcome = self.markers.get(f"{token}.result")
                if outcome is not None:
                    step(self.rank, "outcome")
                    return outcome
                newer = self.markers.get("open")
                if newer is not None and newer["token"] != token and newer["token"] not in self.used:
                    if self.markers.get(f"{token}.result") is None:  # ours was stale: join the new one
                        session = newer
                        break
                    continue
                if not packed and self.markers.get(f"{token}.packed") is not None:
                    packed, waiter = True, _Waiter(self.timeout)  # rank 0 is now waiting for the others
                if not waiter.again():
                    raise ShardedSaveError(
                        f"rank {self.rank}: rank 0 announced no outcome of the sharded save to"
                        f" {redact(self.uri)} within {self.timeout:g}s; it may have died. Whether it"
                        " committed or not, the object is whole (the new one or the previous one):"
                        " save again"
                    )

    def _take_session(self, waiter: _Waiter) -> Doc:
        while True:
            session = self.markers.get("open")
            if (
                session is not None
                and session["token"] not in self.used
                and self.markers.get(f"{session['token']}.result") is None
            ):
                return session
            if not waiter.again():
                raise ShardedSaveError(
                    f"rank {self.rank}: rank 0 did not open the sharded save to {redact(self.uri)}"
                    f" within {self.timeout:g}s: check that every rank calls save_sharded, or raise"
                    " the timeout (FLYTE_CHECKPOINT_SHARD_TIMEOUT)"
                )


class TorchCoordinator:
    """Coordination through ``torch.distributed``'s collectives (the default process group)."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank = rank
        self.world = world

    def _collective(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:
            raise ShardedSaveError(
                f"rank {self.rank}: a torch.distributed collective of the sharded save failed"
                f" ({type(exc).__name__}: {str(exc)[:300]}); another rank probably died. Nothing was"
                " committed by this save: the previous checkpoint is unchanged"
            ) from exc

    def lead(self, session: Doc, own: Callable[[Doc], Doc], decide: Callable[[list[Doc]], Doc]) -> Doc:
        import torch.distributed as dist

        self._collective(lambda: dist.broadcast_object_list([session], src=0))
        step(0, "session")
        report = own(session)
        reports: list[Any] = [None] * self.world
        try:
            self._collective(lambda: dist.gather_object(report, reports, dst=0))
        except ShardedSaveError as exc:
            decide([{"ok": False, "error": str(exc)}])
            raise
        outcome = decide(reports)
        self._collective(lambda: dist.broadcast_object_list([outcome], src=0))
        step(0, "outcome")
        return outcome

    def follow(self, own: Callable[[Doc], Doc]) -> Doc:
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
