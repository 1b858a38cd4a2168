"""The index of a folder checkpoint: where each file's bytes lie in the gzip tar (docs/FORMAT.md).

A folder save writes each large file's data (and its tar padding) in gzip members of its
own, and after the tar's end-of-archive appends empty gzip members whose extra field
(FEXTRA, subfield ``FI``) carries the index, then one fixed-size empty member, the
trailer (subfield ``FT``), that says where the index lies. Gzip readers skip extra fields
and empty members decode to nothing, so every other reader sees the same tar as before.

:func:`read_index` finds the index with one ranged read of the object's tail and one of
the index itself (or one read of both, reading ahead);
:func:`flyte_checkpoint.format.partial.read_file` restores one file by ranged reads of its
members.
"""

from __future__ import annotations

import bisect
import hashlib
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, NamedTuple

from ..errors import CorruptCheckpointError, UnsafeArchiveError
from . import digests

if TYPE_CHECKING:
    from ..storage.blobstore import BlobStore
    from .compression import Tail

#: The version written: 4, each member's record with the CRC-32 of its stored (compressed) bytes,
#: files and gaps hashed with BLAKE3 (:mod:`.digests`), the payload deflated (raw deflate, level
#: 1). Versions 3 (no stored bytes' CRC), 2 (SHA-256, deflated) and 1 (SHA-256, the payload as it
#: is) are still read.
VERSION = 4
_READS = (1, 2, 3, 4)
#: The first version whose members record the CRC-32 of their stored bytes (``ccrc``).
CHECKED_FROM = 4
#: Files at least this large start (and end) at a gzip member boundary; smaller ones share.
ALIGN_MIN = 64 * 1024
_MAGIC = b"FCIX"
_INDEX_ID = b"FI"
_TRAILER_ID = b"FT"
_CHUNK = 65000  # index bytes per extra field (an extra field holds at most 65,535 bytes)
# magic, version, index offset, index length (compressed), payload length, payload SHA-256, CRC-32
_TRAILER_BODY = struct.Struct("<4sHQQQ32sI")
# The index payload (fixed-width, not compressed, so that its length is a function of the
# tree's names and layout only): member and file counts, each member, then each file.
_COUNTS = struct.Struct("<II")
_MEMBER = struct.Struct("<III")  # clen, ulen, crc32 (versions 1 to 3)
_MEMBER_CHECKED = struct.Struct("<IIII")  # clen, ulen, crc32, ccrc (the stored bytes' CRC-32; version 4)
_FILE = struct.Struct("<IIIQqI32sI")  # first, last, offset, size, mtime, mode, digest, name length
# Optional, after the files: a gap count, then each gap (the tar bytes before a large file).
_GAP_COUNT = struct.Struct("<I")
_GAP = struct.Struct("<QI32s")  # end (uncompressed offset), length, digest
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
_PAD_ID = b"FP"
#: The smallest padding member (an empty payload); the largest holds 65,531 bytes of payload.
PAD_MIN = len(_empty_member(_PAD_ID, b""))
_PAD_MAX = PAD_MIN + 65531


