"""``flyte-checkpoint``: see, fetch and seed checkpoints from a shell.

Commands::

    flyte-checkpoint backends              installed backends; the pip install for missing ones
    flyte-checkpoint inspect URI           tarball or payload, size, members (nothing extracted;
                                           --index: from the index alone, no scan)
    flyte-checkpoint pull URI DIR          restore into DIR, as Checkpoint.load() would
                                           (--member NAME: only that file or folder's files)
    flyte-checkpoint push PATH URI         save a file, a folder or stdin (-), as save() would;
                                           zero bytes only with --allow-empty
    flyte-checkpoint ls PREFIX             the objects under a prefix
    flyte-checkpoint rm URI                remove one object

Every command takes ``--json`` (one JSON document on stdout, for scripts), ``--debug``
(debug logging of retries and store calls, and the traceback of a failure) and ``-v``
(the info line of each transfer). ``push`` and ``pull`` show a progress bar on stderr
when it is a terminal (``--no-progress`` hides it, ``--progress`` forces it).

Exit status: 0 on success; 1 on a failure, with one line on stderr; 2 for a usage
error; 3 when there is no checkpoint at the URI (``pull``, ``inspect``, ``rm``).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NoReturn

from . import __version__
from .errors import (
    CheckpointError,
    ContainerNotFoundError,
    NotFoundError,
    ObjectReplacedError,
    PathTooLongError,
)
from .progress import ProgressBar, format_bytes, progress_bar
from .uri import is_local, local_path, redact, redact_text
from .util.workfiles import PULL, STAGED

if TYPE_CHECKING:
    from .storage.pinned import PinnedView

PROG = "flyte-checkpoint"

#: The progress bars being drawn (log lines blank the newest before they print).
_bars: list[ProgressBar] = []

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NO_CHECKPOINT = 3

__all__ = [
    "EXIT_ERROR",
    "EXIT_NO_CHECKPOINT",
    "EXIT_OK",
    "EXIT_USAGE",
    "EmptySaveError",
    "NoCheckpointError",
    "NoIndexError",
    "main",
]


class NoCheckpointError(NotFoundError):
    """There is no checkpoint at the URI: no object, or a zero-byte one (exit status 3)."""


class EmptySaveError(CheckpointError, ValueError):
    """``push`` was given zero bytes without ``--allow-empty`` (exit status 1)."""


class NoIndexError(CheckpointError, ValueError):
    """``inspect --index`` on an object that has no index (exit status 1)."""


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """An argument parser that reports a usage error in one line (raised, not printed)."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{message} (see '{self.prog} --help')")


# --------------------------------------------------------------------------- helpers


