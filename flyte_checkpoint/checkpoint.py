"""``Checkpoint``: save task state as one object, and restore the previous attempt's.

The object's bytes are those Flyte's ``flyte.Checkpoint`` writes: bytes and files as
they are, a directory as a gzip-compressed tar of its top-level entries.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import (
    CorruptCheckpointError,
    NotFoundError,
    OperationCancelledError,
    PathTooLongError,
    UnsupportedDataError,
)
from .uri import is_local, local_path, normalize, redact
from .util.forksafe import PerProcess, lock
from .util.logs import log_transfer, logger
from .util.retry import RetryPolicy

if TYPE_CHECKING:
    from .format.incremental import Reuse
    from .format.lookahead import Lookahead
    from .history.cleanup import Janitor
    from .history.manifest import Manifest
    from .history.recording import SaveRecord
    from .history.retention import Retention
    from .lifecycle.background import Lane, SaveHandle
    from .lifecycle.preemption import Registration, Saver
    from .lifecycle.saveorder import Turn
    from .storage.blobstore import BlobStore, BlobWriter
    from .storage.pinned import PinnedView
    from .util.cancellation import Scope
    from .util.heldfolders import HeldFolder
    from .util.transfers import SaveFigures

Data = bytes | bytearray | memoryview | str | os.PathLike
#: ``progress(done, total)``: bytes done so far, and the total when it is known.
ProgressCallback = Callable[[int, "int | None"], None]


class BaseCheckpoint(abc.ABC):
    """The checkpoint contract: a local workspace, a previous attempt's state, and saves."""

    @property
    @abc.abstractmethod
    def path(self) -> Path:
        """The local workspace folder (private, temporary) where ``load`` restores."""

    @abc.abstractmethod
    def prev_exists(self) -> bool:
        """Whether a previous attempt's checkpoint URI was given (it may still be absent)."""

    @abc.abstractmethod
    async def load(self) -> Path | None:
        """Restore the previous attempt's checkpoint; ``None`` when there is none."""

    @abc.abstractmethod
    async def save(self, data: Data) -> None:
        """Store bytes, a file or a directory as this attempt's checkpoint."""

    @abc.abstractmethod
    def load_sync(self) -> Path | None:
        """``load`` for synchronous code."""

    @abc.abstractmethod
    def save_sync(self, data: Data) -> None:
        """``save`` for synchronous code."""


def _remove_tree(held: HeldFolder, owner: int) -> None:
    # A forked child inherits the finalizer with the object: only the maker removes the folder.
    if os.getpid() == owner:
        held.release()


