"""Tar headers: build them for the writer, parse and verify them for the reader.

The writer emits POSIX ustar headers, with a PAX extended header before a member
whose name or link is too long or not ASCII, or whose size does not fit in octal,
as Python's ``tarfile`` and GNU tar do. The reader also understands GNU long-name
members, so archives from either tool read.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

BLOCK = 512
ZERO_BLOCK = bytes(BLOCK)

REGTYPE = b"0"
AREGTYPE = b"\0"
LNKTYPE = b"1"
SYMTYPE = b"2"
CHRTYPE = b"3"
BLKTYPE = b"4"
DIRTYPE = b"5"
FIFOTYPE = b"6"
CONTTYPE = b"7"
PAX_HEADER = b"x"
PAX_GLOBAL = b"g"
GNU_LONGNAME = b"L"
GNU_LONGLINK = b"K"

_MAX_OCTAL_SIZE = 8**11 - 1


def padding(size: int) -> int:
    """Bytes of zero padding after ``size`` bytes of member data."""
    return -size % BLOCK


def _checksum(block: bytes | bytearray) -> int:
    """The unsigned header checksum, the checksum field counted as spaces."""
    return sum(block[:148]) + 256 + sum(block[156:512])


def _signed_checksum(block: bytes | bytearray) -> int:
    """The checksum some old tars wrote, summing bytes as signed chars."""
    return (
        sum(b - 256 if b > 127 else b for b in block[:148])
        + 256
        + sum(b - 256 if b > 127 else b for b in block[156:512])
    )


_HEADER = struct.Struct("100s8s8s8s12s12s8s1s100s8s32s32s8s8s155s12x")  # ustar; short fields NUL-padded


def _raw_header(
    name: bytes,
    mode: int,
    uid: int,
    gid: int,
    size: int,
    mtime: int,
    typeflag: bytes,
    linkname: bytes,
    uname: bytes,
    gname: bytes,
) -> bytes:
    block = _HEADER.pack(
        name, b"%07o" % (mode & 0o7777), b"%07o" % min(uid, 0o7777777), b"%07o" % min(gid, 0o7777777),
        b"%011o" % min(size, _MAX_OCTAL_SIZE), b"%011o" % max(0, min(mtime, _MAX_OCTAL_SIZE)),
        b"        ", typeflag, linkname, b"ustar\x0000", uname, gname, b"0000000", b"0000000", b"",
    )  # fmt: skip
    # the checksum is summed with its own field as spaces, then written in its place
    return block[:148] + b"%06o\0 " % sum(block) + block[156:]


def _pax_record(key: str, value: bytes) -> bytes:
    body = b" " + key.encode() + b"=" + value + b"\n"
    n = len(body) + 1
    while len(str(n).encode()) + len(body) != n:
        n = len(str(n).encode()) + len(body)
    return str(n).encode() + body


def header(
    name: str,
    *,
    mode: int,
    size: int,
    mtime: int,
    typeflag: bytes,
    linkname: str = "",
    uid: int = 0,
    gid: int = 0,
    uname: str = "",
    gname: str = "",
) -> bytes:
    """The header block(s) of one member: a PAX header first when the fields need one."""
    bname = name.encode("utf-8", "surrogateescape")
    blink = linkname.encode("utf-8", "surrogateescape")
    pax = b""
    if len(bname) > 100 or not bname.isascii():
        pax += _pax_record("path", bname)
    if len(blink) > 100 or not blink.isascii():
        pax += _pax_record("linkpath", blink)
    if size > _MAX_OCTAL_SIZE:
        pax += _pax_record("size", str(size).encode())
    main = _raw_header(
        _ascii_fallback(bname),
        mode,
        uid,
        gid,
        size,
        mtime,
        typeflag,
        _ascii_fallback(blink),
        uname.encode("ascii", "replace"),
        gname.encode("ascii", "replace"),
    )
    if not pax:
        return main
    pax_name = b"././@PaxHeader"
    return (
        _raw_header(pax_name, 0o644, 0, 0, len(pax), mtime, PAX_HEADER, b"", b"", b"")
        + pax
        + bytes(padding(len(pax)))
        + main
    )


def _ascii_fallback(name: bytes) -> bytes:
    return name.decode("utf-8", "replace").encode("ascii", "replace")[:100]


def end_of_archive() -> bytes:
    """Two zero blocks end an archive."""
    return ZERO_BLOCK * 2


class HeaderError(ValueError):
    """A 512-byte block that is not a valid tar header."""


@dataclass
class Header:
    """The fields of one header block that extraction uses."""

    name: str
    mode: int
    size: int
    mtime: int
    typeflag: bytes
    linkname: str


def _number(field: bytes) -> int:
    if field[:1] == b"\x80":  # GNU base-256, positive
        return int.from_bytes(field[1:], "big")
    if field[:1] == b"\xff":  # GNU base-256, negative
        return int.from_bytes(field, "big", signed=True)
    text = field.split(b"\0", 1)[0].strip(b" \0")
    if not text:
        return 0
    try:
        return int(text, 8)
    except ValueError:
        raise HeaderError(f"bad number field {field!r}") from None


def _text(field: bytes) -> bytes:
    return field.split(b"\0", 1)[0]


def is_header(block: bytes) -> bool:
    """True when ``block`` starts with a tar header: not all zeros, its checksum right and its
    numeric fields numbers (the test of what a tarball must begin with)."""
    if len(block) < BLOCK or block[:BLOCK] == ZERO_BLOCK:
        return False
    try:
        parse(block[:BLOCK])
        for start, end in ((108, 116), (116, 124), (329, 337), (337, 345)):  # uid, gid, device numbers
            _number(block[start:end])
    except HeaderError:
        return False
    return True


def parse(block: bytes) -> Header:
    """Parse and verify one header block.

    Raises:
        HeaderError: the checksum does not match or a numeric field is garbage.
    """
    try:
        stored = int(block[148:156].split(b"\0", 1)[0].strip() or b"-1", 8)
    except ValueError:
        raise HeaderError("bad checksum field") from None
    if stored != _checksum(block) and stored != _signed_checksum(block):
        raise HeaderError("header checksum mismatch")
    name = _text(block[0:100])
    if block[257:262] == b"ustar":
        prefix = _text(block[345:500])
        if prefix and block[257:263] == b"ustar\x00":
            name = prefix + b"/" + name
    size = _number(block[124:136])
    if size < 0:
        raise HeaderError(f"negative size {size}")
    return Header(
        name=name.decode("utf-8", "surrogateescape"),
        mode=_number(block[100:108]),
        size=size,
        mtime=_number(block[136:148]),
        typeflag=block[156:157],
        linkname=_text(block[157:257]).decode("utf-8", "surrogateescape"),
    )


def parse_pax(data: bytes) -> dict[str, str]:
    """The records of a PAX extended header.

    Raises:
        HeaderError: a record is malformed.
    """
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        if not data[pos:].strip(b"\0"):
            break
        sp = data.find(b" ", pos)
        if sp < 0:
            raise HeaderError("malformed PAX record")
        try:
            length = int(data[pos:sp])
        except ValueError:
            raise HeaderError("malformed PAX record length") from None
        record = data[sp + 1 : pos + length]
        if length <= 0 or pos + length > len(data) or not record.endswith(b"\n") or b"=" not in record:
            raise HeaderError("malformed PAX record")
        key, _, value = record[:-1].partition(b"=")
        out[key.decode("utf-8", "replace")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out
