"""Restore one stored object into a folder: a tarball is extracted, anything else is a payload.

The decision comes from the content (a tar stream, optionally gzip-compressed), not
from names or metadata, so objects written by other tools restore too.
"""

from __future__ import annotations

import os
import zlib
from typing import BinaryIO

from . import tarstream as ts
from .archive import unpack
from .compression import GZIP_ERRORS, decompress_head, decompressor
from .errors import CheckpointError, CorruptCheckpointError, TransientError
from .pipeline import ReadAhead

PAYLOAD = "payload"
_HEAD = 64 * 1024
_CHUNK = 1024 * 1024
_GZIP_MAGIC = b"\x1f\x8b"


class CountingReader:
    """A readable that serves ``head`` first, then ``raw``, and counts what it served."""

    def __init__(self, head: bytes, raw: BinaryIO) -> None:
        self._head = memoryview(head)
        self._raw = raw
        self.count = 0

    def read(self, n: int = -1) -> bytes:
        if self._head:
            if n < 0 or n >= len(self._head):
                out = bytes(self._head)
                self._head = memoryview(b"")
                if n > len(out) or n < 0:
                    more = self._raw.read(-1 if n < 0 else n - len(out))
                    out += more
            else:
                out = bytes(self._head[:n])
                self._head = self._head[n:]
        else:
            out = self._raw.read(n)
        self.count += len(out)
        return out

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # gzip readers use readinto when present
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


def read_head(raw: BinaryIO) -> bytes:
    """Up to the first 64 KiB of a stream: enough to tell a tarball from a payload."""
    parts, got = [], 0
    while got < _HEAD:
        chunk = raw.read(_HEAD - got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def sniff(head: bytes) -> str:
    """``"tar.gz"``, ``"tar"``, ``"gzip"`` (a gzip payload) or ``"raw"`` for an object's first bytes.

    Raises:
        CorruptCheckpointError: the head is a damaged gzip stream or a damaged ustar header.
    """
    if head[:2] == _GZIP_MAGIC:
        try:
            inner = decompress_head(head, ts.BLOCK)
        except GZIP_ERRORS as exc:
            raise CorruptCheckpointError(f"the object starts as gzip but is damaged ({exc})") from None
        if ts.is_header(inner):
            return "tar.gz"
        if ts.looks_like_ustar(inner):
            raise CorruptCheckpointError("the tarball's first header is damaged")
        return "gzip"
    if ts.is_header(head):
        return "tar"
    if ts.looks_like_ustar(head):
        raise CorruptCheckpointError("the tarball's first header is damaged")
    return "raw"


def restore(raw: BinaryIO, dest: str, expected_size: int, *, max_bytes: int | None = None) -> bool:
    """Restore the object read from ``raw`` into the empty folder ``dest``.

    Returns True for a tarball (the tree is in ``dest``), False for a payload
    (``dest/payload``). Reads the object to its end and checks its length.

    Raises:
        CorruptCheckpointError: damaged or truncated content.
        UnsafeArchiveError: a tarball member that would escape ``dest``.
        TransientError: fewer or more bytes arrived than the store reported.
    """
    head = read_head(raw)
    stream = CountingReader(head, raw)
    kind = sniff(head)
    try:
        if kind == "tar.gz":
            # decompression (which releases the GIL) runs in its own thread, ahead of unpacking
            with ReadAhead(decompressor(stream), chunk_size=_CHUNK) as inflated:  # type: ignore[arg-type]
                unpack(inflated, dest, max_bytes=max_bytes)  # type: ignore[arg-type]
        elif kind == "tar":
            unpack(stream, dest, max_bytes=max_bytes)  # type: ignore[arg-type]
        else:
            _write_payload(stream, os.path.join(dest, PAYLOAD), verify_gzip=kind == "gzip")
    except CheckpointError:
        raise
    except GZIP_ERRORS as exc:
        raise CorruptCheckpointError(f"the tarball's gzip stream is damaged or truncated ({exc})") from None
    if stream.count != expected_size:
        raise TransientError(
            f"read {stream.count} bytes where the store reported {expected_size}: the object changed"
            " or the connection was cut"
        )
    return kind in ("tar.gz", "tar")


class _GzipVerifier:
    """Decompresses a gzip stream fed in pieces, only to check it (output is dropped)."""

    def __init__(self) -> None:
        self._d = zlib.decompressobj(wbits=31)
        self.complete = False

    def feed(self, data: bytes) -> None:
        while data:
            if self.complete:
                if not data.strip(b"\0"):  # zero padding after the last member, as gzip allows
                    return
                self._d = zlib.decompressobj(wbits=31)
                self.complete = False
            try:
                self._d.decompress(data, _CHUNK)
            except zlib.error as exc:
                raise CorruptCheckpointError(f"the gzip payload is damaged ({exc})") from None
            if self._d.eof:
                data, self.complete = self._d.unused_data, True
            else:
                data = self._d.unconsumed_tail


def _write_payload(stream: CountingReader, path: str, *, verify_gzip: bool) -> None:
    check = _GzipVerifier() if verify_gzip else None
    with open(path, "wb") as out:
        while chunk := stream.read(_CHUNK):
            out.write(chunk)
            if check is not None:
                check.feed(chunk)
    if check is not None and not check.complete:
        raise CorruptCheckpointError("the gzip payload is truncated")