def _count(text: str) -> int:
    """A whole number of 0 or more, for argparse (its error becomes the usage error's line)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative: give 0 (all) or more")
    return value


def _positive(text: str) -> int:
    """A whole number of 1 or more, for argparse."""
    value = _count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not 1 or more")
    return value


def _size_text(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{format_bytes(n)} ({n} bytes)" if n >= 1024 else f"{n} bytes"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


#: Marks after an entry's name, as ``ls -F`` puts them.
_MARKS = {"dir": "/", "symlink": "@", "hardlink": "@"}


def _retry() -> Any:
    from .util.retry import RetryPolicy

    return RetryPolicy.from_env()


def _normalize(uri: str, param: str) -> str:
    from .uri import normalize

    return normalize(uri, param=param)


@contextlib.contextmanager
def _bar(args: argparse.Namespace, label: str) -> Iterator[ProgressBar | None]:
    """A progress bar on stderr when it is a terminal (or as ``--progress`` says), else ``None``."""
    with progress_bar(label, enabled=getattr(args, "progress", None)) as bar:
        if bar is not None:
            _bars.append(bar)
        try:
            yield bar
        finally:
            if bar is not None:
                _bars.remove(bar)


# --------------------------------------------------------------------------- backends


def cmd_backends(args: argparse.Namespace) -> dict[str, Any]:
    """Installed backends (winners first), known schemes not installed, plugins that failed."""
    from .storage.registry import KNOWN_SCHEMES, get_registry, install_hint

    registry = get_registry()
    backends = registry.backends()
    winner: dict[str, str] = {}
    for b in backends:
        for scheme in b.schemes:
            winner.setdefault(scheme, b.name)
    installed = []
    for b in backends:
        builtin = b.source == "builtin"
        installed.append(
            {
                "name": b.name,
                "schemes": list(b.schemes),
                "shadowed": {s: winner[s] for s in b.schemes if winner[s] != b.name},
                "description": b.spec.description,
                "source": b.source,
                "plugin": b.plugin,
                "distribution": "flyte-checkpoint" if builtin else b.distribution,
                "version": __version__ if builtin else b.version,
            }
        )
    missing: dict[str, dict[str, Any]] = {}
    for scheme, (extra, label) in KNOWN_SCHEMES.items():
        if scheme in winner:
            continue
        item = missing.setdefault(extra, {"extra": extra, "label": label, "schemes": [], "install": ""})
        item["schemes"].append(scheme)
        item["install"] = install_hint(scheme)
    broken = [
        {"plugin": p.name, "distribution": p.distribution, "error": f"{type(p.error).__name__}: {p.error}"}
        for p in registry.broken_plugins
    ]
    return {"backends": installed, "not_installed": list(missing.values()), "broken": broken}


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  " + "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1] for r in rows
    ]


def show_backends(result: dict[str, Any]) -> None:
    print("installed backends:")
    rows = []
    for b in result["backends"]:
        schemes = ", ".join(
            s + "://" + (f" (shadowed by {b['shadowed'][s]})" if s in b["shadowed"] else "")
            for s in b["schemes"]
        )
        dist = " ".join(x for x in (b["distribution"], b["version"]) if x) or b["plugin"]
        if b["source"] == "builtin":
            dist += " (built in)"
        elif b["source"] == "runtime":
            dist = "registered at runtime"
        rows.append([b["name"], schemes, dist, b["description"]])
    for line in _table(rows):
        print(line.rstrip())
    if result["not_installed"]:
        print("not installed:")
        rows = [
            [m["extra"], ", ".join(s + "://" for s in m["schemes"]), m["label"], m["install"]]
            for m in result["not_installed"]
        ]
        for line in _table(rows):
            print(line)
    if result["broken"]:
        print("failed to load:")
        for p in result["broken"]:
            dist = f" (from {p['distribution']})" if p["distribution"] else ""
            print(f"  {p['plugin']}{dist}: {p['error']}")


# --------------------------------------------------------------------------- inspect


def cmd_inspect(args: argparse.Namespace) -> dict[str, Any]:
    """Describe the object at ``args.uri`` without extracting it."""
    from .format.inspection import Member, inspect_uri

    uri = _normalize(args.uri, "URI")
    listed: list[dict[str, Any]] = []

    def keep(m: Member) -> None:
        listed.append({"name": m.name, "kind": m.kind, "size": m.size, "linkname": m.linkname})

    def once() -> Any:
        listed.clear()
        if args.index:
            from .format.inspection import inspect_index

            found = inspect_index(uri, on_member=keep if args.members else None)
            if found is None:
                raise NoIndexError(
                    f"{redact(uri)} has no index (a payload, or a tarball written by Flyte or an older"
                    " version): inspect it without --index, which reads it whole"
                )
            return found
        with _bar(args, "inspect") as bar:
            return inspect_uri(uri, progress=bar, on_member=keep if args.members else None)

    try:
        info = _retry().call(once, f"inspect of {redact(uri)}")
    except NotFoundError as exc:
        _reraise_as_no_checkpoint(exc)
    out = info.to_dict()
    out["uri"] = redact(uri)
    total_entries = len(out["entries"])
    if args.limit:
        out["entries"] = out["entries"][: args.limit]
    out["entries_total"] = total_entries
    if args.members:
        out["member_list"] = listed
    return out


_FORMATS = {
    "tar.gz": "gzip-compressed tar",
    "tar": "uncompressed tar",
    "gzip": "gzip-compressed bytes",
    "raw": "raw bytes",
    "empty": "zero bytes",
}


def show_inspect(r: dict[str, Any]) -> None:
    print(r["uri"])
    print(f"  kind:      {r['kind']} ({_FORMATS[r['format']]})")
    print(f"  size:      {_size_text(r['size'])}")
    if r["kind"] == "empty":
        print("  load() treats a zero-byte object as no checkpoint")
        return
    if r["kind"] == "payload":
        print("  load() restores it as the file payload")
        return
    if r.get("from_index"):
        print(
            f"  files:     {r['members']} in the index (folders and symbolic links: inspect without --index)"
        )
        print(f"  unpacked:  {_size_text(r['unpacked_bytes'])} of file data")
    else:
        counts = ", ".join(
            _plural(r[k], word) for k, word in (("files", "file"), ("dirs", "folder"), ("links", "link"))
        )
        print(f"  members:   {r['members']} ({counts})")
        print(f"  unpacked:  {_size_text(r['unpacked_bytes'])}")
    if r.get("index_error"):
        print(f"  index:     refused: {r['index_error']}")
    elif r.get("indexed_files") is not None:
        print(f"  index:     {_plural(r['indexed_files'], 'file')} (one file loads by ranged reads)")
    elif r["format"] == "tar.gz":
        print("  index:     none (written by Flyte or an older version: load_file streams it)")
    if r["entries"]:
        print("  top entries (largest first):")
        width = max(len(format_bytes(e["size"])) for e in r["entries"])
        for e in r["entries"]:
            name = e["name"] + _MARKS.get(e["kind"], "")
            count = f"  ({e['members']} members)" if e["kind"] == "dir" else ""
            print(f"    {format_bytes(e['size']).rjust(width)}  {name}{count}")
        more = r["entries_total"] - len(r["entries"])
        if more > 0:
            print(f"    ... and {more} more (--limit 0 shows all)")
    for reason in r["refused"]:
        print(f"  load() would refuse {reason}")
    for m in r.get("member_list", []):
        link = f" -> {m['linkname']}" if m["linkname"] else ""
        print(f"  {m['kind']:<8} {m['size']:>12}  {m['name']}{link}")


# --------------------------------------------------------------------------- pull


def _pull_once(store: Any, uri: str, dest: Path, bar: ProgressBar | None) -> tuple[bool, int]:
    from .storage.pinned import read_pinned

    with read_pinned(store, uri) as view:  # one version read, whatever commits meanwhile
        if view is None:
            _not_a_prefix(store, uri)
        _no_checkpoint(uri, None if view is None else view.size)
        assert view is not None
        return _pull_version(view, uri, dest, bar)


def _pull_version(store: PinnedView, uri: str, dest: Path, bar: ProgressBar | None) -> tuple[bool, int]:
    from .format.restore import restore_object
    from .util.heldfolders import holding

    size = store.size
    dest.parent.mkdir(parents=True, exist_ok=True)
    # held while the pull runs; a pull killed meanwhile leaves it to the next one made here
    with holding(str(dest.parent), PULL) as held:
        staging = os.path.join(held, STAGED)  # a folder of its own: no member meets the lock file
        os.mkdir(staging, 0o700)
        done = 0

        def counted(n: int) -> None:
            nonlocal done
            done += n
            if bar is not None:
                bar(done, size)

        if bar is not None:
            bar(0, size)
        try:
            is_tar = restore_object(store, uri, size, staging, on_chunk=counted)
        except NotFoundError as exc:  # removed since the stat
            _reraise_as_no_checkpoint(exc)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(staging, 0o777 & ~mask)
        if dest.exists():  # an empty folder: keep it, fill it
            for name in os.listdir(staging):
                os.rename(os.path.join(staging, name), dest / name)
        else:
            os.rename(staging, dest)
    return is_tar, size


def _no_checkpoint(uri: str, size: int | None) -> None:
    """Raise :class:`NoCheckpointError` unless ``size`` is that of a checkpoint (absent or zero: none)."""
    if size is None:
        raise NoCheckpointError(f"no checkpoint at {redact(uri)}: there is no object there")
    if size == 0:
        raise NoCheckpointError(f"no checkpoint at {redact(uri)}: the object is empty (zero bytes)")


#: How many of the objects under a prefix an error names.
PREFIX_SHOWN = 3


def _not_a_prefix(store: Any, uri: str) -> None:
    """Raise :class:`NoCheckpointError` naming a few objects under ``uri`` taken as a prefix,
    if it has any: a pull of a folder or prefix instead of one of its checkpoints."""
    import itertools

    prefix = uri.rstrip("/") + "/"
    found = [u for u in itertools.islice(store.list(prefix), 100) if not _is_marker(u, prefix)]
    if not found:
        return
    shown = ", ".join(redact(u)[len(redact(prefix)) :] for u in found[:PREFIX_SHOWN])
    more = " and more" if len(found) > PREFIX_SHOWN else ""
    raise NoCheckpointError(
        f"no checkpoint at {redact(uri)}: it is a prefix, not an object, with checkpoints under it"
        f" ({shown}{more}): pull one of them, as {redact(found[0])}"
    )


def _reraise_as_no_checkpoint(exc: NotFoundError) -> NoReturn:
    """Raise a missing object as :class:`NoCheckpointError` (exit status 3); a missing bucket
    or container stays what it is (a configuration error, exit status 1)."""
    if isinstance(exc, (ContainerNotFoundError, NoCheckpointError)):
        raise exc
    raise NoCheckpointError(str(exc)) from exc


def _pull_to_stdout(args: argparse.Namespace, uri: str) -> dict[str, Any]:
    """Write the object's bytes, as stored, to stdout (streamed; not retried once bytes are out)."""
    from .storage.blobstore import COPY_CHUNK
    from .storage.registry import store_for
    from .util.logs import log_transfer

    store = store_for(uri)
    if is_local(uri) and local_path(uri).is_dir():
        _not_a_prefix(store, uri)  # else the store's own "is a directory" error
    pinned = _retry().call(lambda: store.pin(uri), f"stat of {redact(uri)}")  # one version streamed
    if pinned is None:
        _not_a_prefix(store, uri)  # a prefix: name a few checkpoints under it
        _no_checkpoint(uri, None)
    assert pinned is not None
    out = sys.stdout.buffer
    started = time.monotonic()
    done = 0
    with pinned:
        size = pinned.size
        _no_checkpoint(uri, size)
        with _bar(args, "pull") as bar:
            if bar is not None:
                bar(0, size)
            try:
                with pinned.open_read() as src:
                    while chunk := src.read(COPY_CHUNK):
                        out.write(chunk)
                        done += len(chunk)
                        if bar is not None:
                            bar(done, size)
            except NotFoundError as exc:  # removed since the pin
                _reraise_as_no_checkpoint(exc)
            except ObjectReplacedError as exc:  # what went out is part of an object: say so
                raise ObjectReplacedError(
                    f"{redact(uri)} changed while it was written to stdout (another save replaced it):"
                    f" the {done} bytes written are not a whole object; run the command again"
                ) from exc
            out.flush()
    seconds = time.monotonic() - started
    log_transfer("loaded", uri, done, seconds)
    return {
        "uri": redact(uri),
        "dir": "-",
        "kind": "stream",
        "path": "-",
        "size": done,
        "seconds": seconds,  # rounded once, when shown
    }


