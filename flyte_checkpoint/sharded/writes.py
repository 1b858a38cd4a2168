"""How the ranks' segments become one object on a store.

A store that can take one object from many writers declares it with a method
``sharded_writes(uri)`` returning a :class:`ShardedWrites` (the local store: per-rank files
joined with ``copy_file_range`` and renamed; S3: one multipart upload, a range of part
numbers per rank). Any other store gets :class:`GatherWrites`: each rank writes its segment
as a temporary object and the committing rank copies them, in order, into one ordinary
(atomic) write, which costs one more upload of everything (a warning says so).
"""

from __future__ import annotations

import os
import shutil
from typing import Any, BinaryIO, Protocol

from ..logs import logger
from ..storage.blobstore import COPY_CHUNK, BlobStore
from ..uri import is_local, local_path, redact
from ..workfiles import TMP, shard_folder

Session = dict[str, Any]


def coordination_prefix(uri: str) -> str:
    """Where a sharded save to ``uri`` keeps its markers and temporary pieces: a folder beside
    the object (locally one that folder saves leave out, as they do writers' temporary files)."""
    if is_local(uri):
        target = local_path(uri)
        return f"{target.parent}/{shard_folder(target.name)}/"
    return uri + ".fcp-shard/"


class Segment(Protocol):
    """One rank's part of the object: ``write`` its bytes, then ``finish`` (or ``abort``)."""

    def write(self, data: bytes | bytearray | memoryview) -> int: ...

    def padding_needed(self) -> int:
        """Bytes to add (as padding members) so that the segment meets the store's minimum part size."""
        ...

    def finish(self) -> dict[str, Any]:
        """Make the segment durable; returns what :meth:`ShardedWrites.commit` needs of it (JSON)."""
        ...

    def abort(self) -> None: ...


class ShardedWrites(Protocol):
    """A store's way of committing one object written by many ranks (see the module docstring)."""

    def begin(self, token: str) -> Session:
        """On the committing rank, before any segment: server-side state for a save (JSON)."""
        ...

    def segment(self, session: Session, rank: int, world: int, joiner: str) -> Segment:
        """Where rank ``rank`` writes its segment. ``joiner`` (a nonce of the rank's call) keeps
        two processes that report as one rank from writing over each other's segment."""
        ...

    def commit(self, session: Session, pieces: list[dict[str, Any]], tail: bytes) -> None:
        """Make the object appear whole: the segments in rank order, then ``tail``."""
        ...

    def abort(self, session: Session) -> None:
        """Discard what the save wrote (idempotent, best effort)."""
        ...

    def sweep(self, session: Session) -> None:
        """Remove what earlier saves to this object left (pieces of ranks that were killed)."""
        ...


def writes_for(store: BlobStore, uri: str) -> ShardedWrites:
    """The store's own :class:`ShardedWrites`, else the gathering fallback (with a warning)."""
    native = getattr(store, "sharded_writes", None)
    if native is not None:
        return native(uri)
    logger().warning(
        "%s cannot take one object from many writers: the ranks' segments are gathered and"
        " written again by rank 0 (one more upload of the whole checkpoint)",
        redact(uri),
    )
    return GatherWrites(store, uri)


class _ObjectSegment:
    def __init__(self, store: BlobStore, uri: str) -> None:
        self._writer = store.open_write(uri)
        self._uri = uri

    def write(self, data: bytes | bytearray | memoryview) -> int:
        return self._writer.write(data)

    def padding_needed(self) -> int:
        return 0

    def finish(self) -> dict[str, Any]:
        self._writer.close()
        return {"uri": self._uri}

    def abort(self) -> None:
        self._writer.abort()


class GatherWrites:
    """Segments as temporary objects under the coordination prefix, copied by the committing
    rank into one ordinary write of the object."""

    def __init__(self, store: BlobStore, uri: str) -> None:
        self.store = store
        self.uri = uri
        self.prefix = coordination_prefix(uri)

    def begin(self, token: str) -> Session:
        return {}

    def _piece(self, token: str, rank: int, joiner: str) -> str:
        return f"{self.prefix}{token}.piece-{rank:05d}.{joiner}"

    def segment(self, session: Session, rank: int, world: int, joiner: str) -> Segment:
        return _ObjectSegment(self.store, self._piece(session["token"], rank, joiner))

    def commit(self, session: Session, pieces: list[dict[str, Any]], tail: bytes) -> None:
        with self.store.open_write(self.uri) as out:
            for piece in pieces:
                with self.store.open_read(piece["uri"]) as src:
                    shutil.copyfileobj(src, out, COPY_CHUNK)
            out.write(tail)
        self.abort(session)

    def abort(self, session: Session) -> None:
        for uri in list(self.store.list(f"{self.prefix}{session['token']}.piece-")):
            self.store.delete(uri)

    def sweep(self, session: Session) -> None:
        for uri in list(self.store.list(self.prefix)):
            if ".piece-" in uri and not uri.startswith(f"{self.prefix}{session['token']}."):
                self.store.delete(uri)