class Checkpoint(BaseCheckpoint):
    """Save to ``checkpoint_dest``; load from ``checkpoint_src`` (the previous attempt's).

    ``progress``, if given, is called as ``progress(done, total)`` while saving (bytes of
    the data read) and loading (bytes of the object read); ``total`` is ``None`` if unknown.

    ``load()`` returns ``path / "payload"`` for a bytes or file checkpoint, ``path`` for
    a restored directory, and ``None`` when there is no source, no object, or a zero-byte
    object. Every other failure is raised. A second ``load()`` returns the same result
    without downloading again. The workspace is removed by ``close()``, on leaving a
    ``with`` block, when the object is collected, or at interpreter exit.

    Every save writes a manifest beside the object once it is committed (``step=`` and
    ``metrics=`` of the save, size, digest; ``fc.history`` lists them). ``keeps_generations``:
    each save first keeps the object it replaces as an older generation, by a server-side copy
    into the object's ``.fcp-history/`` sidecar (a retention policy that keeps more than one
    checkpoint sets it). See docs/history.md.

    Raises (on construction):
        InvalidURIError: ``checkpoint_dest`` is blank or malformed.
    """

    def __init__(
        self,
        checkpoint_dest: str,
        checkpoint_src: str | None = None,
        *,
        retry: RetryPolicy | None = None,
        progress: ProgressCallback | None = None,
        retention: Retention | None = None,
        keeps_generations: bool = False,
    ) -> None:
        self._dest = normalize(checkpoint_dest, param="checkpoint_dest")
        self._retention = _checked_retention(retention)
        #: Made by the local runner's attempt (whose earlier attempts are this library's): known
        #: here, in the attempt's thread (a clean-up's thread has no task context).
        self._in_local_run = False
        if self._retention is not None:
            from .lifecycle.runs import current_names

            self._in_local_run = current_names() is not None
        #: Each save first keeps the object it replaces as an older generation (docs/history.md):
        #: set where a retention policy keeps more than one checkpoint.
        self._keeps_generations = keeps_generations or (
            self._retention is not None and self._retention.keeps_generations
        )
        self._src: str | None = None
        if checkpoint_src is not None and str(checkpoint_src).strip().strip('"').strip():
            src = normalize(checkpoint_src, param="checkpoint_src")
            if not is_local(src):
                from .lifecycle.runs import current_names
                from .util.paths import points_at_same_attempt, repair_union_prev_checkpoint_uri

                names = current_names()
                if names is not None and points_at_same_attempt(
                    src, self._dest, run_name=names[0], action_name=names[1]
                ):
                    src = repair_union_prev_checkpoint_uri(src, run_name=names[0], action_name=names[1])
            self._src = src
        self._retry = retry or RetryPolicy.from_env()
        self._progress = progress
        # Guards the fields below and is never held across I/O, so close() stays prompt.
        self._lock = lock()
        self._load_lock = lock()  # one download at a time: a second load() reuses the first's
        self._root: str | None = None
        self._owner = 0  # the process that made ``_root``
        self._finalizer: Callable[[], object] | None = None
        self._loaded: tuple[Path | None] | None = None
        self._restored: set[str] = set()  # names restored by partial loads into the workspace
        self._loading: Scope | None = None  # the download in flight, which close() cancels
        self._stale: list[Callable[[], object]] = []  # workspaces it removes when it stops
        # Background saves (flyte_checkpoint.lifecycle.background): a forked child gets an empty lane.
        self._lane: PerProcess[Lane] = PerProcess(_new_lane)
        #: The figures and seconds of the last save that ended (the CLI prints them as logged).
        self._last_save: tuple[SaveFigures, float] | None = None
        #: Retention clean-ups run after commits, off the caller's thread (docs/retention.md).
        self._janitor: PerProcess[Janitor] = PerProcess(lambda: _new_janitor(self._dest))
        #: What a later save's manifest names as ``made_from``: the checkpoint loaded, if any,
        #: and its digest where the load knew it (a fallback load, from its manifest).
        self._loaded_from: str | None = None
        self._loaded_digest: str | None = None
        #: Resuming in place (the object loaded is the destination): the next save keeps the
        #: loaded bytes as a generation, which stays protected as the object loaded was.
        self._loaded_in_place = False
        self._loaded_kept: list[str] = []

    # -- properties ------------------------------------------------------------

    @property
    def remote_destination(self) -> str:
        """Where ``save`` writes."""
        return self._dest

    @property
    def remote_source(self) -> str | None:
        """Where ``load`` reads (the previous attempt's checkpoint), if anywhere."""
        return self._src

    @property
    def path(self) -> Path:
        """The workspace folder, made on first use (removed only by the process that made it)."""
        from .util.cancellation import check

        check()  # a download cancelled by close() must not make a new workspace
        made = None
        with self._lock.get():
            if self._root is None:
                import tempfile
                import weakref

                from .util.heldfolders import HeldFolder

                held = HeldFolder()  # removes only what it made
                # The finalizer comes first, so no interrupt can leave the folder without one.
                remove = weakref.finalize(self, _remove_tree, held, os.getpid())
                try:
                    made = held.make(tempfile.gettempdir(), _root_name)
                except BaseException:
                    remove()
                    raise
                self._root, self._owner, self._finalizer = made, os.getpid(), remove
            workspace = Path(self._root, "workspace")
            workspace.mkdir(exist_ok=True)
        if made is not None:  # not under the lock: what a killed process left may be large
            from .util.heldfolders import sweep_roots

            sweep_roots(os.path.dirname(made))
        return workspace

    def prev_exists(self) -> bool:
        return self._src is not None

    # -- load ------------------------------------------------------------------

    def load_sync(self, members: Iterable[str] | None = None, *, fallback: bool = False) -> Path | None:
        """See :meth:`load`.

        Raises:
            OperationCancelledError: :meth:`close` was called (by another thread) meanwhile.
        """
        if self._src is None:
            return None
        from .lifecycle.preemption import deferring
        from .util.cancellation import Scope

        names = _member_names(members)
        _check_fallback(names, fallback)
        scope = Scope(f"load of {redact(self._src)}")
        return deferring(lambda: self._load(scope, names, fallback=fallback))

    async def load(self, members: Iterable[str] | None = None, *, fallback: bool = False) -> Path | None:
        """Restore the previous attempt's checkpoint, in a worker thread.

        ``members`` (paths inside a folder checkpoint) restores only those files, and every
        regular file under the folders among them, into :attr:`path` (which it returns, as a
        full load does): with an index, by ranged reads of their gzip members only, each file's
        hash verified; without one (Flyte's, older objects), by streaming the archive to its
        end and keeping the selected files. Symbolic links and empty folders are left out
        (``load()`` without ``members`` restores them). Files restored replace those of the
        same names in :attr:`path`; names restored before are not read again. See docs/FORMAT.md.

        ``fallback=True`` (a full load only): when the previous checkpoint is missing or raises
        :class:`~flyte_checkpoint.errors.CorruptCheckpointError`, the older checkpoints its
        history lists (its kept generations, then earlier attempts' at the same name) are tried
        newest first, each skipped one logged at WARNING with why; the newest that loads is
        returned. A payload's bytes are checked against its manifest's digest. Other failures
        (denied, network) still raise. See docs/history.md.

        Cancelling the awaiting task stops the download in flight (in the worker, which
        removes what it had restored); :meth:`close` does the same without waiting for it.

        Raises:
            NotFoundError: a name in ``members`` selects no regular file (nothing is written
                to :attr:`path`); the object is a payload, not a folder.
            UnsafeArchiveError: a name leaves the tree; the archive breaks a safety rule.
            CorruptCheckpointError: the object, its index or a file's data is damaged.
        """
        if self._src is None:
            return None
        import asyncio

        from .lifecycle.preemption import notice
        from .util.cancellation import Scope

        names = _member_names(members)
        _check_fallback(names, fallback)
        notice()  # the main thread's loads keep our SIGTERM handler in front (an event loop's)
        scope = Scope(f"load of {redact(self._src)}")
        try:
            return await asyncio.to_thread(self._load, scope, names, None, fallback=fallback)
        except asyncio.CancelledError:
            scope.cancel()
            raise

    def _load_members(self, names: Iterable[str], view: PinnedView) -> Path | None:
        """``load_sync(members=names)`` from the version of the previous checkpoint that ``view``
        pins (not retried: a caller that pinned it pins again), for a caller that chose the
        names from that version's index (:func:`~flyte_checkpoint.sharded.load_sharded`)."""
        from .lifecycle.preemption import deferring
        from .util.cancellation import Scope

        assert self._src is not None
        selected = _member_names(names)
        scope = Scope(f"load of {redact(self._src)}")
        return deferring(lambda: self._load(scope, selected, view))

    def _load(
        self,
        scope: Scope,
        names: tuple[str, ...] | None = None,
        view: PinnedView | None = None,
        *,
        fallback: bool = False,
    ) -> Path | None:
        from .util.cancellation import using

        assert self._src is not None
        with self._load_lock.get():
            with self._lock.get():
                cached = self._cached(names)
                if cached is not None:
                    return cached[0]
            try:
                with self._lock.get():
                    self._loading = scope
                    if self._root is not None and self._owner != os.getpid():
                        # A forked child restores into a workspace of its own: the download
                        # replaces the workspace's content, which is the parent's.
                        self._root = self._finalizer = None
                        self._restored = set()
                scope.check()
                started = time.monotonic()
                download = self._download if names is None else lambda: self._download_members(names, view)
                loaded_from: str | None = self._src
                digest: str | None = None  # of the object loaded, where the load knew it
                with using(scope):
                    if fallback:
                        result, loaded_from, digest = self._load_with_fallback(scope)
                    elif view is not None:
                        result = download()
                    else:
                        result = self._retry.call(download, f"load of {redact(self._src)}", scope=scope)
            finally:
                with self._lock.get():
                    self._loading = None
                    stale, self._stale = self._stale, []
                for remove in stale:
                    remove()
            if stale:  # closed meanwhile: what it restored went with the old workspace
                raise scope.error()
            with self._lock.get():
                if result[0] is not None:
                    self._loaded_from = loaded_from
                    self._loaded_digest = digest
                    self._loaded_in_place = loaded_from == self._dest
                if names is None:
                    self._loaded = (result[0],)
                elif result[0] is not None:
                    self._restored.update(names)
        if result[0] is None:
            logger().info("no checkpoint at %s: starting fresh", redact(self._src))
        else:
            log_transfer("loaded", loaded_from or self._src, result[1], time.monotonic() - started)
        return result[0]

    def _cached(self, names: tuple[str, ...] | None) -> tuple[Path | None] | None:
        """What a load of ``names`` (None: all) returns without reading, if it need not read."""
        if names is None:
            return self._loaded
        if self._loaded is not None and (
            self._loaded[0] is None or (self._root and self._loaded[0] == Path(self._root, "workspace"))
        ):
            return self._loaded  # no checkpoint, or the whole tree is there already
        if self._root is not None and self._owner == os.getpid():
            done = self._restored
            if all(any(p in done for p in _and_parents(n)) for n in names):
                return (Path(self._root, "workspace"),)
        return None

    def _download_members(
        self, names: tuple[str, ...], view: PinnedView | None = None
    ) -> tuple[Path | None, int]:
        import functools

        from .format.partial import Selection, restore_into

        with contextlib.nullcontext(view) if view is not None else self._pinned_source() as store:
            if store is None:
                return None, 0
            workspace = self.path
            assert self._src is not None and self._root is not None
            progress = self._progress
            counter = _Counter(progress or _no_progress, None)
            place = functools.partial(os.path.join, str(workspace))
            selection = Selection(names)
            restore_into(store, self._src, store.size, selection, place, beside=self._root, on_read=counter)
        if progress is not None:
            counter.finish()
        return workspace, counter.done

    def load_file_sync(self, name: str, dest: str | os.PathLike[str] | None = None) -> Path | None:
        """Restore the one file ``name`` (a path inside the previous folder checkpoint) to
        ``dest`` (default: that path under :attr:`path`); the path written, or None when there
        is no checkpoint.

        ``dest`` is taken as ``cp`` takes it: a folder (or a link to one), or a path that ends
        with a separator, receives the file under its base name (``dest/b.bin`` for ``a/b.bin``);
        any other path is the file itself (a link there is replaced by the file; what it led to
        is left alone). Missing folders above it are made. What was at the path written is
        replaced only once the file is whole.

        ``load(members=[name])`` for one file written anywhere: an object with an index (folder
        saves of this library) is read by ranged reads of that file's gzip members only, and the
        file's content hash is verified; one without (Flyte's, older ones) is streamed to its end
        (every member's CRC checked). See docs/FORMAT.md.

        Raises:
            NotFoundError: the checkpoint holds no regular file ``name``.
            UnsafeArchiveError: ``name`` is not a relative path inside the tree, or the index
                names one that is not.
            CorruptCheckpointError: the index or the file's data does not match.
            WorkspaceError: a folder (or a device, a FIFO, a socket) is at the path to write,
                or a file is where one of its folders must be (nothing is written); or the disk
                cannot hold the file.
        """
        if self._src is None:
            return None
        from .lifecycle.preemption import deferring
        from .util.cancellation import Scope

        scope = Scope(f"load of {redact(self._src)}")
        return deferring(lambda: self._load_file(name, dest, scope))

    async def load_file(self, name: str, dest: str | os.PathLike[str] | None = None) -> Path | None:
        """:meth:`load_file_sync` in a worker thread."""
        if self._src is None:
            return None
        import asyncio

        from .lifecycle.preemption import notice
        from .util.cancellation import Scope

        notice()
        scope = Scope(f"load of {redact(self._src)}")
        try:
            return await asyncio.to_thread(self._load_file, name, dest, scope)
        except asyncio.CancelledError:
            scope.cancel()
            raise

    def _load_file(self, name: str, dest: str | os.PathLike[str] | None, scope: Scope) -> Path | None:
        from .format.partial import Selection, member_name, restore_into
        from .util.cancellation import using

        src = self._src
        assert src is not None
        from .util.paths import file_destination, make_way

        rel = member_name(name)
        try:
            target = file_destination(rel, dest) if dest is not None else self.path / rel
        except OSError as exc:  # dest's own name or path over the limit: say which
            if exc.errno != errno.ENAMETOOLONG:
                raise
            raise PathTooLongError.for_path(os.fspath(dest or ""), "pass a shorter dest") from exc

        def fetch() -> Path | None:
            with self._pinned_source() as store:
                if store is None:
                    return None
                try:
                    make_way(target, f"{rel!r} from {redact(src)}")
                    one = Selection((rel,), folders=False)
                    counter = _Counter(self._progress or _no_progress, None)  # as a load of the member
                    restore_into(
                        store,
                        src,
                        store.size,
                        one,
                        lambda _: str(target),
                        beside=str(target.parent),
                        on_read=counter,
                    )
                    counter.finish()
                except OSError as exc:  # dest's own name or path over the limit: say which
                    if exc.errno != errno.ENAMETOOLONG or isinstance(exc, PathTooLongError):
                        raise
                    raise PathTooLongError.for_path(str(target), "pass a shorter dest") from exc
            return target

        with using(scope):
            return self._retry.call(fetch, f"load of {rel!r} from {redact(src)}", scope=scope)

    @contextlib.contextmanager
    def _pinned_source(self, src: str | None = None) -> Iterator[PinnedView | None]:
        """The previous checkpoint (or ``src``), pinned to the version there now for the block's
        reads (:func:`~flyte_checkpoint.storage.pinned.read_pinned`: an object replaced meanwhile
        is ``ObjectReplacedError``, retried, never damaged); None when it is absent or empty."""
        from .storage.pinned import read_pinned
        from .storage.registry import store_for

        src = src or self._src
        assert src is not None
        with read_pinned(store_for(src), src) as view:
            yield view if view is not None and view.size else None

    def _load_with_fallback(self, scope: Scope) -> tuple[tuple[Path | None, int], str | None, str | None]:
        """``load(fallback=True)``: the previous checkpoint, else the newest older one in its
        history that loads (docs/history.md); the result, the URI it came from, and the digest
        its manifest records (None without one)."""
        import functools

        from .history.fallback import candidates, check_payload, skipped_all

        assert self._src is not None
        skipped: list[tuple[str, str]] = []
        for uri, entry in candidates(self._src, self._retry):
            scope.check()
            try:
                result = self._retry.call(
                    functools.partial(self._download, uri), f"load of {redact(uri)}", scope=scope
                )
            except CorruptCheckpointError as exc:
                why = f"damaged: {exc}"
            except NotFoundError:
                why = "missing (removed meanwhile)"
            else:
                if result[0] is None:
                    why = "missing" if entry is None or entry.manifest is None else "missing or empty"
                else:
                    problem = check_payload(result[0], entry)
                    if problem is None:
                        if skipped:
                            logger().warning(
                                "loaded %s instead of %s (fallback=True): %d newer checkpoint(s) skipped",
                                redact(uri),
                                redact(self._src),
                                len(skipped),
                            )
                        return result, uri, (entry.digest if entry is not None else None)
                    why = problem
            logger().warning("fallback load: skipping %s: %s", redact(uri), why)
            skipped.append((uri, why))
        error = skipped_all(self._src, skipped)
        if error is not None:
            raise error
        return (None, 0), None, None

    def _download(self, src: str | None = None) -> tuple[Path | None, int]:
        import secrets
        import shutil

        from .format.restore import PAYLOAD, restore_object

        staging: str | None = None
        src = src or self._src
        assert src is not None
        try:
            with self._pinned_source(src) as store:
                if store is None:
                    return None, 0
                assert src is not None
                size = store.size
                workspace = self.path
                # named before it is made, so that an interrupt anywhere (the pin's release
                # included) removes it: mkdtemp's name is unknown until it returns
                staging = os.path.join(workspace.parent, f".restore-{secrets.token_hex(8)}")
                os.mkdir(staging, 0o700)
                progress = self._progress
                counter = _Counter(progress, size) if progress else None
                # an indexed folder object inflates on several threads; anything else streams
                is_tar = restore_object(store, src, size, staging, on_chunk=counter)
            shutil.rmtree(workspace)
            os.rename(staging, workspace)
        except BaseException:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
            raise
        return (workspace if is_tar else workspace / PAYLOAD), size

    # -- save ------------------------------------------------------------------

    def save_sync(
        self, data: Data, *, step: int | None = None, metrics: dict[str, float] | None = None
    ) -> None:
        """See :meth:`save`."""
        from .lifecycle.preemption import deferring
        from .lifecycle.saveorder import take
        from .util.cancellation import Scope

        record = self._record(step, metrics)
        self._raise_unseen()
        deferring(lambda: self._save(data, take(self._dest), Scope(f"save to {redact(self._dest)}"), record))

    async def save(
        self, data: Data, *, step: int | None = None, metrics: dict[str, float] | None = None
    ) -> None:
        """Store bytes, a file or a directory as this attempt's checkpoint, in a worker thread.

        ``step`` and ``metrics`` (names to numbers; NaN allowed) are recorded in the manifest
        written beside the object once it is committed (``fc.history`` lists them; see
        docs/history.md). A save without them writes a manifest too.

        Saves to one destination commit in the order they were called, from any thread or
        ``Checkpoint`` (see :mod:`flyte_checkpoint.lifecycle.saveorder`). Cancelling the awaiting task
        aborts the upload: nothing is committed unless the commit had already begun, and
        a later save starts only once this one has stopped.

        Raises (before saving): the error of a background save that failed unseen (see
        :meth:`save_background`).
        """
        import asyncio

        from .lifecycle.preemption import notice
        from .lifecycle.saveorder import take
        from .util.cancellation import Scope

        record = self._record(step, metrics)
        self._raise_unseen()
        notice()  # the main thread's saves keep our SIGTERM handler in front (an event loop's)
        turn = take(self._dest)  # in the caller, so the order is that of the calls
        scope = Scope(f"save to {redact(self._dest)}")
        try:
            await asyncio.to_thread(self._save, data, turn, scope, record)
        except asyncio.CancelledError:
            scope.cancel()
            raise

    def _save(self, data: Data, turn: Turn, scope: Scope, record: SaveRecord | None = None) -> None:
        with turn:
            self._upload(self._prepare(data, record), turn, scope, record)

    def _upload(
        self,
        action: Callable[[], SaveFigures],
        turn: Turn,
        scope: Scope,
        record: SaveRecord | None = None,
    ) -> None:
        if record is not None:
            action = _noting_version(action, record)
        if record is not None and record.keeps_generations:
            action = _keeping_generation(action, record)
        figures, seconds = self._transfer(action, turn, scope)
        self._last_save = (figures, seconds)
        log_transfer("saved", self._dest, figures, seconds)
        manifest = None if record is None else self._write_manifest(record)
        if record is not None:
            self._note_loaded_kept(record)
        self._after_commit(record, manifest)

    def _note_loaded_kept(self, record: SaveRecord, *, blocking: bool = True) -> None:
        """The first save after a load in place keeps the loaded bytes as a generation (if it
        keeps one): that generation is the object loaded, protected from then on. Not
        ``blocking``: nothing is noted when the lock is held (the final save on SIGTERM, whose
        stopped thread may hold it)."""
        from .history.manifest import generation_uri

        held = self._lock.get()
        if not held.acquire(blocking):
            return
        try:
            if not self._loaded_in_place:
                return
            self._loaded_in_place = False
            if record.kept is not None:
                self._loaded_kept.append(generation_uri(self._dest, record.kept))
        finally:
            held.release()

    def _import_what_a_manifest_needs(self) -> None:
        """Import now what the final save on SIGTERM records its manifest with (see
        :func:`flyte_checkpoint.lifecycle.preemption._import_what_a_save_needs`: the thread the
        signal stops may be inside one of these imports)."""
        from .history import manifest, recording  # noqa: F401

    def _final_record(self) -> SaveRecord:
        """What the final save on SIGTERM records (made in the handler's thread, which has the
        task's context): no step or metrics (its function returns only what to save); warnings
        kept for the handler to log (see :meth:`_final_save`)."""
        record = self._record(None, None)
        record.warnings = []
        return record

    def _final_save(
        self, data: Data, turn: Turn, scope: Scope, record: SaveRecord, committed: Callable[[], None]
    ) -> tuple[SaveFigures, float]:
        """The final save on SIGTERM (:mod:`flyte_checkpoint.lifecycle.preemption`), in its worker
        thread: the upload and then its manifest, as any save's (the replaced object kept as a
        generation first when this checkpoint keeps them). Nothing is logged here (the thread
        the signal stopped may hold a logging handler's lock): the warnings go to
        ``record.warnings``, which the handler's thread logs. ``committed()`` is called once the
        object is committed. No clean-up follows (the process is ending: the next save's, or
        ``gc``, does it)."""
        action = _noting_version(self._prepare(data, record), record)
        if record.keeps_generations:
            action = _keeping_generation(action, record)
        result = self._transfer(action, turn, scope)
        committed()
        self._write_manifest(record)
        self._note_loaded_kept(record, blocking=False)
        return result

    # -- history (docs/history.md) ----------------------------------------------

    def _record(self, step: int | None, metrics: dict[str, float] | None) -> SaveRecord:
        """What a save records in its manifest (its arguments checked now, before anything runs).

        Raises:
            TypeError: ``step`` is not an int, or ``metrics`` not a dict of names to numbers.
        """
        from .history.manifest import check_metrics, check_step
        from .history.recording import SaveRecord, identity

        run, attempt = identity(self._dest)
        return SaveRecord(
            self._dest,
            step=check_step(step),
            metrics=check_metrics(metrics),
            run=run,
            attempt=attempt,
            made_from=self._loaded_from,
            made_from_digest=self._loaded_digest,  # set with _loaded_from, None without it
            keeps_generations=self._keeps_generations,
        )

    def _write_manifest(self, record: SaveRecord) -> Manifest | None:
        """After the commit: the manifest of what was committed (a failure is logged, not
        raised: then None)."""
        from .history.recording import record_save
        from .storage.registry import store_for

        return record_save(store_for(self._dest), record)

    # -- retention (docs/retention.md) -----------------------------------------

    def _after_commit(self, record: SaveRecord | None = None, manifest: Manifest | None = None) -> None:
        """After a commit (and its manifest): a clean-up of what the policy keeps no more, in
        this checkpoint's clean-up thread (``wait()`` and ``close()`` wait for it), for the run
        the save recorded (found in the caller's thread: a worker's has no task context)."""
        if self._retention is not None:
            import functools

            run = record.run if record is not None else None
            # the save that triggers it: nothing newer is deleted (a later save's commit, while
            # this clean-up runs, is that save's own clean-up's to decide)
            trigger = None
            if manifest is not None:
                from .history.cleanup import order_of

                trigger = order_of(manifest)  # the order fc.history lists it in
            work = functools.partial(self._clean_up, run, record is not None, trigger)
            self._janitor.get().request(work)

    def _clean_up(
        self, run: str | None = None, known: bool = False, trigger: tuple[int, int] | None = None
    ) -> None:
        """Apply the policy to this destination's generations (and, where they are this
        library's or the policy opts in, the previous attempt's): never this destination's
        object, nor the object loaded."""
        from .history.cleanup import clean
        from .history.recording import identity
        from .storage.registry import store_for
        from .storage.storelog import unwrapped

        policy = self._retention
        assert policy is not None
        store = store_for(self._dest)
        dests = [self._dest]
        src = self._src
        if not known:
            run = identity(self._dest)[0]  # the run this checkpoint's saves record (None: none)
        if (
            src is not None
            and src != self._dest
            and (policy.earlier_attempts or self._in_local_run)
            and unwrapped(store_for(src)) is unwrapped(store)
        ):
            dests.append(src)
        loaded = self._loaded_from  # the object loaded (a fallback load's may be a generation)
        # and, resuming in place, the generation that holds the loaded bytes since the next save
        protected = [u for u in (src, loaded) if u] + list(self._loaded_kept)
        # only this run's checkpoints: a source of another run (a warm start) is left alone;
        # this destination and its source are one run even where the manifests name none
        clean(
            store,
            dests,
            policy,
            protected=protected,
            writing=self._dest,
            run=run,
            infer_run=False,
            one_run=True,
            trigger=trigger,
        )

    def _wait_clean_up(self, timeout: float | None) -> bool:
        janitor = self._janitor.peek()
        return janitor is None or janitor.wait(timeout)

    def _transfer(
        self, action: Callable[[], SaveFigures], turn: Turn, scope: Scope
    ) -> tuple[SaveFigures, float]:
        """Run the upload in its turn; its figures and seconds (not logged: the final save on
        SIGTERM logs from the handler's thread, as a logging handler's lock may be held by the
        thread the signal stopped)."""
        from .util.cancellation import using

        turn.wait(scope)
        started = time.monotonic()
        with using(scope):
            try:
                figures = self._retry.call(action, f"save to {redact(self._dest)}", scope=scope)
            except Exception as exc:
                if scope.cancelled and not isinstance(exc, OperationCancelledError):
                    # What follows a cancel (close() removes the staging copy being read) is
                    # not the save's failure: it was cancelled, and committed nothing.
                    raise scope.error() from exc
                raise
        return figures, time.monotonic() - started

    # -- background saves ------------------------------------------------------

    def save_background(
        self, data: Data, *, step: int | None = None, metrics: dict[str, float] | None = None
    ) -> SaveHandle:
        """Start a save and return once ``data`` is safe from later changes, with its handle.

        Bytes are kept as given (a ``bytearray`` or ``memoryview`` is copied); a file or
        folder is first copied into a staging folder on its own filesystem, by reflink where
        the filesystem has them (see :mod:`flyte_checkpoint.lifecycle.snapshot`), so the caller may
        change it at once. The upload runs in this checkpoint's worker thread. At most one
        upload runs and one waits: a newer save replaces the waiting one, whose handle then
        reports ``superseded``. Saves commit in call order, with :meth:`save` and
        :meth:`save_sync` ones too.

        A failed save raises from its handle's ``result()``; if nobody called it, from this
        checkpoint's next save, :meth:`wait` or :meth:`close`, once.

        Raises:
            the error of an earlier background save that failed unseen (nothing is started);
            NotFoundError, UnsupportedDataError, SourceChangedError, OSError: from the snapshot
                (a full disk where the copy goes: WorkspaceError).
        """
        from .lifecycle.preemption import deferring

        record = self._record(step, metrics)
        self._raise_unseen()
        return deferring(lambda: self._start_background(data, record))

    def _start_background(self, data: Data, record: SaveRecord | None = None) -> SaveHandle:
        from .lifecycle.background import Job, SaveHandle
        from .lifecycle.saveorder import take
        from .util.cancellation import Scope

        what = f"save to {redact(self._dest)}"
        turn = take(self._dest)  # now, so the order is that of the calls
        staged = None
        try:
            scope = Scope(what)
            if isinstance(data, (str, os.PathLike)):
                from .lifecycle.snapshot import stage

                src = local_path(os.fspath(data))
                is_dir = _is_dir(src)
                leave_out = None
                if is_dir and is_local(self._dest):
                    from .storage.stores.local import leave_out_for

                    leave_out = leave_out_for(self._dest)
                staged = stage(src, is_dir, self._local_root, leave_out, what)
                data = staged.path
            action = self._prepare(data, record)
            handle = SaveHandle(what, scope)
            job = Job(handle, turn, scope, lambda: self._upload(action, turn, scope, record), staged, self)
        except BaseException:
            turn.leave()
            if staged is not None:
                staged.remove()
            raise
        self._lane.get().submit(job)
        return handle

    async def save_background_async(
        self, data: Data, *, step: int | None = None, metrics: dict[str, float] | None = None
    ) -> SaveHandle:
        """:meth:`save_background`, its snapshot taken in a worker thread (the event loop goes on)."""
        import asyncio

        from .lifecycle.preemption import notice

        notice()  # save_background's own check runs in the worker thread, where it cannot
        return await asyncio.to_thread(self.save_background, data, step=step, metrics=metrics)

    def wait(self, timeout: float | None = None) -> None:
        """Wait for every background save started on this checkpoint to end.

        Raises:
            SaveTimeoutError: they have not ended within ``timeout`` seconds (they go on).
            the error of a background save that failed unseen (once).
        """
        lane = self._lane.peek()
        if lane is None:
            self._wait_clean_up(timeout)
            return
        if not lane.wait(timeout):
            from .errors import SaveTimeoutError

            raise SaveTimeoutError(
                f"background saves to {redact(self._dest)} have not ended within {timeout:g}s; they go"
                " on: wait again, or close()"
            )
        self._wait_clean_up(timeout)
        self._raise_unseen()

    async def wait_async(self, timeout: float | None = None, *, cancel: bool = False) -> None:
        """:meth:`wait` without blocking the event loop.

        Cancelling the awaiting task leaves the saves running, unless ``cancel`` is true: then
        they are cancelled too (each commits nothing unless its commit had begun).
        """
        from .lifecycle.background import wait_handles

        lane = self._lane.peek()
        if lane is None:
            return
        await wait_handles(lane.handles(), timeout, cancel=cancel)
        self._raise_unseen()

    def _raise_unseen(self) -> None:
        lane = self._lane.peek()
        error = lane.take_unseen() if lane is not None else None
        if error is not None:
            raise error

    def _local_root(self) -> str:
        """The local root (made if needed), where staging folders go when on the source's filesystem."""
        self.path  # noqa: B018 - makes the root
        root = self._root
        assert root is not None
        return root

    def _stop_background(self) -> BaseException | None:
        """Wait for the background saves (bounded), cancel what is left; the error to raise."""
        lane = self._lane.peek()
        if lane is None:
            self._stop_clean_up()
            return None
        from .errors import ConfigurationError, SaveTimeoutError
        from .lifecycle.background import CLOSE_TIMEOUT_ENV, close_timeout

        problem: BaseException | None = None
        try:
            timeout = close_timeout()
        except ConfigurationError as exc:
            from .lifecycle.background import DEFAULT_CLOSE_TIMEOUT

            problem, timeout = exc, DEFAULT_CLOSE_TIMEOUT
        lane_ended = lane.wait(timeout)
        self._stop_clean_up()
        if not lane_ended:
            lane.cancel()
            lane.take_unseen()  # the timeout is what the caller hears of
            return SaveTimeoutError(
                f"background saves to {redact(self._dest)} did not end within {timeout:g}s"
                f" ({CLOSE_TIMEOUT_ENV}): they were cancelled and the previous checkpoint"
                " was kept. Raise the variable, or wait() for them before closing"
            )
        return lane.take_unseen() or problem

    def _stop_clean_up(self) -> None:
        """Wait (bounded) for the clean-up the last save started; one left running is harmless
        (each step is atomic, and the next clean-up finishes a half-done one)."""
        if self._janitor.peek() is None:
            return
        from .errors import ConfigurationError
        from .lifecycle.background import DEFAULT_CLOSE_TIMEOUT, close_timeout

        try:
            timeout = close_timeout()
        except ConfigurationError:
            timeout = DEFAULT_CLOSE_TIMEOUT
        if not self._wait_clean_up(timeout):
            logger().warning(
                "the retention clean-up of %s has not ended within %gs: left running (the next"
                " clean-up finishes what it began)",
                redact(self._dest),
                timeout,
            )

    def _prepare(self, data: Data, record: SaveRecord | None = None):
        """Check ``data`` now (so errors are not retried) and return the upload to run; with a
        ``record``, the upload sets its ``digest`` (docs/history.md)."""
        from .storage.registry import store_for
        from .util.transfers import SaveFigures

        dest = self._dest
        if isinstance(data, (bytes, bytearray, memoryview)):
            blob = bytes(data)

            def put_bytes() -> SaveFigures:
                store_for(dest).write_bytes(dest, blob)
                if record is not None:
                    from .history.recording import digest_of_bytes

                    record.digest, record.size = digest_of_bytes(blob), len(blob)
                return SaveFigures(len(blob), len(blob))

            return put_bytes
        if not isinstance(data, (str, os.PathLike)):
            raise UnsupportedDataError(
                f"save() takes bytes, a file path or a directory path, not {type(data).__name__}"
            )
        src = local_path(os.fspath(data))
        is_dir = _is_dir(src)
        progress = self._progress
        if is_dir:

            def put_tree() -> SaveFigures:
                from .format.archive import hash_ahead
                from .format.incremental import save_checked

                store = store_for(dest)  # copied bytes found damaged: warned, and saved again
                # The tree's files hashed while the base's index is read (a store over a network)
                ahead: list[Lookahead] = []

                def start() -> None:
                    if not ahead:
                        ahead.append(hash_ahead(src))

                def drop() -> None:
                    while ahead:
                        ahead.pop().close()

                def plan() -> Reuse | None:
                    try:
                        return self._reuse(store, None if is_local(dest) else start)
                    except BaseException:
                        drop()
                        raise

                def write(reuse: Reuse | None) -> SaveFigures:
                    lookahead = ahead.pop() if ahead else None
                    try:
                        return write_tree(store, reuse, lookahead)
                    finally:
                        if lookahead is not None:
                            lookahead.close()

                return save_checked(plan, write)

            def write_tree(store: BlobStore, reuse: Reuse | None, lookahead: Lookahead | None) -> SaveFigures:
                from .format.archive import pack_directory, tree_size
                from .format.index import IndexBuilder
                from .format.pipeline import ParallelGzipWriter
                from .storage.stores.local import leave_out_for

                counter = _Counter(progress, tree_size(src)) if progress else None
                with _digesting(store.open_write(dest), record) as writer:
                    leave_out = leave_out_for(dest) if is_local(dest) else None  # once its folder exists
                    index = IndexBuilder()
                    copy_run, keep = (None, 0) if reuse is None else (reuse.copy_run, reuse.copy_keep)
                    align = store.copy_limits.align if store.copy_limits is not None else 0
                    with ParallelGzipWriter(
                        writer,  # type: ignore[arg-type]
                        index=index,
                        copy_run=copy_run,
                        copy_keep=keep,
                        align=align,
                    ) as gz:
                        pack_directory(
                            src,
                            gz,  # type: ignore[arg-type]
                            leave_out=leave_out,
                            on_data=counter,
                            index=index,
                            reuse=reuse,
                            lookahead=lookahead,
                        )
                    if counter is not None:
                        counter.finish()
                sent = writer.bytes_written
                if reuse is None:
                    return SaveFigures(sent, sent)
                copied = reuse.files_copied
                base = redact(reuse.source.uri)
                return SaveFigures(sent + writer.bytes_copied, sent, index.file_count - copied, copied, base)

            return put_tree

        def put_file() -> SaveFigures:
            from .storage.blobstore import COPY_CHUNK
            from .util.sources import SourceFile

            store = store_for(dest)
            with SourceFile(src) as source:
                if progress is None:
                    store.upload_file(source, dest)
                else:
                    counter = _Counter(progress, source.size)
                    with store.open_write(dest) as writer:
                        while chunk := source.read(COPY_CHUNK):
                            writer.write(chunk)
                            counter(len(chunk))
                if not source.verified:
                    _verify_after_upload(source, store, dest)
                if record is not None:  # the file is unchanged (verified): read it once more, locally
                    from .history.recording import digest_of_source

                    record.digest, record.size = digest_of_source(source), source.size
                return SaveFigures(source.size, source.size)

        return put_file

    def _reuse(self, store: BlobStore, on_source: Callable[[], None] | None = None) -> Reuse | None:
        """What an incremental folder save copies from: the destination's object, else (an
        attempt's first save) the previous attempt's, if on the same store with an index
        (``on_source``: called when one is there, before its index is read)."""
        from .format.incremental import find_base
        from .storage.registry import store_for
        from .storage.storelog import unwrapped

        candidates = [self._dest] + ([self._src] if self._src else [])
        # the stores themselves: the logging level may change between two look-ups (wrapped once)
        return find_base(
            store, candidates, lambda uri: unwrapped(store_for(uri)) is unwrapped(store), on_source
        )

    def on_terminate(self, fn: Saver | None = None, *, wait_background: bool = False) -> Registration:
        """On SIGTERM (or ``fc.preempt()``), within the grace budget: let this checkpoint's
        background saves end (``wait_background``), then save ``fn()`` here (if given). See
        :mod:`flyte_checkpoint.lifecycle.preemption`. Unregistered by the returned registration's
        ``remove()``, or when this checkpoint is garbage-collected."""
        from .lifecycle.preemption import terminate_entries

        return terminate_entries(self, fn, wait_background=wait_background)

    # -- lifetime --------------------------------------------------------------

    def close(self) -> None:
        """Wait for background saves, then remove the workspace. The checkpoint stays usable.

        Background saves started are waited for, for at most ``FLYTE_CHECKPOINT_CLOSE_TIMEOUT``
        seconds (default 300); what is left then is cancelled (the previous checkpoint stays)
        and :class:`~flyte_checkpoint.errors.SaveTimeoutError` is raised once the workspace is
        removed. A background save that failed unseen raises here too (once).

        A download in flight is cancelled and removes what it restored when it stops; this
        returns without waiting for it. In a forked child the parent's workspace is left alone.
        """
        error = self._stop_background()
        self._remove_workspace()
        if error is not None:
            raise error

    def _remove_workspace(self) -> None:
        with self._lock.get():
            remove, loading = self._finalizer, self._loading
            self._root = self._finalizer = self._loaded = None
            self._restored = set()
            if loading is not None and remove is not None:
                self._stale.append(remove)
                remove = None
        if loading is not None:
            loading.cancel()
        if remove is not None:
            remove()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc is None:
            self.close()
            return
        # The block's own error goes on; a background save's is logged, not lost.
        error = self._stop_background()
        self._remove_workspace()
        if error is not None:
            logger().error("a background save failed while the block raised %r: %s", exc, error)

    def __repr__(self) -> str:
        src = redact(self._src) if self._src else None
        return f"Checkpoint(dest={redact(self._dest)!r}, src={src!r})"