def _pull_members(store: Any, uri: str, dest: Path, names: tuple[str, ...]) -> tuple[bool, int, int]:
    """Restore the files ``names`` select into ``dest``: whether the index was used, the
    object's size, and the bytes read."""
    from .format.partial import Selection, restore_into
    from .storage.pinned import read_pinned

    read = 0

    def counted(n: int) -> None:
        nonlocal read
        read += n

    with read_pinned(store, uri) as view:  # one version read, whatever commits meanwhile
        if view is None:
            _not_a_prefix(store, uri)
        _no_checkpoint(uri, None if view is None else view.size)
        assert view is not None
        dest.parent.mkdir(parents=True, exist_ok=True)  # DIR itself is made only when files come
        place = functools.partial(os.path.join, str(dest))
        restored = restore_into(
            view, uri, view.size, Selection(names), place, beside=str(dest.parent), on_read=counted
        )
    return restored.indexed, view.size, read


def cmd_pull(args: argparse.Namespace) -> dict[str, Any]:
    """Restore the checkpoint at ``args.uri`` into the new or empty folder ``args.dir``, or
    write its bytes to stdout when ``args.dir`` is ``-``."""
    uri = _normalize(args.uri, "URI")
    if args.dir == "-":
        return _pull_to_stdout(args, uri)
    dest = Path(args.dir).expanduser().absolute()
    try:
        return _pull_to_folder(args, uri, dest)
    except OSError as exc:  # a DIR (or a working file beside it) over the system's limits
        if exc.errno != errno.ENAMETOOLONG or isinstance(exc, CheckpointError):
            raise
        failed = exc.filename if isinstance(exc.filename, str) else None
        raise PathTooLongError.for_path(str(dest), "pull into a shorter path", failed=failed) from exc


def _pull_to_folder(args: argparse.Namespace, uri: str, dest: Path) -> dict[str, Any]:
    from .format.restore import PAYLOAD
    from .storage.registry import store_for
    from .util.logs import log_transfer

    if dest.exists() and not dest.is_dir():
        raise FileExistsError(f"{dest} exists and is not a folder: pull into a new or empty folder")
    if is_local(uri) and local_path(uri).is_dir():
        _not_a_prefix(store_for(uri), uri)  # else the store's own "is a directory" error
    if dest.is_symlink() and not dest.exists():
        raise FileExistsError(
            f"{dest} is a link to {os.readlink(dest)}, which does not exist: pull into a new or empty"
            " folder (remove the link, or make the folder it leads to)"
        )
    if dest.is_dir() and any(dest.iterdir()):
        raise FileExistsError(f"{dest} is not empty: pull into a new or empty folder")
    store = store_for(uri)
    started = time.monotonic()
    if args.member:
        from .format.partial import Selection

        names = Selection.of(args.member).names
        indexed, size, read = _retry().call(
            lambda: _pull_members(store, uri, dest, names), f"pull of {redact(uri)}"
        )
        seconds = time.monotonic() - started
        log_transfer("loaded", uri, read, seconds)
        return {
            "uri": redact(uri),
            "dir": str(dest),
            "kind": "members",
            "path": str(dest),
            "members": list(names),
            "indexed": indexed,
            "size": size,
            "bytes_read": read,
            "seconds": seconds,  # rounded once, when shown
        }
    with _bar(args, "pull") as bar:
        is_tar, size = _retry().call(lambda: _pull_once(store, uri, dest, bar), f"pull of {redact(uri)}")
    seconds = time.monotonic() - started
    log_transfer("loaded", uri, size, seconds)
    path = dest if is_tar else dest / PAYLOAD
    return {
        "uri": redact(uri),
        "dir": str(dest),
        "kind": "tarball" if is_tar else "payload",
        "path": str(path),
        "size": size,
        "seconds": seconds,  # rounded once, when shown
    }