def padding(n: int) -> list[bytes]:
    """Padding members of ``n`` bytes in all (at least :data:`PAD_MIN` when ``n`` is not 0):
    empty gzip members whose extra field holds one subfield ``FP`` of zeros, which every gzip
    reader decodes to nothing (docs/FORMAT.md)."""
    if n <= 0:
        return []
    n = max(n, PAD_MIN)
    count = -(-n // _PAD_MAX)
    sizes = [n // count + (i < n % count) for i in range(count)]
    return [_empty_member(_PAD_ID, bytes(size - PAD_MIN)) for size in sizes]


def aligning(offset: int, align: int) -> int:
    """Bytes of padding that make a member written at ``offset`` start at the next multiple
    of ``align`` that leaves room for one (from :data:`PAD_MIN` to ``align + PAD_MIN - 1``:
    always one padding member, so that the index's length depends on the layout only)."""
    n = -offset % align
    return n + align if n < PAD_MIN else n


def is_padding(member: bytes | memoryview) -> bool:
    """Whether ``member`` is exactly one padding member (:func:`padding`)."""
    return len(member) >= PAD_MIN and member == _empty_member(_PAD_ID, bytes(len(member) - PAD_MIN))


@dataclass(frozen=True)
class Member:
    """One gzip member: where it lies compressed and uncompressed, the CRC-32 of its data
    (``crc``, as its gzip trailer says) and of its stored bytes (``ccrc``: what a server that
    copies it computes; None in an index older than version 4)."""

    coff: int
    clen: int
    uoff: int
    ulen: int
    crc: int
    ccrc: int | None = None

    def row(self) -> tuple[int, int, int, int | None]:
        """``(clen, ulen, crc, ccrc)``, as :meth:`IndexBuilder.add_member` takes them."""
        return self.clen, self.ulen, self.crc, self.ccrc


class FileEntry(NamedTuple):
    """A regular file of the tar: its data is ``size`` bytes from ``offset`` in member ``first``.

    (A named tuple, immutable as the index's other records: a load makes one per file, and a
    frozen dataclass took 1.4 us each to make, 0.03 s of a load of 20,000 files.)"""

    name: str
    first: int
    last: int
    offset: int
    size: int
    mtime: int
    mode: int
    #: The content hash (hex) of :attr:`Index.algorithm`.
    digest: str


@dataclass(frozen=True)
class Index:
    members: list[Member]
    files: dict[str, FileEntry]
    data_end: int  # where the index members begin (the end of the tar's members)
    #: The hash of the tar bytes between large files (headers, folders, small files), by where
    #: they end in the uncompressed stream: ``{end: (length, digest hex)}``; empty without them
    gaps: dict[int, tuple[int, str]] = field(default_factory=dict)
    #: A sharded save's members per rank, in rank order (the rest: the end of the archive); empty otherwise.
    shards: tuple[int, ...] = ()
    #: The content hash of the files and gaps (:data:`.digests.BY_VERSION`): ``blake3`` from
    #: version 3, ``sha256`` before.
    algorithm: str = digests.CURRENT
    #: The object's bytes after its tar's members (the index members and the trailer) that this
    #: was parsed from, when :func:`read_index` read them; :func:`check_tail` compares a streamed
    #: load's tail with them rather than parsing the same index twice.
    raw: bytes = field(default=b"", repr=False, compare=False)

    @property
    def checked(self) -> bool:
        """Whether every member records the CRC-32 of its stored bytes (version 4 on), so that a
        copy of them can be checked against it."""
        return all(m.ccrc is not None for m in self.members)


class IndexBuilder:
    """Collects the members a :class:`~.pipeline.ParallelGzipWriter` writes and the files
    the packer adds, and encodes the index members and trailer to append."""

    def __init__(self) -> None:
        self.members: list[Member] = []
        self._coff = 0
        self._uoff = 0
        self._files: list[tuple[str, int, int, int, int, str | Callable[[], str]]] = []
        self._gaps: list[tuple[int, int, bytes]] = []
        self._aliases = 0
        #: Members per rank of a sharded save (:mod:`flyte_checkpoint.sharded`), recorded in the index.
        self.shards: list[int] | None = None

    def add_member(self, clen: int, ulen: int, crc: int, ccrc: int | None) -> None:
        """Called by the gzip writer thread, in order, for each member written: its lengths,
        the CRC-32 of its data and of its stored bytes (:data:`CHECKED_FROM`; None only for an
        index written as an older version)."""
        self.members.append(Member(self._coff, clen, self._uoff, ulen, crc, ccrc))
        self._coff += clen
        self._uoff += ulen

    def add_file(
        self, name: str, offset: int, size: int, mtime: int, mode: int, digest: str | Callable[[], str]
    ) -> None:
        """A regular file whose data starts at ``offset`` in the tar stream; ``digest`` is its
        hex digest (:data:`.digests.CURRENT`), or a function that gives it once the data is
        hashed (called by :meth:`encode`)."""
        self._files.append((name, offset, size, mtime, mode, digest))

    def add_gap(self, offset: int, data: bytes) -> None:
        """The tar bytes ``data`` from ``offset``, just before a large file's data: members of
        their own (the writer cuts after the previous large file and before this one), recorded
        by hash so that an incremental save can tell they are unchanged without reading them."""
        if data:
            self._gaps.append((offset + len(data), len(data), digests.of_bytes(data)))

    @property
    def file_count(self) -> int:
        """The regular files added (a hard link to one added before is not counted again)."""
        return len(self._files) - self._aliases

    def add_alias(self, name: str, target: str) -> None:
        """A hard link ``name`` to the file ``target`` added before: the same data."""
        for entry in reversed(self._files):
            if entry[0] == target:
                self._files.append((name, *entry[1:]))
                self._aliases += 1
                return

    def encode(self) -> bytes:
        """The index members and the trailer (to write after every member of the tar)."""
        starts = [m.uoff for m in self.members]
        files = []
        for name, offset, size, mtime, mode, digest in self._files:
            digest = digest if isinstance(digest, str) else digest()
            first = bisect.bisect_right(starts, offset) - 1
            last = bisect.bisect_right(starts, offset + max(size, 1) - 1) - 1
            files.append((name, first, last, offset - starts[first], size, mtime, mode, digest))
        payload = pack_payload([m.row() for m in self.members], files, self._gaps, self.shards)
        return encode_tail(payload, self._coff)


def pack_payload(
    members: list[tuple],
    files: list[tuple],
    gaps: list[tuple[int, int, bytes]] = (),  # type: ignore[assignment]
    shards: list[int] | None = None,
) -> bytes:
    """The index payload of ``members`` (clen, ulen, crc32, ccrc: version 4; or clen, ulen,
    crc32: the layout of versions 1 to 3, for :func:`encode_tail` with such a version),
    ``files`` (the fields of :class:`FileEntry`, in order) and ``gaps`` (end, length, digest;
    the section is left out when there are none): fixed-width fields, names as UTF-8
    (docs/FORMAT.md).

    Raises:
        ValueError: the members' rows are not all of one layout, or a ccrc is missing.
    """
    out = [_COUNTS.pack(len(members), len(files))]
    widths = {len(m) for m in members}
    if len(widths) > 1 or any(len(m) == 4 and m[3] is None for m in members):
        raise ValueError("every member row must have a ccrc (version 4), or none may (versions 1 to 3)")
    layout = _MEMBER_CHECKED if widths == {4} else _MEMBER
    out += [layout.pack(*m) for m in members]
    for name, first, last, offset, size, mtime, mode, digest in files:
        raw = name.encode("utf-8", "surrogateescape")
        out += [_FILE.pack(first, last, offset, size, mtime, mode, bytes.fromhex(digest), len(raw)), raw]
    if gaps or shards is not None:  # the gap section comes first (its count may be 0)
        out += [_GAP_COUNT.pack(len(gaps))] + [_GAP.pack(*g) for g in gaps]
    if shards is not None:  # a sharded save's members per rank
        out.append(struct.pack(f"<I{len(shards)}I", len(shards), *shards))
    return b"".join(out)


def encode_tail(payload: bytes, data_end: int, version: int = VERSION) -> bytes:
    """The index members carrying ``payload`` (deflated, from version 2) and the trailer, for
    members ending at ``data_end``."""
    stored = payload
    if version >= 2:
        packer = zlib.compressobj(1, zlib.DEFLATED, -15)
        stored = packer.compress(payload) + packer.flush()
    parts = [_empty_member(_INDEX_ID, stored[i : i + _CHUNK]) for i in range(0, len(stored), _CHUNK)]
    body = b"".join(parts)
    fields = (_MAGIC, version, data_end, len(body), len(payload), hashlib.sha256(stored).digest())
    packed = _TRAILER_BODY.pack(*fields, 0)
    packed = packed[:-4] + struct.pack("<I", zlib.crc32(packed[:-4]))
    return body + _empty_member(_TRAILER_ID, packed)


class _Bad(Exception):
    """A check of the index failed (turned into a CorruptCheckpointError naming the object)."""


def _damaged(uri: str, what: str) -> CorruptCheckpointError:
    from ..uri import redact

    return CorruptCheckpointError(
        f"the index of {redact(uri)} is damaged ({what}): the object is not as it was saved;"
        " save the checkpoint again"
    )


def _subfield(data: bytes, at: int, sub_id: bytes, uri: str) -> tuple[bytes, int]:
    """The payload of the empty member at ``at`` with subfield ``sub_id``, and where it ends."""
    head = data[at : at + 16]
    if len(head) < 16 or head[:10] != _HEADER:
        raise _Bad(f"no index member at byte {at} of the index")
    (xlen,) = struct.unpack_from("<H", head, 10)
    sid, slen = head[12:14], struct.unpack_from("<H", head, 14)[0]
    end = at + 12 + xlen + len(_EMPTY_DEFLATE) + len(_EMPTY_TRAILER)
    if sid != sub_id or slen + 4 != xlen or end > len(data):
        raise _Bad(f"malformed index member at byte {at}")
    if data[at + 12 + xlen : end] != _EMPTY_DEFLATE + _EMPTY_TRAILER:
        raise _Bad(f"index member at byte {at} is not empty")
    return data[at + 16 : at + 16 + slen], end


#: Bytes of an object's end that :func:`read_index` reads with the trailer when asked to read
#: ahead (an incremental save's look at its base): an index of up to about 500 files comes in
#: the same request, one round trip fewer (a larger one takes a second read of the rest).
INDEX_AHEAD = 64 * 1024


def read_index(
    store: BlobStore, uri: str, size: int | None = None, tail: bytes | None = None, *, ahead: int = 0
) -> Index | None:
    """The index of the object at ``uri``; None for an object without one (Flyte's, older ones).

    One ranged read of the tail (unless ``tail``, its last :data:`TRAILER_SIZE` bytes, is
    given), one of the index (and a ``stat`` unless ``size`` is given). With ``ahead`` (and no
    ``tail``), the tail read takes the object's last ``ahead`` bytes instead (at most the
    object): an index within them is not read again, and of a longer one only the rest is read.

    Raises:
        CorruptCheckpointError: the trailer names an index that is damaged or inconsistent.
        UnsafeArchiveError: the index names a file outside the tree.
    """
    if size is None:
        size = store.stat(uri)
    if not size or size < TRAILER_SIZE:
        return None
    end = b""  # the object's last bytes before the trailer, read with it
    if tail is None:
        want = min(size, max(ahead, TRAILER_SIZE))
        got = store.read_range(uri, size - want, want)
        if len(got) != want:
            return None  # shorter than it was: not the object whose size was given
        end, tail = got[:-TRAILER_SIZE], got[-TRAILER_SIZE:]
    if not _looks_ours(tail):
        return None  # no index
    try:
        version, data_end, index_len, payload_len, digest = _trailer(tail, size, uri)
        if len(end) >= index_len:
            raw = end[len(end) - index_len :] if index_len else b""
        else:  # the front of the index, before the bytes read with the trailer
            raw = store.read_range(uri, data_end, index_len - len(end)) + end
        if len(raw) != index_len:
            raise _Bad("the object ends inside the index")
        index = _parse(_payload(raw, version, payload_len, digest, uri), data_end, uri, version)
    except _Bad as exc:
        raise _damaged(uri, str(exc)) from None
    return replace(index, raw=raw + tail)


def read_trailer(store: BlobStore, uri: str, size: int) -> tuple[int, bytes] | None:
    """The index version the object's trailer names and the trailer's bytes (one ranged read
    of its tail: pass them to :func:`read_index`), or None when it has no trailer of a version
    this library reads. Nothing is raised for a damaged trailer: the load that asks checks the
    whole tail when it reaches it."""
    if size < TRAILER_SIZE:
        return None
    tail = store.read_range(uri, size - TRAILER_SIZE, TRAILER_SIZE)
    if not _looks_ours(tail):
        return None
    try:
        return _trailer(tail, size, uri)[0], tail
    except _Bad:
        return None


def _looks_ours(tail: bytes) -> bool:
    """Whether an object's last :data:`TRAILER_SIZE` bytes are shaped as our trailer (checked
    further by :func:`_trailer`)."""
    return len(tail) == TRAILER_SIZE and tail[:10] == _HEADER and tail[16:20] == _MAGIC


def _trailer(tail: bytes, size: int, uri: str) -> tuple[int, int, int, int, bytes]:
    """The version, ``data_end``, the index members' length, the payload's length and its
    SHA-256, from the trailer member ``tail`` of an object of ``size`` bytes, checked."""
    body, _ = _subfield(tail, 0, _TRAILER_ID, uri)
    if len(body) != _TRAILER_BODY.size or zlib.crc32(body[:-4]) != struct.unpack("<I", body[-4:])[0]:
        raise _Bad("the trailer's checksum does not match")
    _, version, data_end, index_len, payload_len, digest, _ = _TRAILER_BODY.unpack(body)
    if version not in _READS:
        raise _Bad(
            f"index version {version}, this library reads versions {_READS[0]} to {_READS[-1]}:"
            " upgrade flyte-checkpoint"
        )
    if index_len > _MAX_INDEX or data_end + index_len != size - TRAILER_SIZE:
        raise _Bad("the trailer places the index outside the object")
    if payload_len > (index_len if version == 1 else _MAX_INDEX):
        raise _Bad("the trailer gives the index an impossible length")
    return version, data_end, index_len, payload_len, digest


def _payload(raw: bytes, version: int, payload_len: int, digest: bytes, uri: str) -> bytes:
    """The index payload carried by the index members ``raw`` (inflated, from version 2), its
    length and hash checked."""
    chunks, at = [], 0
    while at < len(raw):
        chunk, at = _subfield(raw, at, _INDEX_ID, uri)
        chunks.append(chunk)
    payload = b"".join(chunks)
    if hashlib.sha256(payload).digest() != digest:  # what is stored, so no flipped bit goes unseen
        raise _Bad("its SHA-256 does not match the trailer's")
    if version >= 2:
        inflater = zlib.decompressobj(-15)
        try:
            payload = inflater.decompress(payload, payload_len + 1)
        except zlib.error:
            raise _Bad("its deflate stream is damaged") from None
        if not inflater.eof or inflater.unconsumed_tail or inflater.unused_data:
            raise _Bad("its deflate stream does not end where the index does")
    if len(payload) != payload_len:
        raise _Bad("its length does not match the trailer's")
    return payload


def check_tail(tail: Tail, uri: str, known: Index | None = None) -> Index | None:
    """Check what a full load found after the tar's last gzip member holding data.

    ``tail`` (from :attr:`~.compression.GzipMembers.tail`) holds the empty gzip members that
    follow the tar, to the object's end. None of them carrying an extra field whose first
    subfield is ours (``FI``, ``FT``) is an object without an index (Flyte's, older ones, and
    the empty members some writers end with): None. Otherwise the tail must be exactly an
    index and trailer that verify and describe the members before it. Gzip readers skip extra
    fields, so this is the only check that sees a damaged byte there; a flip cannot hide the
    index, which has at least two members of ours (one ``FI``, the trailer). Likewise, with
    an index, an empty member between the members holding data that carries an extra field
    must be exactly a padding member (``tail.odd`` says where the first that is not begins).
    ``known``: the object's index as :func:`read_index` read it before the load; a tail of
    exactly its bytes, in its place, is that index (parsing 20,000 files' entries again cost
    0.06 s of a 1.8 s load).

    Raises:
        CorruptCheckpointError: anything else.
        UnsafeArchiveError: the index names a file outside the tree.
    """
    try:
        return _check_tail(tail, uri, known)
    except _Bad as exc:
        raise _damaged(uri, str(exc)) from None


def _check_tail(tail: Tail, uri: str, known: Index | None) -> Index | None:
    data = tail.data
    if tail.overflow:
        raise _Bad("over 256 MiB of empty gzip members follow the tar")
    if not any(_carries_ours(data, at) for at in tail.starts):
        return None
    if known is not None and known.raw and known.data_end == tail.start and data == known.raw:
        index = known  # the same bytes in the same place: what read_index checked and parsed
    else:
        size = tail.start + len(data)
        if len(data) < TRAILER_SIZE:
            raise _Bad("the object ends inside its trailer")
        version, data_end, index_len, payload_len, digest = _trailer(data[-TRAILER_SIZE:], size, uri)
        if data_end != tail.start:
            raise _Bad(f"the trailer says the tar's members end at byte {data_end}, not {tail.start}")
        index = _parse(_payload(data[:index_len], version, payload_len, digest, uri), data_end, uri, version)
    if len(index.members) != tail.members_before:
        raise _Bad(f"it lists {len(index.members)} gzip members where the object has {tail.members_before}")
    if tail.odd is not None:
        raise _Bad(f"the empty gzip member at byte {tail.odd} carries an extra field but is not padding")
    return index


def _carries_ours(data: bytes, at: int) -> bool:
    """The member at ``at`` has an extra field (FLG.FEXTRA) whose first subfield is ours."""
    return (
        len(data) >= at + 14
        and bool(data[at + 3] & 0x04)
        and data[at + 12 : at + 14] in (_INDEX_ID, _TRAILER_ID)
    )


def _parse(payload: bytes, data_end: int, uri: str, version: int) -> Index:
    from ..util.limits import LoadLimits

    limits = LoadLimits.from_env()
    if len(payload) < _COUNTS.size:
        raise _Bad("it is shorter than its counts")
    n_members, n_files = _COUNTS.unpack_from(payload, 0)
    at = _COUNTS.size
    if n_files > limits.max_members:
        raise _Bad(f"it lists more than {limits.max_members:,} files")
    members: list[Member] = []
    coff = uoff = 0
    layout = _MEMBER_CHECKED if version >= CHECKED_FROM else _MEMBER
    if at + n_members * layout.size + n_files * _FILE.size > len(payload):
        raise _Bad("it is shorter than its counts say")
    for row in layout.iter_unpack(payload[at : at + n_members * layout.size]):
        clen, ulen = row[0], row[1]
        if not 18 <= clen <= MAX_MEMBER + 65536 or ulen > MAX_MEMBER:
            raise _Bad("a member has an impossible length")
        members.append(Member(coff, clen, uoff, ulen, row[2], row[3] if len(row) == 4 else None))
        coff += clen
        uoff += ulen
    at += n_members * layout.size
    if coff != data_end:
        raise _Bad("its members do not end where the index begins")
    files: dict[str, FileEntry] = {}
    for _ in range(n_files):
        if at + _FILE.size > len(payload):
            raise _Bad("it ends inside a file entry")
        first, last, offset, size, mtime, mode, digest, name_len = _FILE.unpack_from(payload, at)
        at += _FILE.size
        if at + name_len > len(payload):
            raise _Bad("it ends inside a file name")
        try:
            name = payload[at : at + name_len].decode("utf-8", "surrogateescape")
        except UnicodeDecodeError:  # pragma: no cover - surrogateescape decodes any bytes
            raise _Bad("a file name is not UTF-8") from None
        at += name_len
        entry = FileEntry(name, first, last, offset, size, mtime, mode, digest.hex())
        _check_entry(entry, members, uri)
        files[entry.name] = entry
    gaps: dict[int, tuple[int, str]] = {}
    if at < len(payload):  # the optional gap section
        if at + _GAP_COUNT.size > len(payload):
            raise _Bad("bytes follow its last file entry (not a gap section)")
        (n_gaps,) = _GAP_COUNT.unpack_from(payload, at)
        at += _GAP_COUNT.size
        rest = at + n_gaps * _GAP.size  # where a sharded save's rank counts would begin
        if n_gaps > len(members) or not (rest == len(payload) or _shard_section_at(payload, rest)):
            raise _Bad("bytes follow its last file entry (not a gap section of that count)")
        for end, length, digest in _GAP.iter_unpack(payload[at:rest]):
            if not 0 < length <= end <= uoff:
                raise _Bad("a gap lies outside the tar")
            gaps[end] = (length, digest.hex())
        at = rest
    shards: tuple[int, ...] = ()
    if at < len(payload):  # a sharded save's members per rank (checked by _shard_section_at)
        (n_shards,) = struct.unpack_from("<I", payload, at)
        shards = struct.unpack_from(f"<{n_shards}I", payload, at + 4)
        if sum(shards) > len(members):
            raise _Bad("its shards do not match its members")
        at = len(payload)
    if at != len(payload):
        raise _Bad("bytes follow its last file entry")
    return Index(members, files, data_end, gaps, shards, digests.BY_VERSION[version])


def _shard_section_at(payload: bytes, at: int) -> bool:
    """Whether ``payload`` ends with exactly one rank-count section starting at ``at``."""
    if at + 4 > len(payload):
        return False
    (n,) = struct.unpack_from("<I", payload, at)
    return at + 4 + 4 * n == len(payload)


def _check_entry(e: FileEntry, members: list[Member], uri: str) -> None:
    """Check one entry's values. Their types need no check: the numbers come from
    ``struct.unpack`` and the hash is the hex of 32 bytes. (Once per file of every indexed
    load: 20,000 entries took 0.10 s more with per-field type and regex checks.)"""
    name = e.name
    if not name or name[0] == "/" or "\0" in name or (".." in name and ".." in name.split("/")):
        from ..uri import redact

        raise UnsafeArchiveError(
            f"the index of {redact(uri)} names the file {name[:200]!r}, outside the checkpoint;"
            " refusing. The object is forged or damaged: save it again"
        )
    first, last_i, offset, size = e.first, e.last, e.offset, e.size
    if not (0 <= first <= last_i < len(members)) or offset < 0 or size < 0:
        raise _Bad(f"{name[:200]!r} lies outside the object's members")
    m0, last = members[first], members[last_i]
    end = m0.uoff + offset + size
    if offset >= max(m0.ulen, 1) or end > last.uoff + last.ulen:
        raise _Bad(f"{name[:200]!r} lies outside its members")
    if size and end <= last.uoff:
        raise _Bad(f"{name[:200]!r} ends before its last member")


def file_names(index: Index) -> list[str]:
    return sorted(index.files)


__all__ = [
    "ALIGN_MIN",
    "TRAILER_SIZE",
    "FileEntry",
    "Index",
    "IndexBuilder",
    "Member",
    "read_index",
]