def _check_fallback(names: tuple[str, ...] | None, fallback: bool) -> None:
    if fallback and names is not None:
        raise ValueError("load(fallback=True) restores a whole checkpoint: it takes no members")


def _member_names(members: Iterable[str] | None) -> tuple[str, ...] | None:
    """``members`` normalized (checked before anything is read), or None for a full load."""
    if members is None:
        return None
    from .format.partial import Selection

    return Selection.of(members).names


def _and_parents(name: str) -> Iterator[str]:
    """``a/b/c``, ``a/b``, ``a``."""
    while name:
        yield name
        name = name.rpartition("/")[0]


def _no_progress(done: int, total: int | None) -> None:
    pass


def _root_name() -> str:
    """A new local root's name (``flyte-checkpoint-ws-*``): held while its process lives, and
    removed by the next new root made in the temp folder once that process is gone (a SIGKILL
    leaves its workspace and staging copies)."""
    import secrets

    from .util.workfiles import ROOT

    return ROOT + secrets.token_hex(6)


def _new_janitor(dest: str) -> Janitor:
    from .history.cleanup import Janitor

    return Janitor(redact(dest))


def _checked_retention(retention: object) -> Retention | None:
    """``retention``, checked.

    Raises:
        ConfigurationError: it is not a :class:`~flyte_checkpoint.Retention`.
    """
    if retention is None:
        return None
    from .history.retention import Retention

    if not isinstance(retention, Retention):
        from .errors import ConfigurationError

        raise ConfigurationError(
            f"retention= takes fc.Retention(...), not {type(retention).__name__}: e.g."
            " retention=fc.Retention(keep_last=3)"
        )
    return retention