def show_pull(r: dict[str, Any]) -> None:
    if r["dir"] == "-":  # stdout held the object itself
        return
    if r["kind"] == "members":
        how = "by its index" if r["indexed"] else "streamed: no index"
        print(
            f"restored {', '.join(r['members'])} of {r['uri']} into {r['dir']}: read"
            f" {format_bytes(r['bytes_read'])} of {format_bytes(r['size'])} ({how}) in {r['seconds']:.2f}s"
        )
        return
    what = f"into {r['dir']}" if r["kind"] == "tarball" else f"as {r['path']}"
    print(f"restored {r['kind']} {r['uri']} ({format_bytes(r['size'])}) {what} in {r['seconds']:.2f}s")


# --------------------------------------------------------------------------- push


def _push_stream(args: argparse.Namespace, uri: str, stream: BinaryIO) -> tuple[int, float]:
    """Stream ``stream`` into the object at ``uri`` (memory bounded by one chunk and the store's
    writer); returns the bytes stored and the seconds taken (as logged). Read once, so not
    retried: a failure stores nothing.

    Raises:
        EmptySaveError: the stream was empty and ``--allow-empty`` was not given.
    """
    with _woken_by_signals(stream) as read:
        return _push_chunks(args, uri, read)


@contextlib.contextmanager
def _woken_by_signals(stream: BinaryIO) -> Iterator[Callable[[int], bytes]]:
    """``read(n)``: up to ``n`` bytes of ``stream`` (fewer only at its end), from which Ctrl-C and
    SIGTERM always wake the main thread. A signal the kernel delivers to another thread (a
    store's worker) leaves a blocking read of a pipe waiting for more input; here the read waits
    in ``select`` on the stream and on the signal wake-up descriptor, which any thread's signal
    writes to. (Where that cannot be done, not POSIX or not the main thread, a plain read.)"""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        fd = -1
    if fd < 0 or os.name != "posix" or threading.current_thread() is not threading.main_thread():
        yield stream.read
        return
    import select

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    previous = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)

    def read(n: int) -> bytes:  # from the descriptor: nothing was read through stream's buffer
        out = bytearray()
        while len(out) < n:
            ready, _, _ = select.select([fd, wake_r], [], [])
            if wake_r in ready:  # a signal came: its handler runs as this returns to Python
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 512)
                continue
            data = os.read(fd, n - len(out))
            if not data:
                break
            out += data
        return bytes(out)

    try:
        yield read
    finally:
        signal.set_wakeup_fd(previous)
        os.close(wake_r)
        os.close(wake_w)


