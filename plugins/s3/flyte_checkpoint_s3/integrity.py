"""S3's checksums on the wire: CRC32 (zlib), CRC32C and CRC64NVME (awscrt, if installed).

Each part of a multipart upload gets its own checksum (``ChecksumCRC32=...`` on the request),
computed in the thread that uploads it; :meth:`Crc.combine` joins them in order into the whole
object's checksum, so the object is stored with a ``FULL_OBJECT`` checksum that a plain download
can verify. A read verifies the stored full-object value of :func:`expected_checksum` (never a
``COMPOSITE`` one: a checksum of the parts' checksums cannot be computed from the bytes).
All three are reflected CRCs whose initial value and final XOR are all ones, which is
what the combination (zlib's ``crc32_combine``, for any width) relies on.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flyte_checkpoint.errors import ConfigurationError

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True)
class Crc:
    """One checksum algorithm as S3 names it."""

    name: str
    width: int
    poly: int  # reflected polynomial
    update: Callable[[Buffer, int], int] = field(repr=False)
    _x2n: list[int] = field(default_factory=list, repr=False, compare=False)

    @property
    def param(self) -> str:
        """The boto3 parameter / response field, e.g. ``ChecksumCRC32``."""
        return f"Checksum{self.name}"

    def compute(self, data: Buffer, value: int = 0) -> int:
        """The checksum of ``data``, continuing from ``value`` (the checksum of what came before)."""
        return self.update(data, value)

    def encode(self, value: int) -> str:
        """The base64 text S3 uses for a checksum value."""
        return base64.b64encode(value.to_bytes(self.width // 8, "big")).decode("ascii")

    def decode(self, text: str) -> int:
        """The integer value of S3's base64 text (raises ValueError if malformed)."""
        raw = base64.b64decode(text, validate=True)
        if len(raw) != self.width // 8:
            raise ValueError(f"a {self.name} checksum has {self.width // 8} bytes, not {len(raw)}")
        return int.from_bytes(raw, "big")

    def combine(self, first: int, second: int, second_len: int) -> int:
        """The checksum of A+B from the checksum of A, that of B and B's length in bytes."""
        if second_len == 0:
            return first
        return self._mult(self._x_pow_8n(second_len), first) ^ second

    # GF(2) arithmetic modulo the polynomial, bit-reflected (as zlib's crc32_combine).
    def _mult(self, a: int, b: int) -> int:
        top = 1 << (self.width - 1)
        product = 0
        m = top
        while m:
            if a & m:
                product ^= b
            b = (b >> 1) ^ self.poly if b & 1 else b >> 1
            m >>= 1
        return product

    def _x_pow_8n(self, n: int) -> int:
        """x ** (8 * n) modulo the polynomial."""
        table = self._x2n
        if not table:
            value = 1 << (self.width - 2)  # x ** 1
            for _ in range(72):  # enough for lengths up to 2 ** 64 bytes
                table.append(value)
                value = self._mult(value, value)
        product = 1 << (self.width - 1)  # x ** 0
        k = 3
        while n:
            if n & 1:
                product = self._mult(table[k], product)
            n >>= 1
            k += 1
        return product


def _crt(name: str) -> Callable[[Buffer, int], int] | None:
    try:
        from awscrt import checksums
    except ImportError:
        return None
    return getattr(checksums, name, None)


def get(name: str) -> Crc | None:
    """The algorithm S3 calls ``name``, or ``None`` for ``"NONE"``.

    Raises:
        ConfigurationError: CRC32C or CRC64NVME without awscrt installed, or an unknown name.
    """
    name = name.upper()
    if name == "NONE":
        return None
    crc = find(name)
    if crc is None:
        if name in ("CRC32C", "CRC64NVME"):
            raise ConfigurationError(
                f"checksum {name} needs awscrt: pip install 'flyte-checkpoint-s3[crt]',"
                " or set checksum=CRC32 (FLYTE_CHECKPOINT_S3_CHECKSUM)"
            )
        raise ConfigurationError(f"unknown checksum {name!r}: use CRC32, CRC32C, CRC64NVME or NONE")
    return crc


def find(name: str) -> Crc | None:
    """The algorithm if it can be computed in this process, else ``None`` (no error)."""
    return _ALGORITHMS.get(name.upper()) or _load_crt(name.upper())


_ALGORITHMS: dict[str, Crc] = {
    "CRC32": Crc("CRC32", 32, 0xEDB88320, lambda data, value: zlib.crc32(data, value)),
}


def _load_crt(name: str) -> Crc | None:
    spec = {"CRC32C": (32, 0x82F63B78, "crc32c"), "CRC64NVME": (64, 0x9A6C9329AC4BC9B5, "crc64nvme")}
    if name not in spec:
        return None
    width, poly, fn_name = spec[name]
    fn = _crt(fn_name)
    if fn is None:
        return None
    crc = Crc(name, width, poly, lambda data, value: fn(data, value))
    _ALGORITHMS[name] = crc
    return crc


#: Checksum fields of a GetObject answer, strongest first.
_CHECKSUM_FIELDS = ("CRC64NVME", "CRC32C", "CRC32", "SHA256", "SHA1")


def expected_checksum(response: dict[str, Any]) -> tuple[str, str] | None:
    """The (algorithm, base64 value) of the full-object checksum in a GET answer, else ``None``
    (none stored, or a ``COMPOSITE`` one)."""
    if str(response.get("ChecksumType") or "").upper() == "COMPOSITE":
        return None
    for name in _CHECKSUM_FIELDS:
        value = response.get(f"Checksum{name}")
        if value and "-" not in value:  # "<value>-<parts>" is a composite checksum
            return name, value
    return None