def _new_lane() -> Lane:
    from .lifecycle.background import Lane

    return Lane()


def _is_dir(src: Path) -> bool:
    """Whether ``src`` (to be saved) is a folder.

    Raises:
        NotFoundError: nothing is there.
        PathTooLongError: the path is longer than the system allows.
    """
    try:
        return stat.S_ISDIR(os.stat(src).st_mode)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            raise NotFoundError(f"nothing to save at {src}: the path does not exist") from None
        if exc.errno == errno.ENAMETOOLONG:
            raise PathTooLongError.for_path(
                str(src), "move the data to a shorter path and save it from there"
            ) from None
        raise


def _verify_after_upload(source, store, dest: str) -> None:
    """The check of a store whose ``upload_file`` read the file by its path, not through
    ``open_source``: it committed before this could look, so say that the object may be damaged."""
    from .errors import SourceChangedError
    from .storage.storelog import unwrapped

    try:
        source.verify()
    except SourceChangedError as exc:
        store_name = type(unwrapped(store)).__name__  # the store's own, at every logging level
        raise SourceChangedError(
            f"{source.path} changed while it was being saved, and {store_name}.upload_file"
            f" stored it before this was seen: {redact(dest)} may hold a damaged copy. Save again once"
            " the file is completely written (and have the store read through"
            " flyte_checkpoint.storage.kit.open_source)"
        ) from exc