def _push_chunks(args: argparse.Namespace, uri: str, read: Callable[[int], bytes]) -> tuple[int, float]:
    from .storage.blobstore import COPY_CHUNK
    from .storage.registry import store_for
    from .util.logs import log_transfer

    chunk = read(COPY_CHUNK)
    if not chunk and not args.allow_empty:
        raise _empty_save("stdin was empty", uri)
    store = store_for(uri)
    started = time.monotonic()
    done = 0
    with _bar(args, "push") as bar, store.open_write(uri) as writer:
        if bar is not None:
            bar(0, None)
        while chunk:
            writer.write(chunk)
            done += len(chunk)
            if bar is not None:
                bar(done, None)
            chunk = read(COPY_CHUNK)
    seconds = time.monotonic() - started
    log_transfer("saved", uri, done, seconds)
    return done, seconds


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during a command; ``str()`` says what it left at the URI, if known."""

    def __init__(self, message: str = "", *, signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.signum = signum


def _on_sigterm(signum: int, frame: object) -> None:
    raise Interrupted(signum=signum)  # as Ctrl-C: a save in progress aborts, its temp files go


Version = tuple[int, str | None] | None


def _version_at(uri: str) -> Version:
    """The size and version of the object at ``uri`` (None when absent)."""
    from .storage.registry import store_for

    pinned = store_for(uri).pin(uri)
    if pinned is None:
        return None
    with pinned:
        return pinned.size, pinned.version


def interrupted_push(uri: str, before: Version, after: Version | Exception) -> str:
    """What an interrupted push left at ``uri``, from the object's size and version before the
    push and after the interrupt (or the error that looking gave)."""
    where = redact(uri)
    if isinstance(after, Exception):
        return f"whether the push committed is unknown ({_message(after)}): check with 'inspect {where}'"
    if after == before and (before is None or before[1] is not None):
        if before is None:
            return f"nothing was saved: there is still no checkpoint at {where}"
        return f"nothing was saved: {where} holds the checkpoint it held before"
    if after is None or after == before:  # removed meanwhile, or a store without versions
        return f"whether the push committed is unknown: check with 'inspect {where}'"
    return f"the push had committed: {where} holds the new checkpoint"


@contextlib.contextmanager
def _explained_interrupt(uri: str) -> Iterator[None]:
    """A Ctrl-C or SIGTERM in the block is raised as :class:`Interrupted` saying what the push
    left at ``uri``: the previous object (nothing saved) or the new one (it had committed)."""
    before = _version_at(uri)
    try:
        yield
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        try:
            after: Version | Exception = _version_at(uri)
        except Exception as error:  # the store cannot say now
            after = error
        raise Interrupted(interrupted_push(uri, before, after), signum=signum) from None


def _empty_save(what: str, uri: str) -> EmptySaveError:
    # A zero-byte object loads as "no checkpoint": a broken pipe would silently erase one.
    return EmptySaveError(
        f"{what}: refusing to save zero bytes at {redact(uri)}: load() reads an empty object as"
        " no checkpoint, so this would erase any checkpoint there; pass --allow-empty to save it anyway"
    )


def cmd_push(args: argparse.Namespace) -> dict[str, Any]:
    """Save ``args.path`` (a file, a folder, or ``-`` for stdin) as the checkpoint at ``args.uri``."""
    from .checkpoint import Checkpoint
    from .uri import local_path

    uri = _normalize(args.uri, "URI")
    if args.path == "-":
        with _explained_interrupt(uri):
            size, seconds = _push_stream(args, uri, sys.stdin.buffer)
        return {
            "uri": redact(uri),
            "source": "-",
            "kind": "payload",
            "size": size,
            "sent": size,
            "files_sent": None,
            "files_copied": None,
            "seconds": seconds,  # rounded once, when shown
        }
    src = local_path(args.path)
    if not src.exists():
        # Not NoCheckpointError: exit status 3 means "no checkpoint at the URI", not a bad PATH.
        raise NotFoundError(f"nothing to push at {src}: the path does not exist")
    kind = "tarball" if src.is_dir() else "payload"
    if kind == "payload" and src.stat().st_size == 0 and not args.allow_empty:
        raise _empty_save(f"{src} is empty", uri)
    with _explained_interrupt(uri), _bar(args, "push") as bar, Checkpoint(uri, progress=bar) as cp:
        cp.save_sync(src)
    assert cp._last_save is not None  # save_sync returned: its save ended
    figures, seconds = cp._last_save  # the figures the INFO line gave
    return {
        "uri": redact(uri),
        "source": str(src),
        "kind": kind,
        "size": figures.size,
        "sent": figures.sent,
        "files_sent": figures.files_sent,
        "files_copied": figures.files_copied,
        "seconds": seconds,  # rounded once, when shown
    }


def _rounded(result: dict[str, Any]) -> dict[str, Any]:
    """The result for ``--json``: its seconds to the millisecond (the lines printed round the same
    unrounded figure to two places, as the INFO line does, so the two never differ by a rounding)."""
    if isinstance(result.get("seconds"), float):
        return {**result, "seconds": round(result["seconds"], 3)}
    return result


def show_push(r: dict[str, Any]) -> None:
    """One line with the figures of the INFO line, sizes also in binary units."""
    source = "stdin" if r["source"] == "-" else r["source"]
    line = f"saved {source} as {r['kind']} {r['uri']}: {r['size']} bytes ({format_bytes(r['size'])})"
    if r.get("files_copied") is not None:
        copied = r["size"] - r["sent"]
        line += (
            f"; sent {r['sent']} bytes ({format_bytes(r['sent'])}) and {r['files_sent']} files,"
            f" copied {copied} bytes ({format_bytes(copied)}) and {r['files_copied']} files"
        )
    print(f"{line} in {r['seconds']:.2f}s")


# --------------------------------------------------------------------------- ls, rm


def _is_marker(uri: str, prefix: str) -> bool:
    """Whether ``uri`` (listed under ``prefix``) is one of the library's own files rather than a
    checkpoint: a named run's attempt marker ``.attempt`` or lock ``.FUNCTION.lock``, a sharded
    save's folder ``NAME.fcp-shard/`` (or locally ``.fcp-tmp-NAME.shard/``), a checkpoint's history
    ``NAME.fcp-history/`` (manifests, kept generations: ``flyte-checkpoint history``), or another working
    file (:mod:`flyte_checkpoint.util.workfiles`: staging folders, temporary files)."""
    from .lifecycle.runs import MARKER
    from .util.workfiles import is_working_file

    parts = uri[len(prefix) :].rstrip("/").split("/") if uri.startswith(prefix) else [uri.rstrip("/")]
    last = parts[-1]
    if last == MARKER or (last.startswith(".") and last.endswith(".lock") and len(last) > len("..lock")):
        return True
    return any(p.endswith((".fcp-shard", ".fcp-history")) or is_working_file(p) for p in parts)


def cmd_ls(args: argparse.Namespace) -> dict[str, Any]:
    """The objects whose URI starts with ``args.prefix``; with ``--long`` their sizes and
    modification times (from the store's listing), with ``--no-recursive`` one level, folders too.
    The library's own files (named runs' markers and locks, sharded saves' folders, temporary
    files) are left out unless ``--all``.

    Raises:
        NoCheckpointError: nothing is listed under the prefix (exit status 3).
    """
    from .storage.registry import store_for

    prefix = _normalize(args.prefix, "PREFIX")
    if args.prefix.rstrip().endswith("/") and not prefix.endswith("/"):
        prefix += "/"
    store = store_for(prefix)
    where = f"listing of {redact(prefix)}"
    objects: list[dict[str, Any]] = []
    hidden = 0

    def shown(uri: str) -> bool:
        nonlocal hidden
        if args.all or not _is_marker(uri, prefix):
            return True
        hidden += 1
        return False

    if args.recursive and not args.long:
        for u in _retry().call(lambda: list(store.list(prefix)), where):
            if shown(u):
                objects.append({"uri": redact(u)})
        return _listed(prefix, objects, hidden)
    infos = _retry().call(lambda: list(store.list_details(prefix, recursive=args.recursive)), where)
    for info in infos:
        if not shown(info.uri):
            continue
        item: dict[str, Any] = {"uri": redact(info.uri)}
        if info.is_folder:
            item["folder"] = True
        if args.long:
            item["size"] = info.size
            item["modified"] = info.modified.isoformat() if info.modified is not None else None
        objects.append(item)
    return _listed(prefix, objects, hidden)


def _listed(prefix: str, objects: list[dict[str, Any]], hidden: int) -> dict[str, Any]:
    """``ls``'s document; an empty listing is an error that says so (as ``pull`` of no object)."""
    if not objects:
        what = f"only {hidden} of the library's own files (--all lists them)" if hidden else "no object"
        raise NoCheckpointError(
            f"nothing under {redact(prefix)}: {what} has a URI that starts with it; check the"
            " prefix (end it with '/' for a folder)"
        )
    return {"prefix": redact(prefix), "count": len(objects), "hidden": hidden, "objects": objects}


def _when(iso: str | None) -> str:
    """An ISO time as ``2026-12-03 10:15:02`` in UTC (``-`` when unknown)."""
    if iso is None:
        return "-"
    from datetime import datetime, timezone

    return datetime.fromisoformat(iso).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def show_ls(r: dict[str, Any]) -> None:
    for o in r["objects"]:
        if "size" not in o:
            print(o["uri"])
        elif o.get("folder"):
            print(f"{'PRE':>14}  {'':19}  {o['uri']}")
        else:
            size = "-" if o["size"] is None else str(o["size"])
            print(f"{size:>14}  {_when(o['modified']):>19}  {o['uri']}")


