"""Describe a stored checkpoint without extracting it: tarball or payload, size, members.

:func:`inspect_uri` reads the object once, as a stream, and writes nothing to disk. A
payload is told from its first 64 KiB; a tarball is read to its end (a tar stream has no
index), which also verifies its gzip checksums and its length, as a load would.
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO

from ..errors import NotFoundError
from ..uri import redact
from . import tarstream as ts
from .archive import ExactReader, read_members
from .compression import decompressor
from .restore import CountingReader, read_head, sniff

if TYPE_CHECKING:
    from ..storage.pinned import PinnedView

__all__ = ["Entry", "Inspection", "Member", "inspect_index", "inspect_stream", "inspect_uri", "iter_members"]

_KINDS = {
    ts.REGTYPE: "file",
    ts.AREGTYPE: "file",
    ts.CONTTYPE: "file",
    ts.DIRTYPE: "dir",
    ts.SYMTYPE: "symlink",
    ts.LNKTYPE: "hardlink",
    ts.CHRTYPE: "device",
    ts.BLKTYPE: "device",
    ts.FIFOTYPE: "fifo",
}


@dataclass(frozen=True)
class Member:
    """One member of a tarball, as its header describes it.

    Attributes:
        name: the member's path in the archive, as stored (``dir/`` keeps its slash).
        kind: ``file``, ``dir``, ``symlink``, ``hardlink``, ``device``, ``fifo`` or ``other``.
        size: bytes of file data (0 for anything but a file).
        mode: permission bits.
        mtime: modification time, seconds since the epoch.
        linkname: the target of a link, else ``""``.
    """

    name: str
    kind: str
    size: int
    mode: int
    mtime: int
    linkname: str = ""


@dataclass
class Entry:
    """A top-level entry of a tarball: what ``load()`` puts directly in its folder.

    Attributes:
        name: the entry's name.
        kind: ``dir`` for a folder (declared, or implied by members under it), else the
            kind of the single member with that name.
        size: bytes of file data in it, recursively.
        members: members of the archive at or under it.
    """

    name: str
    kind: str
    size: int = 0
    members: int = 0


@dataclass
class Inspection:
    """What a stored object holds.

    Attributes:
        uri: where it was read (credentials removed), if it came from a store.
        size: the object's size in bytes.
        format: ``tar.gz``, ``tar``, ``gzip`` (a gzip payload), ``raw`` or ``empty``.
        members: members of a tarball (0 for a payload).
        files, dirs, links: members of each kind (links: symbolic and hard).
        unpacked_bytes: bytes of file data a tarball restores to.
        entries: the top-level entries, largest first (ties by name).
        refused: members ``load()`` would refuse, each with the reason (names, types,
            links that point out; a chain of links that escapes is caught only by ``load()``).
    """

    uri: str | None
    size: int
    format: str
    members: int = 0
    files: int = 0
    dirs: int = 0
    links: int = 0
    unpacked_bytes: int = 0
    entries: list[Entry] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    #: files in the object's index (docs/FORMAT.md); None without one
    indexed_files: int | None = None
    #: why the index was refused, if it was (a full load ignores the index)
    index_error: str | None = None
    #: described from the index alone (:func:`inspect_index`): regular files only
    from_index: bool = False

    @property
    def kind(self) -> str:
        """``tarball``, ``payload`` or ``empty`` (a zero-byte object: no checkpoint)."""
        if self.format in ("tar.gz", "tar"):
            return "tarball"
        return "empty" if self.format == "empty" else "payload"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the fields plus ``kind``."""
        out = asdict(self)
        out["kind"] = self.kind
        return out


def iter_members(stream: BinaryIO) -> Iterator[Member]:
    """Yield the members of an uncompressed tar stream, reading past their data.

    PAX and GNU long names, links and sizes are applied; the metadata members themselves
    are not yielded. Stops at the end-of-archive marker, then reads ``stream`` to its end.

    Raises:
        CorruptCheckpointError: a damaged header, a stream that ends early, or data after the
            end-of-archive marker.
    """
    reader = ExactReader(stream)
    for m in read_members(reader):
        h, name, size = m.header, m.name, m.size
        kind = _KINDS.get(h.typeflag, "other")
        if h.typeflag == ts.AREGTYPE and name.endswith("/"):
            kind = "dir"
        reader.skip(size)
        yield Member(name, kind, size if kind == "file" else 0, h.mode & 0o7777, h.mtime, m.linkname)
    reader.finish()


