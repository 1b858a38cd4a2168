"""Gzip streams from the fastest compatible library installed.

ISA-L (``isal``) where it is installed, the standard library otherwise. Whatever the
library, the output is a standard gzip stream (possibly several members), which any
gzip reader decodes, Flyte's included. Our reader (:class:`GzipMembers`) verifies every
member's CRC and length, and is stricter than most: nothing may lie between or after
the members.
"""

from __future__ import annotations

import gzip
import importlib
import itertools
import struct
import zlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import BinaryIO

from ..errors import CorruptCheckpointError

_ISAL_MODULES = ("igzip", "igzip_lib", "isal_zlib")
# Plain modules to a type checker (isal's stubs lack arguments it takes, such as compress's wbits),
# and the same types whether or not isal is installed.
_igzip: ModuleType | None
_igzip_lib: ModuleType | None
_isal_zlib: ModuleType | None
try:  # pragma: no cover - which branch runs depends on the environment
    _igzip, _igzip_lib, _isal_zlib = (importlib.import_module(f"isal.{m}") for m in _ISAL_MODULES)
except ImportError:  # pragma: no cover
    _igzip = _igzip_lib = _isal_zlib = None

#: The library in use, for logs and benchmarks.
BACKEND = "isal" if _igzip is not None else "zlib"

#: Level chosen for throughput: ISA-L's level 1 compresses model-like data as well as
#: zlib's level 6 and JSON about 20% less, at several times the speed.
DEFAULT_LEVEL = 1

#: Errors a damaged gzip stream raises, whatever the library.
GZIP_ERRORS: tuple[type[BaseException], ...] = (gzip.BadGzipFile, zlib.error, EOFError) + (
    (_isal_zlib.error,) if _isal_zlib is not None else ()
)

_DAMAGE: tuple[type[BaseException], ...] = (CorruptCheckpointError, *GZIP_ERRORS)


def compressor(fileobj: BinaryIO, level: int = DEFAULT_LEVEL) -> BinaryIO:
    """A writable that gzip-compresses into ``fileobj`` (closing it does not close ``fileobj``)."""
    if _igzip is not None:
        return _igzip.IGzipFile(fileobj=fileobj, mode="wb", compresslevel=min(level, 3), mtime=0)
    return gzip.GzipFile(fileobj=fileobj, mode="wb", compresslevel=level, mtime=0)  # type: ignore[return-value]


def decompressor(fileobj: BinaryIO) -> GzipMembers:
    """A readable of the decompressed stream; reading to the end verifies every member and
    that nothing lies between or after them (see :class:`GzipMembers`)."""
    return GzipMembers(fileobj)


def compress_member(data: bytes | memoryview, level: int = DEFAULT_LEVEL) -> bytes:
    """``data`` as one complete gzip member (the compressor releases the GIL)."""
    if _isal_zlib is not None:
        return _isal_zlib.compress(data, min(level, 3), wbits=31)
    gz = zlib.compressobj(level, zlib.DEFLATED, 31)  # zlib.compress takes wbits only from Python 3.11
    return gz.compress(data) + gz.flush()


_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no flags, no mtime
_STORED_MAX = 0xFFFF