def cmd_history(args: argparse.Namespace) -> dict[str, Any]:
    """The checkpoints at ``args.uri``, newest first, from the listing and manifests only
    (docs/history.md).

    Raises:
        NoCheckpointError: no checkpoint is there (exit status 3).
    """
    from .history.listing import history

    uri = _normalize(args.uri, "URI")
    entries = history(uri)
    if not entries:
        raise NoCheckpointError(
            f"no checkpoint at or under {redact(uri)}: check the URI (a checkpoint, or a run's folder)"
        )
    return {"uri": redact(uri), "count": len(entries), "checkpoints": [e.to_dict() for e in entries]}


def show_history(r: dict[str, Any]) -> None:
    from datetime import datetime, timezone

    print(f"{'ATTEMPT':>7} {'GEN':>5} {'STEP':>10} {'SIZE':>12}  {'TIME (UTC)':19}  {'METRICS':24}  URI")
    for c in r["checkpoints"]:
        when = "-"
        if c["time"] is not None:
            when = datetime.fromtimestamp(c["time"], timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        if not c["manifest"]:
            metrics = "(no manifest)"
        else:
            metrics = ",".join(
                f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in c["metrics"].items()
            )
        dash = lambda v: "-" if v is None else str(v)  # noqa: E731
        print(
            f"{dash(c['attempt']):>7} {dash(c['generation']):>5} {dash(c['step']):>10} {c['size']:>12}"
            f"  {when:19}  {metrics or '-':24}  {c['uri']}"
        )


def cmd_rm(args: argparse.Namespace) -> dict[str, Any]:
    """Remove the object at ``args.uri``; its absence is an error unless ``--force``."""
    from .storage.registry import store_for

    uri = _normalize(args.uri, "URI")
    store = store_for(uri)

    def once() -> int | None:
        size = store.stat(uri)
        if size is not None:
            store.delete(uri)
        return size

    size = _retry().call(once, f"removal of {redact(uri)}")
    if size is None and not args.force:
        raise NoCheckpointError(
            f"nothing to remove at {redact(uri)}: there is no object there (--force ignores this)"
        )
    return {"uri": redact(uri), "removed": size is not None, "size": size}


def show_rm(r: dict[str, Any]) -> None:
    if r["removed"]:
        print(f"removed {r['uri']} ({format_bytes(r['size'])})")
    else:
        print(f"nothing at {r['uri']}")


def _keep_best(text: str) -> tuple[str, str, int]:
    """``METRIC:min|max:K`` for argparse."""
    metric, _, rest = text.rpartition(":")
    metric, _, mode = metric.rpartition(":")
    try:
        k = int(rest)
    except ValueError:
        k = -1
    if not metric or mode not in ("min", "max") or k < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not METRIC:min:K or METRIC:max:K (e.g. val_loss:min:3)"
        )
    return metric, mode, k


def cmd_gc(args: argparse.Namespace) -> dict[str, Any]:
    """Apply a retention policy to a checkpoint (URI: its generations) or to every checkpoint
    under a prefix (ending with '/': each run's, attempts' objects included).

    Raises:
        NoCheckpointError: no manifest under the URI (exit status 3): nothing to decide from.
    """
    from .history.cleanup import clean, destinations_under
    from .history.manifest import read_manifests
    from .history.retention import Retention
    from .storage.registry import store_for

    policy = Retention(
        keep_last=args.keep_last, keep_best=args.keep_best or None, keep_every_steps=args.keep_every_steps
    )
    uri = _normalize(args.uri, "URI")
    store = store_for(uri)
    if uri.endswith("/") or (is_local(uri) and os.path.isdir(local_path(uri))):
        prefix = uri.rstrip("/") + "/"
        dests = destinations_under(store, prefix)
        objects = "all"
    else:
        dests, objects = [uri], "generations"
    runs = sorted({m.run or "" for d in dests for m in read_manifests(store, d)})
    if not runs:
        raise NoCheckpointError(
            f"no checkpoint history under {redact(uri)}: gc decides from the manifests that saves"
            " write (flyte-checkpoint ls -a shows them); objects without one are never deleted"
        )
    out: dict[str, Any] = {"uri": redact(uri), "dry_run": args.dry_run, "policy": policy.describe()}
    kept, deleted, finished, skipped, more = [], [], [], [], False
    for run in runs:
        r = clean(
            store,
            dests,
            policy,
            run=run or None,
            infer_run=False,  # each run on its own, those whose manifests name none too
            objects=objects,
            limit=args.limit,
            dry_run=args.dry_run,
        )
        mine = [d for d in r.decisions if (d.candidate.run or "") == run and d.candidate.managed]
        kept += [{"uri": redact(d.candidate.uri), "why": list(d.reasons)} for d in mine if d.keep]
        deleted += [redact(u) for u in r.deleted]
        finished += [redact(u) for u in r.finished]
        skipped += [{"uri": redact(u), "why": why} for u, why in r.skipped]
        more = more or r.more
    out.update(kept=kept, deleted=deleted, finished=finished, skipped=skipped, more=more)
    return out


def show_gc(r: dict[str, Any]) -> None:
    verb = "would delete" if r["dry_run"] else "deleted"
    for k in r["kept"]:
        print(f"keep    {k['uri']}  ({'; '.join(k['why'])})")
    for s in r["skipped"]:
        print(f"skip    {s['uri']}  ({s['why']})")
    for u in r["deleted"]:
        print(f"{'delete' if r['dry_run'] else 'deleted'} {u}")
    for u in r["finished"]:
        print(f"{'finish' if r['dry_run'] else 'finished'} {u}  (a clean-up killed midway had begun it)")
    n = len(r["deleted"]) + len(r["finished"])
    print(f"{verb} {_plural(n, 'checkpoint')}, kept {len(r['kept'])} ({r['policy']})")
    if r["more"]:
        print("more to delete: run gc again (or raise --limit)")


# --------------------------------------------------------------------------- parser