def _refusal(member: Member, rel: str, files: set[str]) -> str | None:
    """Why ``load()`` would refuse the member, judged from its header alone, or ``None``."""
    name = member.name
    if "\0" in name or name.startswith("/") or ".." in name.split("/"):
        return f"{name!r}: the name leaves the folder"
    if member.kind in ("device", "fifo", "other"):
        return f"{name!r}: a {member.kind} member, which a checkpoint cannot hold"
    if member.kind == "symlink":
        target = member.linkname
        if target.startswith("/") or "\0" in target:
            return f"{name!r}: a link to the absolute path {target!r}"
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
        if resolved == ".." or resolved.startswith("../"):
            return f"{name!r}: a link to {target!r}, outside the folder"
    if member.kind == "hardlink":
        target = "/".join(p for p in member.linkname.split("/") if p not in ("", "."))
        if target not in files:
            return f"{name!r}: a hard link to {member.linkname!r}, not an earlier file of the archive"
    return None


def _summarize(
    members: Iterator[Member], result: Inspection, on_member: Callable[[Member], None] | None
) -> None:
    entries: dict[str, Entry] = {}
    files: set[str] = set()
    for m in members:
        if on_member is not None:
            on_member(m)
        rel = "/".join(p for p in m.name.split("/") if p not in ("", "."))
        reason = _refusal(m, rel, files)
        if reason is not None:
            result.refused.append(reason)
        if not rel:  # "./": the archive's root folder
            continue
        result.members += 1
        if m.kind == "file":
            result.files += 1
            result.unpacked_bytes += m.size
            files.add(rel)
        elif m.kind == "dir":
            result.dirs += 1
        elif m.kind in ("symlink", "hardlink"):
            result.links += 1
        top, _, rest = rel.partition("/")
        entry = entries.get(top)
        if entry is None:
            entry = entries[top] = Entry(top, "dir" if rest else m.kind)
        elif rest:
            entry.kind = "dir"
        entry.size += m.size
        entry.members += 1
    result.entries = sorted(entries.values(), key=lambda e: (-e.size, e.name))


def inspect_stream(
    raw: BinaryIO,
    size: int,
    *,
    uri: str | None = None,
    on_member: Callable[[Member], None] | None = None,
) -> Inspection:
    """Describe the object read from ``raw``, whose store reported ``size`` bytes.

    A payload is read no further than its head. A tarball is read to its end: every
    member goes to ``on_member`` (if given) and into the summary.

    Raises:
        CorruptCheckpointError: a damaged gzip stream or tar header, or a truncated tarball.
        TransientError: a tarball's length differs from ``size`` (the object changed).
    """
    if size == 0:
        return Inspection(redact(uri) if uri else None, 0, "empty")
    head = read_head(raw)
    return _inspect(head, sniff(head, size), raw, size, uri, on_member)


def _inspect(
    head: bytes,
    fmt: str,
    rest: BinaryIO,
    size: int,
    uri: str | None,
    on_member: Callable[[Member], None] | None,
) -> Inspection:
    result = Inspection(redact(uri) if uri else None, size, fmt)
    if fmt not in ("tar.gz", "tar"):
        return result
    stream = CountingReader(head, rest)
    members = None
    with stream.whole(size):
        if fmt == "tar.gz":
            members = decompressor(stream)  # type: ignore[arg-type]
            _summarize(iter_members(members), result, on_member)  # type: ignore[arg-type]
        else:
            _summarize(iter_members(stream), result, on_member)  # type: ignore[arg-type]
    if members is not None:
        from .index import check_tail

        # as a load checks it: the index after the tar is in extra fields, which decoding skips
        check_tail(members.tail, uri or "the checkpoint")
    return result


