"""Readers during overwrites: every read of an object being replaced sees one whole version.

A writer overwrites one object ``N`` times, each version of its own size and bytes; a reader
loops meanwhile (``stat``, the whole object through ``open_read``, a few ``read_range`` calls)
and checks each answer against the versions. The two synchronise on events, not on time: after
each commit the writer waits until a reader round that *began after* the commit has ended, so
every version is read at least once and, in that round, with no write in progress (it must
then be exactly that version); the other rounds run while the writer replaces the object.

What a read may see (:class:`OverwriteRace` lists each breach as a message):

- ``stat``: one version's size, never ``None``;
- ``open_read`` and ``read_range``: one whole version's bytes (a range: its bytes at that
  offset), never absent (``NotFoundError``), short or mixed; a read that began before the
  object was replaced may raise ``TransientError`` (the store saw it change: the core reads
  again), but a round with no write in progress must succeed.

A store whose ``replaces_atomically`` is False may find the object absent mid-overwrite; the
rest holds for it too.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from typing import Any

from ..errors import NotFoundError, TransientError
from ..storage.blobstore import BlobStore
from .faultproxy import HANG_GUARD

#: How many reads of each kind a round makes with ``read_range``: (offset, length) pairs are
#: taken from the versions' sizes (the start, the middle, across the end).
RANGE_PROBES = 3
#: A version's size at most (the big ones cross ranges and parts, the small ones fit in one).
BIG_CAP = 1024 * 1024 + 1


def version_sizes(store: BlobStore, count: int) -> list[int]:
    """``count`` distinct sizes alternating between one request's worth and several ranges or
    parts (two of the store's smallest unit and one byte, at most :data:`BIG_CAP`)."""
    from .sizes import units

    found = units(store)
    big = min(BIG_CAP, 2 * found[0][0] + 1) if found else 300_001
    return [(big if i % 2 else 1000) + 7 * i for i in range(count)]


class OverwriteRace:
    """One writer overwriting ``uri`` with ``versions`` while one reader loops; :meth:`run`
    returns the promises broken (empty when the store kept them).

    ``save(data)`` writes one version (the test's choice: ``write_bytes``, a chunked write...).
    """

    def __init__(
        self,
        store: BlobStore,
        uri: str,
        versions: list[bytes],
        save: Callable[[bytes], None],
        *,
        absent_allowed: bool = False,
    ) -> None:
        self.store, self.uri, self.versions, self.save = store, uri, versions, save
        self.absent_allowed = absent_allowed
        self.by_digest = {hashlib.sha256(v).hexdigest(): i for i, v in enumerate(versions)}
        self.sizes = {len(v): i for i, v in enumerate(versions)}
        self.broken: list[str] = []
        self.rounds = 0
        self.quiet_rounds = 0
        self.transient = 0
        self._cond = threading.Condition()
        self._started = 0  # writes started
        self._committed = 0  # writes committed
        self._finished_after = -1  # the last commit count a round began after (and ended)
        self._done = False

    # -- the writer (the calling thread) --------------------------------------------------------

    def run(self) -> list[str]:
        """Write the first version, start the reader, write the others (each time waiting for a
        round begun after the commit), then stop the reader; returns the broken promises."""
        self.save(self.versions[0])
        self._committed = self._started = 1
        reader = threading.Thread(target=self._read_loop, name="overwrite-reader", daemon=True)
        reader.start()
        try:
            self._wait_for_round_after(1)
            for version in self.versions[1:]:
                with self._cond:
                    if self._done:  # the reader gave up (enough broken promises)
                        break
                    self._started += 1
                self.save(version)
                with self._cond:
                    self._committed += 1
                    self._cond.notify_all()
                self._wait_for_round_after(self._committed)
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()
            reader.join(HANG_GUARD)
        if reader.is_alive():
            self.broken.append(f"setup: the reader did not end within the {HANG_GUARD:.0f} s hang guard")
        return self.broken

    def _wait_for_round_after(self, commits: int) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: self._finished_after >= commits or self._done, HANG_GUARD)
        if not ok:
            raise AssertionError(f"setup: no reader round ended after commit {commits} within the hang guard")

    # -- the reader ---------------------------------------------------------------------

    def _read_loop(self) -> None:
        while True:
            with self._cond:
                if self._done or len(self.broken) >= 5:
                    self._done = True
                    self._cond.notify_all()
                    return
                began_after = self._committed
                quiet_at_start = self._started == self._committed
                started = self._started
            found = self._round(quiet_at_start)
            with self._cond:
                quiet = quiet_at_start and self._started == started
                self.rounds += 1
                self.quiet_rounds += quiet
                for seen in found:
                    self._judge(seen, quiet, began_after)
                self._finished_after = max(self._finished_after, began_after)
                self._cond.notify_all()

    def _round(self, quiet_at_start: bool) -> list[tuple[str, Any]]:
        """One round of reads: ``(what, result or exception)`` for each."""
        seen: list[tuple[str, Any]] = []
        seen.append(("stat", _attempt(lambda: self.store.stat(self.uri))))
        seen.append(("open_read", _attempt(lambda: _read_all(self.store, self.uri))))
        for start, length in self._probes():
            read = _attempt(lambda s=start, n=length: self.store.read_range(self.uri, s, n))  # type: ignore[misc]
            seen.append((f"read_range({start}, {length})", (start, length, read)))
        return seen

    def _probes(self) -> list[tuple[int, int]]:
        small = min(self.sizes)
        big = max(self.sizes)
        return [(0, 64), (small - 10, 20), (big // 2, 4096)][:RANGE_PROBES]

    def _judge(self, seen: tuple[str, Any], quiet: bool, commits: int) -> None:
        what, result = seen
        where = f"{what} in reader round {self.rounds} (after {commits} of {len(self.versions)} writes)"
        if what.startswith("read_range"):
            start, length, result = result
        if isinstance(result, BaseException):
            self._judge_error(what, where, result, quiet)
            return
        if what == "stat":
            if result is None and not self.absent_allowed:
                self.broken.append(
                    f"promise broken: an object being overwritten is never absent; {where}: stat"
                    " returned None (does the server delete the old object before the new one is"
                    " in place? Then declare replaces_atomically = False)"
                )
            elif result is not None and result not in self.sizes:
                self.broken.append(
                    f"promise broken: stat during an overwrite gives one version's size; {where}:"
                    f" {result}, which is no version's size ({sorted(self.sizes)})"
                )
            return
        if what == "open_read":
            version = self.by_digest.get(hashlib.sha256(result).hexdigest())
            if version is None:
                self.broken.append(
                    f"promise broken: every read during an overwrite sees one whole version; {where}:"
                    f" open_read returned {len(result)} bytes that are no version (short, or two mixed)"
                )
            elif quiet and version != commits - 1:
                self.broken.append(
                    f"promise broken: a read after a commit sees the object committed; {where}:"
                    f" open_read returned version {version + 1}, not version {commits}"
                )
            return
        if not any(result == v[start : start + length] for v in self.versions):
            self.broken.append(
                f"promise broken: a ranged read during an overwrite sees one version's bytes; {where}:"
                f" {len(result)} bytes that no version holds there"
            )

    def _judge_error(self, what: str, where: str, error: BaseException, quiet: bool) -> None:
        if isinstance(error, NotFoundError):
            if not self.absent_allowed:
                self.broken.append(
                    f"promise broken: an object being overwritten is never absent; {where}: {what}"
                    f" raised {type(error).__name__}: {error}"
                )
            return
        if isinstance(error, TransientError) and not quiet:
            self.transient += 1  # replaced while it was read: the core reads again
            return
        why = (
            "with no write in progress, a read succeeds" if quiet else "only a TransientError may end a read"
        )
        self.broken.append(
            f"promise broken: reads during an overwrite raise nothing but TransientError ({why});"
            f" {where}: {what} raised {type(error).__name__}: {error}"
        )


def _attempt(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception as exc:
        return exc


def _read_all(store: BlobStore, uri: str) -> bytes:
    out = bytearray()
    with store.open_read(uri) as r:
        while chunk := r.read(64 * 1024):
            out += chunk
    return bytes(out)


class OverwriteTests:
    """Readers while the object is replaced (mixed into
    :class:`~flyte_checkpoint.testing.BlobStoreSuite`, which gives the fixtures).

    ``overwrites``: how many versions the writer commits (each followed by a reader round
    with no write in progress, and raced by the rounds around it): 8, or the variable
    ``FCP_SUITE_OVERWRITES`` for a longer run.
    """

    overwrites: int = int(os.environ.get("FCP_SUITE_OVERWRITES") or 8)

    def test_readers_see_one_whole_version_during_overwrites(self, store: BlobStore, root: str) -> None:
        """While one writer overwrites an object ``overwrites`` times (small objects and
        objects of several parts and ranges, in turn), a reader's ``stat``, ``open_read`` and
        ``read_range`` each see one whole version: never absent (unless the store declares
        ``replaces_atomically = False``), never short or mixed; only a read that began before a
        replace may raise, and only ``TransientError``."""
        from ..uri import join
        from .data import data, write_in_chunks

        uri = join(root, "overwritten")
        versions = [data(size, seed=1000 + i) for i, size in enumerate(version_sizes(store, self.overwrites))]
        race = OverwriteRace(
            store,
            uri,
            versions,
            lambda payload: write_in_chunks(store, uri, payload),
            absent_allowed=not store.replaces_atomically,
        )
        broken = race.run()
        assert not broken, (
            f"promise broken: a reader of an object being overwritten sees one whole version"
            f" ({race.rounds} reader rounds, {len(versions)} versions):\n" + "\n".join(broken)
        )
        assert race.quiet_rounds >= len(versions), (
            f"setup: {race.quiet_rounds} reader rounds ran with no write in progress, fewer than the"
            f" {len(versions)} versions"
        )


__all__ = ["OverwriteRace", "OverwriteTests", "version_sizes"]