#: The examples each command's ``--help`` ends with.
_EXAMPLES = {
    "backends": """
  flyte-checkpoint backends
  flyte-checkpoint backends --json""",
    "inspect": """
  flyte-checkpoint inspect s3://my-bucket/run-7/attempt-1/ckpt
  flyte-checkpoint inspect /tmp/store/ckpt --members --limit 0
  flyte-checkpoint inspect s3://my-bucket/run-7/attempt-1/ckpt --index --members""",
    "pull": """
  flyte-checkpoint pull s3://my-bucket/run-7/attempt-1/ckpt restored
  flyte-checkpoint pull s3://my-bucket/run-7/attempt-1/ckpt restored --member optim --member meta.json
  flyte-checkpoint pull s3://my-bucket/run-7/attempt-1/step - > step.txt
  flyte-checkpoint pull /tmp/store/ckpt - | tar xzf - -C restored""",
    "push": """
  flyte-checkpoint push state s3://my-bucket/run-7/attempt-1/ckpt
  flyte-checkpoint push model.pt /tmp/store/run-7/ckpt
  echo 1200 | flyte-checkpoint push - s3://my-bucket/run-7/attempt-1/step""",
    "ls": """
  flyte-checkpoint ls s3://my-bucket/run-7/
  flyte-checkpoint ls -l --no-recursive /tmp/store/""",
    "history": """
  flyte-checkpoint history s3://my-bucket/run-7/
  flyte-checkpoint history /tmp/store/run-7/train/0/_flytecheckpoints --json""",
    "rm": """
  flyte-checkpoint rm s3://my-bucket/run-7/attempt-1/step
  flyte-checkpoint rm -f /tmp/store/ckpt""",
    "gc": """
  flyte-checkpoint gc s3://my-bucket/run-7/attempt-1/ckpt --keep-last 3 --dry-run
  flyte-checkpoint gc s3://my-bucket/runs/run-7/ --keep-last 2 --keep-best val_loss:min:1""",
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``flyte-checkpoint`` (each command's ``func`` and ``show`` are set)."""
    common = _Parser(add_help=False)
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON document"
    )
    common.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="debug logging; tracebacks of failures",
    )
    common.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help="log each transfer (info lines)",
    )
    # Only on the commands that move an object's bytes, the only ones that draw a bar.
    moving = _Parser(add_help=False)
    moving.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=argparse.SUPPRESS,
        help="force the progress bar on stderr on or off (default: on when stderr is a terminal)",
    )
    parser = _Parser(
        prog=PROG,
        description="See, fetch and seed checkpoints (local paths or any installed backend).",
        epilog="Exit status: 0 success, 1 failure, 2 usage error, 3 no checkpoint at the URI.\n\n"
        "examples:\n" + "\n".join(_EXAMPLES[c].split("\n")[1] for c in _EXAMPLES) + "\n\n"
        "'flyte-checkpoint COMMAND --help' describes each command and shows more examples.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)

    def command(
        name: str, helptext: str, func: Callable[..., Any], show: Callable[..., None], *, moves: bool = False
    ) -> _Parser:
        p = sub.add_parser(
            name,
            help=helptext,
            description=helptext,
            epilog="examples:" + _EXAMPLES[name],
            formatter_class=argparse.RawDescriptionHelpFormatter,
            parents=[common, moving] if moves else [common],
        )
        p.set_defaults(func=func, show=show)
        return p

    command(
        "backends", "list installed backends, and how to add the missing ones", cmd_backends, show_backends
    )
    p = command(
        "inspect", "describe a checkpoint without extracting it", cmd_inspect, show_inspect, moves=True
    )
    p.add_argument("uri", metavar="URI", help="the checkpoint object: a local path or a URI (s3://...)")
    p.add_argument("--limit", type=_count, default=10, help="top entries to show (0: all; default 10)")
    p.add_argument("--members", action="store_true", help="also list every member of a tarball")
    p.add_argument(
        "--index",
        action="store_true",
        help="read only the object's index (two ranged reads, no scan): its files, not its folders"
        " or links, and nothing verified but the index; an object without one is an error",
    )
    p = command(
        "pull",
        "restore a checkpoint into a new or empty folder, as load() would, or write the object to stdout",
        cmd_pull,
        show_pull,
        moves=True,
    )
    p.add_argument("uri", metavar="URI", help="the checkpoint object: a local path or a URI (s3://...)")
    p.add_argument(
        "dir",
        metavar="DIR",
        help="a new or empty folder to restore into; '-': write the object's bytes as stored to stdout"
        " (a payload as it was saved, a tarball as its gzip tar stream)",
    )
    p.add_argument(
        "--member",
        action="append",
        metavar="NAME",
        help="restore only this file, or the files under this folder (repeatable); with an index"
        " only their bytes are read. Symbolic links and empty folders are left out",
    )
    p = command(
        "push",
        "save a file, a folder or stdin (-) as a checkpoint, as save() would",
        cmd_push,
        show_push,
        moves=True,
    )
    p.add_argument(
        "path",
        metavar="PATH",
        help="a file (stored as it is), a folder (stored as a gzip tar of its contents) or '-' for"
        " stdin (streamed, stored as it is)",
    )
    p.add_argument("uri", metavar="URI", help="where to store it: a local path or a URI (s3://...)")
    p.add_argument(
        "--allow-empty",
        action="store_true",
        help="save zero bytes (empty stdin or file) too; without it that is refused, since an empty"
        " object loads as no checkpoint",
    )
    p = command("ls", "list the objects under a prefix", cmd_ls, show_ls)
    p.add_argument(
        "prefix",
        metavar="PREFIX",
        help="a URI or local path prefix; end it with '/' to list a folder (s3://bucket/run-7/)",
    )
    p.add_argument(
        "-l",
        "--long",
        action="store_true",
        help="show each object's size in bytes and modification time (UTC), from the store's listing",
    )
    p.add_argument(
        "--recursive",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="every object under the prefix (the default); --no-recursive: one level, each deeper"
        " folder once (ending with '/'; PRE in the -l column)",
    )
    p.add_argument(
        "-a",
        "--all",
        action="store_true",
        help="list the library's own files too: named runs' .attempt markers and .FUNCTION.lock"
        " files, sharded saves' NAME.fcp-shard/ folders, checkpoints' NAME.fcp-history/ manifests,"
        " temporary files (hidden by default)",
    )
    p = command(
        "history",
        "list a checkpoint's or a run's checkpoints, newest first, with step and metrics (no download)",
        cmd_history,
        show_history,
    )
    p.add_argument(
        "uri",
        metavar="URI",
        help="a checkpoint (its kept generations too), or a folder: every checkpoint under it (a run)",
    )
    p = command("rm", "remove one checkpoint object", cmd_rm, show_rm)
    p.add_argument("uri", metavar="URI", help="the object to remove: a local path or a URI (s3://...)")
    p.add_argument("-f", "--force", action="store_true", help="no error when there is no object")
    p = command(
        "gc",
        "delete the checkpoints a retention policy does not keep (from their manifests)",
        cmd_gc,
        show_gc,
    )
    p.add_argument(
        "uri",
        metavar="URI",
        help="a checkpoint object (its kept generations), or a prefix ending with '/' (every"
        " checkpoint under it, attempts' objects included, each run on its own)",
    )
    p.add_argument("--keep-last", type=_positive, metavar="N", help="keep the N newest")
    p.add_argument(
        "--keep-best",
        type=_keep_best,
        action="append",
        metavar="METRIC:min|max:K",
        help="keep the K best by METRIC (NaN or missing: worst; repeatable)",
    )
    p.add_argument("--keep-every-steps", type=_positive, metavar="S", help="keep a milestone every S steps")
    p.add_argument("--limit", type=_positive, default=1000, help="most deletions in this run (default 1000)")
    p.add_argument("--dry-run", action="store_true", help="print what it would delete and keep, and why")
    return parser


# --------------------------------------------------------------------------- main


class _Handler(logging.StreamHandler):
    """Log lines on stderr above the progress bar, if one is drawn: the bar's line is blanked,
    the log line written, and the bar redrawn below it."""

    def emit(self, record: logging.LogRecord) -> None:
        bar = _active_bar()
        if bar is None:
            super().emit(record)
            return
        with bar.hidden():
            super().emit(record)


def _active_bar() -> ProgressBar | None:
    return _bars[-1] if _bars else None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _message(exc: BaseException) -> str:
    from .errors import CheckpointError

    text = _one_line(str(exc))
    if isinstance(exc, (CheckpointError, OSError)) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _exit_code(exc: BaseException) -> int:
    # Only "no checkpoint at the URI": a missing PATH to push, or a missing bucket, is an error.
    return EXIT_NO_CHECKPOINT if isinstance(exc, NoCheckpointError) else EXIT_ERROR


def _fail(message: str, code: int, *, as_json: bool, error_type: str) -> int:
    message = redact_text(message)  # a usage error quotes the command line as typed
    if as_json:
        print(json.dumps({"ok": False, "error": message, "type": error_type, "exit": code}), flush=True)
    sys.stderr.write(f"{PROG}: error: {message}\n")
    return code


def _setup_logging(level: int) -> Callable[[], None]:
    logger = logging.getLogger("flyte_checkpoint")
    handler = _Handler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{PROG}: %(levelname)s: %(message)s"))
    saved = (logger.level, logger.propagate)
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False

    def undo() -> None:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]

    return undo