@contextlib.contextmanager
def _object(uri: str) -> Iterator[tuple[PinnedView, str]]:
    """The object at ``uri`` (normalized), pinned to its version for the block's reads (see
    :func:`~flyte_checkpoint.storage.pinned.read_pinned`), and ``uri`` normalized.

    Raises:
        NotFoundError: there is no object at ``uri``.
        ObjectReplacedError: it was replaced while the block read it.
    """
    from ..storage.pinned import read_pinned
    from ..storage.registry import store_for
    from ..uri import normalize

    uri = normalize(uri)
    with read_pinned(store_for(uri), uri) as view:
        if view is None:
            raise NotFoundError(f"no checkpoint object at {redact(uri)}: check the URI (ls lists a prefix)")
        yield view, uri


def inspect_uri(
    uri: str,
    *,
    progress: Callable[[int, int | None], None] | None = None,
    on_member: Callable[[Member], None] | None = None,
) -> Inspection:
    """Describe the object at ``uri`` (any installed backend) without writing to disk.

    ``progress(done, total)`` is called as a tarball's bytes are read; a payload is read
    no further than its first 64 KiB and reports no progress. A zero-byte object is
    ``format="empty"`` (``load()`` treats it as no checkpoint).

    Raises:
        NotFoundError: there is no object at ``uri``.
        CorruptCheckpointError, TransientError: see :func:`inspect_stream`; and the store's
            own errors (permission, missing bucket...).
        ObjectReplacedError: a save replaced the object while it was read (retry: the
            object is not damaged).
    """
    with _object(uri) as (store, uri):
        return _inspect_version(store, uri, progress, on_member)


def _inspect_version(
    store: PinnedView,
    uri: str,
    progress: Callable[[int, int | None], None] | None,
    on_member: Callable[[Member], None] | None,
) -> Inspection:
    from .pipeline import ReadAhead

    size = store.size
    if size == 0:
        return Inspection(redact(uri), 0, "empty")
    with store.open_read(uri) as raw:
        head = read_head(raw)
        fmt = sniff(head, size)
        if fmt not in ("tar.gz", "tar"):
            return Inspection(redact(uri), size, fmt)
        done = len(head)
        if progress is not None:
            progress(done, size)

        def counted(n: int) -> None:
            nonlocal done
            done += n
            if progress is not None:
                progress(done, size)

        with ReadAhead(raw, on_chunk=counted) as ahead:
            result = _inspect(head, fmt, ahead, size, uri, on_member)  # type: ignore[arg-type]
    if fmt == "tar.gz":
        from ..errors import CorruptCheckpointError, UnsafeArchiveError
        from ..storage.pinned import replaced
        from .index import read_index

        try:
            index = read_index(store, uri, size)
            result.indexed_files = None if index is None else len(index.files)
        except (CorruptCheckpointError, UnsafeArchiveError) as exc:
            if store.changed():  # not this object's index: one saved since the stream was read
                raise replaced(uri, "its index was read after the stream") from exc
            result.index_error = str(exc)
    return result


def inspect_index(uri: str, *, on_member: Callable[[Member], None] | None = None) -> Inspection | None:
    """Describe the object at ``uri`` from its index alone (a pin, as a ``stat``, and two ranged reads,
    nothing else read); None when it has no index (Flyte's, older objects, payloads).

    The index lists regular files only: ``members``, ``files`` and the entries count them
    (a hard link's second name as a ``hardlink`` member), not folders or symbolic links,
    and the files' data is not read, so nothing but the index is verified.

    Raises:
        NotFoundError: there is no object at ``uri``.
        CorruptCheckpointError, UnsafeArchiveError: the index is damaged or forged.
    """
    from .index import read_index

    with _object(uri) as (store, uri):
        size = store.size
        if size == 0:
            return Inspection(redact(uri), 0, "empty")
        index = read_index(store, uri, size)
    if index is None:
        return None
    result = Inspection(redact(uri), size, "tar.gz", indexed_files=len(index.files), from_index=True)
    entries = sorted(index.files.values(), key=lambda e: (e.first, e.offset, e.name))
    seen: dict[tuple[int, int, int, str], str] = {}

    def members() -> Iterator[Member]:
        for e in entries:
            data = (e.first, e.offset, e.size, e.digest)
            if data in seen and e.size:  # a hard link's second name: the same data
                yield Member(e.name, "hardlink", 0, e.mode, e.mtime, seen[data])
                continue
            seen[data] = e.name
            yield Member(e.name, "file", e.size, e.mode, e.mtime)

    _summarize(members(), result, on_member)
    return result