class _FileSegment:
    def __init__(self, path: str) -> None:
        self.path = path
        self.name = os.path.basename(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._file: BinaryIO = open(path, "xb", buffering=0)  # noqa: SIM115 - closed by finish/abort

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data)
        while view:
            view = view[self._file.write(view) :]
        return len(data)

    def padding_needed(self) -> int:
        return 0

    def finish(self) -> dict[str, Any]:
        # No fsync: the piece is temporary; the commit fsyncs the joined object once.
        size = os.fstat(self._file.fileno()).st_size
        self._file.close()
        return {"size": size, "name": self.name}

    def abort(self) -> None:
        self._file.close()
        _unlink(self.path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class LocalShardedWrites:
    """Per-rank files beside the target; the others' are appended to rank 0's
    (``copy_file_range``: the kernel copies, or shares blocks where the file system can), which
    is fsynced and renamed over the target."""

    def __init__(self, uri: str) -> None:
        self.target = local_path(uri)
        self.folder = coordination_prefix(uri)

    def begin(self, token: str) -> Session:
        os.makedirs(self.folder, exist_ok=True)
        return {}

    def _piece(self, token: str, rank: int, joiner: str) -> str:
        return f"{self.folder}{token}.piece-{rank:05d}.{joiner}"

    def segment(self, session: Session, rank: int, world: int, joiner: str) -> Segment:
        return _FileSegment(self._piece(session["token"], rank, joiner))

    def _path(self, token: str, rank: int, piece: dict[str, Any]) -> str:
        """The file of rank ``rank``'s ``piece`` (as its report names it, checked: a report is
        read from the store, and must not name a file elsewhere)."""
        name = str(piece.get("name", ""))
        if not name.startswith(f"{token}.piece-{rank:05d}.") or "/" in name or "\\" in name:
            raise ValueError(f"rank {rank}'s report names a piece {name!r} of another save")
        return self.folder + name

    def commit(self, session: Session, pieces: list[dict[str, Any]], tail: bytes) -> None:
        from ..storage.stores.local import _fsync_dir, _umask, replace_object

        token = session["token"]
        joined = self._path(token, 0, pieces[0])  # rank 0's piece grows into the object: one copy less
        with open(joined, "r+b") as out:
            out.truncate(pieces[0]["size"])
            out.seek(0, os.SEEK_END)
            for rank, piece in enumerate(pieces[1:], start=1):
                with open(self._path(token, rank, piece), "rb") as src:
                    _copy_range(src.fileno(), out.fileno(), piece["size"])
            out.write(tail)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(joined, 0o666 & ~_umask())
        replace_object(joined, self.target)
        _fsync_dir(self.target.parent)
        self.abort(session)

    def abort(self, session: Session) -> None:
        token = session["token"]
        for name in _listdir(self.folder):
            if name.startswith(f"{token}.piece-"):
                _unlink(self.folder + name)

    def sweep(self, session: Session) -> None:
        # Everything but this save's files and the session marker: pieces and joins of saves
        # whose ranks were killed, and temporary files of marker writes they left (not those
        # being written now: this save's, and the session's renewal).
        token = session["token"]
        keep = (f"{token}.", "open", f"{TMP}{token}.", f"{TMP}open.")
        for name in _listdir(self.folder):
            if not name.startswith(keep):
                _unlink(self.folder + name)


def _listdir(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except FileNotFoundError:
        return []


def _copy_range(src: int, dst: int, size: int) -> None:
    """Append ``size`` bytes of ``src`` (from its start) to ``dst``, in the kernel."""
    left = size
    while left:
        try:
            n = os.copy_file_range(src, dst, left)
        except OSError:  # file systems that refuse it (across devices, old kernels)
            n = os.sendfile(dst, src, None, left)
        if n == 0:
            raise OSError(f"a segment ended {left} bytes early")
        left -= n