def _show_warning(
    message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    bar = _active_bar()
    with bar.hidden() if bar is not None else contextlib.nullcontext():
        sys.stderr.write(f"{PROG}: warning: {_one_line(str(message))}\n")


@contextlib.contextmanager
def _names_as_stored() -> Iterator[None]:
    """Print names that are not UTF-8 (a GNU tar's, stored as bytes and read as surrogate
    escapes) as the bytes they are, as ``tar tv`` and ``ls`` do, instead of failing to encode."""
    stream = sys.stdout
    errors = getattr(stream, "errors", None)
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is None or errors in (None, "surrogateescape"):
        yield
        return
    stream.flush()
    reconfigure(errors="surrogateescape")
    try:
        yield
    finally:
        stream.flush()
        reconfigure(errors=errors)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``flyte-checkpoint`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    Never raises for a failure of the command: it prints one line on stderr (and the
    traceback with ``--debug``) and returns a non-zero status.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    debug = "--debug" in argv
    try:
        args = build_parser().parse_args(argv)
    except _UsageError as exc:
        return _fail(str(exc), EXIT_USAGE, as_json=as_json, error_type="UsageError")
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    as_json = getattr(args, "json", False)
    debug = getattr(args, "debug", False)
    if args.command == "pull" and args.dir == "-" and args.member:
        return _fail(
            "pull --member restores files into a folder: give DIR, not '-'",
            EXIT_USAGE,
            as_json=as_json,
            error_type="UsageError",
        )
    if args.command == "gc" and not (args.keep_last or args.keep_best or args.keep_every_steps):
        message = "gc needs a policy: --keep-last N, --keep-best METRIC:min|max:K or --keep-every-steps S"
        return _fail(message, EXIT_USAGE, as_json=as_json, error_type="UsageError")
    if args.command == "pull" and args.dir == "-" and as_json:
        message = "pull to stdout (DIR '-') writes the object there: --json cannot share it"
        return _fail(message, EXIT_USAGE, as_json=False, error_type="UsageError")
    level = logging.DEBUG if debug else logging.INFO if getattr(args, "verbose", False) else logging.WARNING
    undo_logging = _setup_logging(level)
    saved_showwarning = warnings.showwarning
    warnings.showwarning = _show_warning
    main_thread = threading.current_thread() is threading.main_thread()
    # SIGTERM as Ctrl-C: a push aborts its upload (no temporary file or upload is left) and says so
    sigterm = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    try:
        result = args.func(args)
        if as_json:
            print(json.dumps({"ok": True, "command": args.command, **_rounded(result)}, indent=None))
        else:
            with _names_as_stored():
                args.show(result)
        sys.stdout.flush()
        return EXIT_OK
    except KeyboardInterrupt as exc:
        said = str(exc) if isinstance(exc, Interrupted) else ""
        sys.stderr.write(f"\n{PROG}: interrupted{': ' + said if said else ''}\n")
        return 128 + (exc.signum if isinstance(exc, Interrupted) else signal.SIGINT)
    except BrokenPipeError:  # the reader of stdout went away (| head): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_ERROR
    except Exception as exc:
        from .errors import CheckpointError

        if debug:
            traceback.print_exc()
        expected = isinstance(exc, (CheckpointError, OSError))
        hint = "" if debug or expected else " (unexpected: run again with --debug for the traceback)"
        return _fail(_message(exc) + hint, _exit_code(exc), as_json=as_json, error_type=type(exc).__name__)
    finally:
        warnings.showwarning = saved_showwarning
        if sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)
        undo_logging()


if __name__ == "__main__":
    sys.exit(main())