class _Counter:
    """Adds up chunk sizes and reports the running total to a progress callback."""

    def __init__(self, progress: ProgressCallback, total: int | None) -> None:
        self._progress = progress
        self._total = total
        self.done = 0
        progress(0, total)

    def __call__(self, n: int) -> None:
        self.done += n
        if self._total is not None and self.done > self._total:  # more than foreseen (links' content)
            self._total = self.done
        self._progress(self.done, self._total)

    def finish(self) -> None:
        """Report the end: all that was done is the total (less than foreseen, if files were left out)."""
        if self._total != self.done:
            self._total = self.done
            self._progress(self.done, self._total)


def _digesting(writer: BlobWriter, record: SaveRecord | None) -> BlobWriter:
    """``writer``, its bytes and copies also digested into ``record`` (set at a clean commit)."""
    if record is None:
        return writer
    from .history.recording import DigestingWriter

    return DigestingWriter(writer, record)  # type: ignore[return-value]


def _noting_version(action: Callable[[], SaveFigures], record: SaveRecord) -> Callable[[], SaveFigures]:
    """``action``, noting in ``record.version`` the version its commit to the destination gave
    (each try anew), so that its manifest describes that object only (docs/history.md)."""

    def run() -> SaveFigures:
        from .storage.blobstore import noting_commits

        record.version = None
        with noting_commits() as seen:
            figures = action()
        record.version = seen.get(record.dest)
        return figures

    return run


def _keeping_generation(action: Callable[[], SaveFigures], record: SaveRecord) -> Callable[[], SaveFigures]:
    """``action``, first keeping the object it replaces as an older generation (once, in the
    save's turn: retries of the upload do not copy again)."""
    done = False

    def run() -> SaveFigures:
        nonlocal done
        if not done:
            done = True
            from .history.recording import keep_generation
            from .storage.registry import store_for

            keep_generation(store_for(record.dest), record)
        return action()

    return run