def stored_length(n: int) -> int:
    """The bytes of :func:`stored_member` of ``n`` bytes: the header and trailer (18) and 5 for
    each 65,535-byte block (one for empty data)."""
    return n + 18 + 5 * max(1, -(-n // _STORED_MAX))


def stored_member(data: bytes | memoryview) -> list[bytes | memoryview]:
    """``data`` as one gzip member of stored (uncompressed) deflate blocks, in pieces.

    The pieces are the member's headers and views of ``data`` itself: nothing is copied,
    and the only work is a CRC-32 (which releases the GIL). Far cheaper than ``zlib`` at
    level 0, for data that would not shrink anyway. ``b"".join()`` them for one ``bytes``.
    """
    view = memoryview(data).cast("B")
    n = len(view)
    pieces: list[bytes | memoryview] = [_GZIP_HEADER]
    if n == 0:
        pieces.append(b"\x01\x00\x00\xff\xff")
    for start in range(0, n, _STORED_MAX):
        chunk = view[start : start + _STORED_MAX]
        size = len(chunk)
        pieces.append(struct.pack("<BHH", start + size >= n, size, size ^ 0xFFFF))
        pieces.append(chunk)
    pieces.append(struct.pack("<II", _crc32(view), n & 0xFFFFFFFF))
    return pieces


# ISA-L's CRC-32 runs at 3.5 times zlib's here (9.3 GB/s against 2.7 on 4 MiB blocks): with it,
# the data's CRC and the member's own (its ``ccrc`` in the index) cost less than zlib's one did.
_crc32 = _isal_zlib.crc32 if _isal_zlib is not None else zlib.crc32


GZIP_MAGIC = b"\x1f\x8b"
_RAW_CHUNK = 1024 * 1024  # compressed input per step, as views of what the source holds (no copies)


class _ZlibMember:
    """The standard library's decoder of one gzip member, with the interface of ISA-L's."""

    def __init__(self) -> None:
        self._d = zlib.decompressobj(wbits=31)
        self._tail = b""

    @property
    def eof(self) -> bool:
        return self._d.eof

    @property
    def unused_data(self) -> bytes:
        return self._d.unused_data

    @property
    def needs_input(self) -> bool:
        return not self._tail

    def decompress(self, data: bytes | memoryview, max_length: int) -> bytes:
        if self._tail:
            data = self._tail + bytes(data)
        out = self._d.decompress(data, max_length)
        self._tail = self._d.unconsumed_tail
        return out


def member_decoder():
    """A decoder of one gzip member (``decompress(data, max_length)``, ``eof``, ``unused_data``)."""
    if _isal_zlib is not None and _igzip_lib is not None:
        return _igzip_lib.IgzipDecompressor(flag=_igzip_lib.DECOMP_GZIP)
    return _ZlibMember()


@dataclass
class Tail:
    """The empty gzip members after the last member that held data, as a reader met them."""

    start: int = 0  # where they begin in the compressed stream
    data: bytes = b""  # their bytes, to the stream's end
    starts: list[int] = field(default_factory=list)  # where each begins in ``data``
    members_before: int = 0  # the members before them
    overflow: bool = False  # more than _MAX_TAIL bytes: ``data`` was not kept
    #: Where the first empty member *before* a member holding data begins, if it carries an
    #: extra field but is not a padding member (:func:`.index.is_padding`); only an object
    #: with an index is held to that (:func:`.index.check_tail`).
    odd: int | None = None


_MAX_TAIL = 256 * 1024 * 1024 + 1024


class GzipMembers:
    """A readable of the data held in a series of gzip members, read strictly.

    Every member's CRC and length are checked (by the decoder); each member must begin
    exactly where the previous one ends, and nothing may follow the last one. Common gzip
    readers skip zero bytes between members; here they are damage, since a run of zeros is
    what a wiped member looks like, and skipping it would drop the data it held unnoticed.

    ``read`` raises :class:`~flyte_checkpoint.errors.CorruptCheckpointError` for a damaged
    member, bytes between or after members, or input that ends inside a member. Once read to
    the end, :attr:`tail` holds the empty members that follow the last one holding data
    (where a folder object keeps its index: :func:`.index.check_tail`), and where the first
    empty member before them that carries an extra field but is not padding begins.
    """

    def __init__(self, fileobj: BinaryIO) -> None:
        # read1 hands out what the source holds without copying it
        self._raw_read = getattr(fileobj, "read1", fileobj.read)
        self._d = member_decoder()
        self._pending: bytes | memoryview = b""  # read, not yet given to a decoder
        self._fed = 0  # compressed bytes given to the current member's decoder
        self._start = 0  # where the current member begins in the compressed stream
        self._members = 1
        self._done = False
        # the run of empty members at the end so far: raw pieces kept (references, no copies)
        # from the start of the first member after the last one that gave data
        self._kept: list[bytes | memoryview] | None = []
        self._kept_len = 0
        self._gave = False  # the current member gave data
        self._tail = Tail(starts=[0])

    @property
    def tail(self) -> Tail:
        """The empty members after the last one holding data (read to the end first)."""
        if self._kept is not None and not self._tail.data:
            self._tail.data = b"".join(self._kept)
        return self._tail

    def _read_raw(self, n: int) -> bytes | memoryview:
        data = self._raw_read(n)
        if self._kept is not None and data:
            self._kept.append(data)
            self._kept_len += len(data)
            if self._kept_len > _MAX_TAIL:
                self._kept, self._tail.overflow = None, True
        return data

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes, at least one until the stream ends (all of them if ``n < 0``)."""
        if n is None or n < 0:
            parts = []
            while part := self.read(4 * _RAW_CHUNK):
                parts.append(part)
            return b"".join(parts)
        while not self._done:
            d = self._d
            if d.eof:
                self._next_member(d.unused_data)
                continue
            data: bytes | memoryview = b""
            if d.needs_input:
                data, self._pending = self._pending or self._read_raw(_RAW_CHUNK), b""
                if not data:
                    out = self._decode(b"", n)  # what the decoder still holds, if anything
                    if out:
                        return out
                    raise self._damage(
                        f"the gzip stream ends inside member {self._members} (which starts at byte"
                        f" {self._start}): the object is truncated"
                    )
                self._fed += len(data)
            out = self._decode(data, n)
            if out:
                return out
        return b""

    def _decode(self, data: bytes | memoryview, n: int) -> bytes:
        try:
            out = self._d.decompress(data, n)
        except GZIP_ERRORS as exc:
            raise self._damage(
                f"gzip member {self._members} (starting at byte {self._start}) is damaged ({exc})"
            ) from None
        if out and not self._gave:
            self._gave = True
            if len(self._tail.starts) > 1 and self._tail.odd is None:
                self._check_padding()
            self._kept, self._kept_len = None, 0  # a member with data: not part of the tail
        return out

    def _check_padding(self) -> None:
        """Note in :attr:`Tail.odd` the first of the empty members just passed (those before
        the member now giving data) that carries an extra field and is not a padding member:
        gzip decoders skip extra fields, so only this sees a damaged byte there."""
        from .index import is_padding

        tail = self._tail
        if self._kept is None:  # over _MAX_TAIL bytes of empty members
            tail.odd = tail.start
            return
        need, got, parts = tail.starts[-1], 0, []
        for piece in self._kept:  # up to the current member's start
            if got >= need:
                break
            parts.append(piece[: need - got])
            got += len(parts[-1])
        run = b"".join(parts)
        for a, b in itertools.pairwise(tail.starts):
            if run[a + 3] & 0x04 and not is_padding(run[a:b]):
                tail.odd = tail.start + a
                return

    def _next_member(self, rest: bytes | memoryview) -> None:
        """After a member's end: start the next one, or end the stream if nothing follows."""
        self._start += self._fed - len(rest)
        tail = self._tail
        if self._gave:  # the member that ended held data: a new run of empty ones may begin
            self._gave = False
            tail.start, tail.starts, tail.members_before = self._start, [], self._members
            self._kept, self._kept_len, tail.overflow = [rest], len(rest), False
        while len(rest) < 2:
            more = self._read_raw(_RAW_CHUNK)
            if not more:
                break
            rest = bytes(rest) + bytes(more)
        if not rest:
            self._done = True
            return
        if bytes(rest[:2]) != GZIP_MAGIC:
            what = "zero bytes" if bytes(rest[:1]) == b"\0" else "bytes that are not a gzip member"
            raise self._damage(
                f"{what} follow gzip member {self._members} at byte {self._start}: members must"
                " follow each other with nothing between or after them (a wiped or cut member, or"
                " data appended)"
            )
        if self._kept is not None:
            tail.starts.append(self._start - tail.start)
        self._members += 1
        self._d = member_decoder()
        self._fed = 0
        self._pending = rest

    @staticmethod
    def _damage(what: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"{what}; save the checkpoint again")


def inflate(data: bytes, limit: int) -> tuple[bytes, bool]:
    """Decode up to ``limit`` bytes from the gzip stream that begins ``data``, strictly.

    Returns the bytes decoded (fewer than ``limit`` if the stream ends or is damaged first)
    and whether ``data`` is exactly a complete, undamaged series of members holding no
    more than ``limit`` bytes. Never raises for damage.
    """
    import io

    reader = GzipMembers(io.BytesIO(data))
    parts: list[bytes] = []
    got = 0
    try:
        while got <= limit:
            part = reader.read(limit + 1 - got)
            if not part:
                return b"".join(parts), True
            parts.append(part)
            got += len(part)
    except _DAMAGE:
        return b"".join(parts)[:limit], False
    return b"".join(parts)[:limit], False
