"""The index of a folder checkpoint: where each file's bytes lie in the gzip tar (docs/FORMAT.md).

A folder save writes each large file's data (and its tar padding) in gzip members of its
own, and after the tar's end-of-archive appends empty gzip members whose extra field
(FEXTRA, subfield ``FI``) carries the index, then one fixed-size empty member, the
trailer (subfield ``FT``), that says where the index lies. Gzip readers skip extra fields
and empty members decode to nothing, so every other reader sees the same tar as before.

:func:`read_index` finds the index with one ranged read of the object's tail and one of
the index itself; :func:`read_file` restores one file by ranged reads of its members.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import re
import struct
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import CheckpointError, CorruptCheckpointError, UnsafeArchiveError

if TYPE_CHECKING:
    from ..storage.blobstore import BlobStore

VERSION = 1
#: Files at least this large start (and end) at a gzip member boundary; smaller ones share.
ALIGN_MIN = 64 * 1024
_MAGIC = b"FCIX"
_INDEX_ID = b"FI"
_TRAILER_ID = b"FT"
_CHUNK = 65000  # index bytes per extra field (an extra field holds at most 65,535 bytes)
# magic, version, index offset, index length (compressed), payload length, payload SHA-256, CRC-32
_TRAILER_BODY = struct.Struct("<4sHQQQ32sI")
_HEADER = b"\x1f\x8b\x08\x04\x00\x00\x00\x00\x00\xff"  # deflate, FEXTRA, no mtime, unknown OS
_EMPTY_DEFLATE = b"\x03\x00"
_EMPTY_TRAILER = b"\x00" * 8  # CRC-32 and size of no data
_MAX_INDEX = 256 * 1024 * 1024  # the most index bytes a reader accepts (hostile objects)
#: The largest member a reader accepts (writers make them of at most 6 MiB): a ranged read of
#: one member is held in memory.
MAX_MEMBER = 16 * 1024 * 1024


def _empty_member(sub_id: bytes, payload: bytes) -> bytes:
    """An empty gzip member whose extra field holds one subfield ``sub_id`` of ``payload``."""
    sub = sub_id + struct.pack("<H", len(payload)) + payload
    return _HEADER + struct.pack("<H", len(sub)) + sub + _EMPTY_DEFLATE + _EMPTY_TRAILER


TRAILER_SIZE = len(_empty_member(_TRAILER_ID, bytes(_TRAILER_BODY.size)))


@dataclass(frozen=True)
class Member:
    """One gzip member: where it lies compressed and uncompressed, and its CRC-32."""

    coff: int
    clen: int
    uoff: int
    ulen: int
    crc: int


@dataclass(frozen=True)
class FileEntry:
    """A regular file of the tar: its data is ``size`` bytes from ``offset`` in member ``first``."""

    name: str
    first: int
    last: int
    offset: int
    size: int
    mtime: int
    mode: int
    sha256: str


@dataclass(frozen=True)
class Index:
    members: list[Member]
    files: dict[str, FileEntry]
    data_end: int  # where the index members begin (the end of the tar's members)


class IndexBuilder:
    """Collects the members a :class:`~.pipeline.ParallelGzipWriter` writes and the files
    the packer adds, and encodes the index members and trailer to append."""

    def __init__(self) -> None:
        self.members: list[Member] = []
        self._coff = 0
        self._uoff = 0
        self._files: list[tuple[str, int, int, int, int, str]] = []

    def add_member(self, clen: int, ulen: int, crc: int) -> None:
        """Called by the gzip writer thread, in order, for each member written."""
        self.members.append(Member(self._coff, clen, self._uoff, ulen, crc))
        self._coff += clen
        self._uoff += ulen

    def add_file(self, name: str, offset: int, size: int, mtime: int, mode: int, sha256: str) -> None:
        """A regular file whose data starts at ``offset`` in the tar stream."""
        self._files.append((name, offset, size, mtime, mode, sha256))

    def add_alias(self, name: str, target: str) -> None:
        """A hard link ``name`` to the file ``target`` added before: the same data."""
        for entry in reversed(self._files):
            if entry[0] == target:
                self._files.append((name, *entry[1:]))
                return

    def encode(self) -> bytes:
        """The index members and the trailer (to write after every member of the tar)."""
        starts = [m.uoff for m in self.members]
        files = []
        for name, offset, size, mtime, mode, digest in self._files:
            first = bisect.bisect_right(starts, offset) - 1
            last = bisect.bisect_right(starts, offset + max(size, 1) - 1) - 1
            files.append([name, first, last, offset - starts[first], size, mtime, mode, digest])
        members = [[m.clen, m.ulen, m.crc] for m in self.members]
        doc = {"version": VERSION, "members": members, "files": files}
        payload = zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 1)
        parts = [_empty_member(_INDEX_ID, payload[i : i + _CHUNK]) for i in range(0, len(payload), _CHUNK)]
        body = b"".join(parts)
        fields = (_MAGIC, VERSION, self._coff, len(body), len(payload), hashlib.sha256(payload).digest())
        packed = _TRAILER_BODY.pack(*fields, 0)
        packed = packed[:-4] + struct.pack("<I", zlib.crc32(packed[:-4]))
        return body + _empty_member(_TRAILER_ID, packed)


def _damaged(uri: str, what: str) -> CorruptCheckpointError:
    from ..uri import redact

    return CorruptCheckpointError(
        f"the index of {redact(uri)} is damaged ({what}); load the whole checkpoint with load(),"
        " or save it again"
    )


def _subfield(data: bytes, at: int, sub_id: bytes, uri: str) -> tuple[bytes, int]:
    """The payload of the empty member at ``at`` with subfield ``sub_id``, and where it ends."""
    head = data[at : at + 16]
    if len(head) < 16 or head[:10] != _HEADER:
        raise _damaged(uri, f"no index member at byte {at} of the index")
    (xlen,) = struct.unpack_from("<H", head, 10)
    sid, slen = head[12:14], struct.unpack_from("<H", head, 14)[0]
    end = at + 12 + xlen + len(_EMPTY_DEFLATE) + len(_EMPTY_TRAILER)
    if sid != sub_id or slen + 4 != xlen or end > len(data):
        raise _damaged(uri, f"malformed index member at byte {at}")
    if data[at + 12 + xlen : end] != _EMPTY_DEFLATE + _EMPTY_TRAILER:
        raise _damaged(uri, f"index member at byte {at} is not empty")
    return data[at + 16 : at + 16 + slen], end


def read_index(store: BlobStore, uri: str, size: int | None = None) -> Index | None:
    """The index of the object at ``uri``; None for an object without one (Flyte's, older ones).

    One ranged read of the tail, one of the index (and a ``stat`` unless ``size`` is given).

    Raises:
        CorruptCheckpointError: the trailer names an index that is damaged or inconsistent.
        UnsafeArchiveError: the index names a file outside the tree.
    """
    if size is None:
        size = store.stat(uri)
    if not size or size < TRAILER_SIZE:
        return None
    tail = store.read_range(uri, size - TRAILER_SIZE, TRAILER_SIZE)
    if len(tail) != TRAILER_SIZE or tail[:10] != _HEADER or tail[16:20] != _MAGIC:
        return None  # not ours: no index
    body, _ = _subfield(tail, 0, _TRAILER_ID, uri)
    if len(body) != _TRAILER_BODY.size or zlib.crc32(body[:-4]) != struct.unpack("<I", body[-4:])[0]:
        raise _damaged(uri, "the trailer's checksum does not match")
    _, version, data_end, index_len, payload_len, digest, _ = _TRAILER_BODY.unpack(body)
    if version != VERSION:
        raise _damaged(
            uri, f"index version {version}, this library reads {VERSION}: upgrade flyte-checkpoint"
        )
    if index_len > _MAX_INDEX or data_end + index_len != size - TRAILER_SIZE or payload_len > index_len:
        raise _damaged(uri, "the trailer places the index outside the object")
    raw = store.read_range(uri, data_end, index_len) if index_len else b""
    if len(raw) != index_len:
        raise _damaged(uri, "the object ends inside the index")
    chunks, at = [], 0
    while at < index_len:
        chunk, at = _subfield(raw, at, _INDEX_ID, uri)
        chunks.append(chunk)
    payload = b"".join(chunks)
    if len(payload) != payload_len or hashlib.sha256(payload).digest() != digest:
        raise _damaged(uri, "its SHA-256 does not match the trailer's")
    return _parse(payload, data_end, uri)


def _parse(payload: bytes, data_end: int, uri: str) -> Index:
    from ..limits import LoadLimits

    limits = LoadLimits.from_env()
    try:
        d = zlib.decompressobj()
        text = d.decompress(payload, _MAX_INDEX)
        if d.unconsumed_tail or not d.eof:
            raise _damaged(uri, "it inflates to more than a checkpoint's index may hold")
        doc = json.loads(text)
        if doc["version"] != VERSION:
            raise _damaged(uri, "its version differs from the trailer's")
        members: list[Member] = []
        coff = uoff = 0
        for clen, ulen, crc in doc["members"]:
            if (
                not all(type(v) is int and v >= 0 for v in (clen, ulen, crc))
                or not 18 <= clen <= MAX_MEMBER + 65536
            ):
                raise _damaged(uri, "a member has an impossible length")
            if ulen > MAX_MEMBER:
                raise _damaged(uri, "a member has an impossible length")
            members.append(Member(coff, clen, uoff, ulen, crc))
            coff += clen
            uoff += ulen
        if coff != data_end:
            raise _damaged(uri, "its members do not end where the index begins")
        if len(doc["files"]) > limits.max_members:
            raise _damaged(uri, f"it lists more than {limits.max_members:,} files")
        files: dict[str, FileEntry] = {}
        for row in doc["files"]:
            entry = FileEntry(*row)
            _check_entry(entry, members, uri)
            files[entry.name] = entry
    except CheckpointError:
        raise
    except (ValueError, KeyError, TypeError, zlib.error) as exc:
        raise _damaged(uri, f"unreadable: {exc}") from None
    return Index(members, files, data_end)


_INT_FIELDS = ("first", "last", "offset", "size", "mtime", "mode")


def _check_entry(e: FileEntry, members: list[Member], uri: str) -> None:
    from ..uri import redact

    if not isinstance(e.name, str) or not all(type(getattr(e, f)) is int for f in _INT_FIELDS):
        raise _damaged(uri, "a file entry has fields of the wrong type")
    parts = e.name.split("/")
    if not e.name or e.name.startswith("/") or ".." in parts or "\0" in e.name:
        raise UnsafeArchiveError(
            f"the index of {redact(uri)} names the file {e.name[:200]!r}, outside the checkpoint;"
            " refusing. The object is forged or damaged: save it again"
        )
    if not isinstance(e.sha256, str) or not re.fullmatch(r"[0-9a-f]{64}", e.sha256):
        raise _damaged(uri, f"the hash of {e.name[:200]!r} is malformed")
    if not (0 <= e.first <= e.last < len(members)) or e.offset < 0 or e.size < 0:
        raise _damaged(uri, f"{e.name[:200]!r} lies outside the object's members")
    start = members[e.first].uoff + e.offset
    end = start + e.size
    last = members[e.last]
    if e.offset >= max(members[e.first].ulen, 1) or end > last.uoff + last.ulen:
        raise _damaged(uri, f"{e.name[:200]!r} lies outside its members")
    if e.size and end <= last.uoff:
        raise _damaged(uri, f"{e.name[:200]!r} ends before its last member")


def read_file(store: BlobStore, uri: str, index: Index, name: str, out) -> int:
    """Write file ``name``'s data to the writable ``out`` by ranged reads of its members,
    verifying each member's CRC-32 and the file's SHA-256; returns the bytes written.

    Raises:
        KeyError: the index has no regular file ``name``.
        CorruptCheckpointError: a member or the file's content does not match the index.
    """
    from .compression import inflate

    entry = index.files[name]
    h = hashlib.sha256()
    skip, left = entry.offset, entry.size
    for i in range(entry.first, entry.last + 1):
        m = index.members[i]
        raw = store.read_range(uri, m.coff, m.clen)
        data, whole = inflate(raw, m.ulen)
        if not whole or len(data) != m.ulen or zlib.crc32(data) != m.crc:
            raise _damaged(uri, f"gzip member {i} (byte {m.coff}) does not match the index")
        piece = memoryview(data)[skip : skip + left]
        skip = 0
        h.update(piece)
        out.write(piece)
        left -= len(piece)
        if not left:
            break
    if left or h.hexdigest() != entry.sha256:
        from ..uri import redact

        raise CorruptCheckpointError(
            f"{name!r} restored from {redact(uri)} does not match the SHA-256 its index records;"
            " the object is damaged: save the checkpoint again"
        )
    return entry.size


def file_names(index: Index) -> list[str]:
    return sorted(index.files)


__all__ = [
    "ALIGN_MIN",
    "TRAILER_SIZE",
    "FileEntry",
    "Index",
    "IndexBuilder",
    "Member",
    "read_file",
    "read_index",
]
