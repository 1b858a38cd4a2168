"""Gzip streams from the fastest compatible library installed.

ISA-L (``isal``) where it is installed, the standard library otherwise. Whatever the
library, the output is a standard gzip stream (possibly several members), which any
gzip reader decodes, Flyte's included; readers verify every member's CRC and length.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from typing import BinaryIO

try:  # pragma: no cover - which branch runs depends on the environment
    from isal import igzip as _igzip
    from isal import isal_zlib as _isal_zlib
except ImportError:  # pragma: no cover
    _igzip = None
    _isal_zlib = None

#: The library in use, for logs and benchmarks.
BACKEND = "isal" if _igzip is not None else "zlib"

#: Level chosen for throughput: ISA-L's level 1 compresses model-like data as well as
#: zlib's level 6 and JSON about 20% less, at several times the speed.
DEFAULT_LEVEL = 1

#: Errors a damaged gzip stream raises, whatever the library.
GZIP_ERRORS: tuple[type[BaseException], ...] = (gzip.BadGzipFile, zlib.error, EOFError) + (
    (_isal_zlib.error,) if _isal_zlib is not None else ()
)


def compressor(fileobj: BinaryIO, level: int = DEFAULT_LEVEL) -> BinaryIO:
    """A writable that gzip-compresses into ``fileobj`` (closing it does not close ``fileobj``)."""
    if _igzip is not None:
        return _igzip.IGzipFile(fileobj=fileobj, mode="wb", compresslevel=min(level, 3), mtime=0)
    return gzip.GzipFile(fileobj=fileobj, mode="wb", compresslevel=level, mtime=0)  # type: ignore[return-value]


def decompressor(fileobj: BinaryIO) -> BinaryIO:
    """A readable of the decompressed stream; reading to the end verifies every member."""
    if _igzip is not None:
        return _igzip.IGzipFile(fileobj=fileobj, mode="rb")
    return gzip.GzipFile(fileobj=fileobj, mode="rb")  # type: ignore[return-value]


def compress_member(data: bytes | memoryview, level: int = DEFAULT_LEVEL) -> bytes:
    """``data`` as one complete gzip member (the compressor releases the GIL)."""
    if _isal_zlib is not None:
        return _isal_zlib.compress(data, min(level, 3), wbits=31)
    return zlib.compress(data, level, wbits=31)


_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no flags, no mtime
_STORED_MAX = 0xFFFF


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
    pieces.append(struct.pack("<II", zlib.crc32(view), n & 0xFFFFFFFF))
    return pieces


def decompress_head(data: bytes, want: int) -> bytes:
    """Decompress up to ``want`` bytes from the start of a gzip stream held in ``data``.

    Follows concatenated members. Raises one of :data:`GZIP_ERRORS` if the head is damaged;
    returns fewer bytes if ``data`` ends first.
    """
    out = b""
    while len(out) < want and data:
        d = zlib.decompressobj(wbits=31)
        out += d.decompress(data, want - len(out))
        if not d.eof:
            break
        data = d.unused_data
    return out
