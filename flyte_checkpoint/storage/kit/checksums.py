"""Whole-object checksums: CRC32, CRC32C, CRC64NVME (computed and combined) and MD5 (computed).

A writer that sends parts concurrently checksums each part in the thread that sends it and
joins the parts' CRCs in order with :meth:`Crc.combine`, so the object gets a full-object
checksum that a plain download can verify; a reader feeds the bytes it delivers, in order, to
a :class:`Digest` and compares :meth:`Digest.value` with the stored text.

Where each comes from, fastest first:

- compute: CRC32 from ``isal`` (a core dependency on common machines) or ``zlib``; CRC32C from
  ``awscrt`` or ``google_crc32c`` (awscrt first: it reads any buffer in place, while
  google_crc32c takes only ``bytes``, so a ``bytearray`` or view is copied to it a MiB at a
  time); CRC64NVME from ``awscrt``; MD5 from ``hashlib``;
- combine: ``awscrt.checksums.combine_<name>`` when the installed awscrt has it (looked up by
  name, not by version), else ``isal``'s ``crc32_combine`` for CRC32, else multiplication in
  GF(2) written here (the algorithm zlib's ``crc32_combine`` uses, for any width): a few
  microseconds per part, nothing next to sending it.

All three CRCs are reflected, with an initial value and a final XOR of all ones, which is what
the combination relies on. Values are the integers the libraries return; :meth:`Crc.encode`
spells one as the clouds do (base64 of its big-endian bytes).
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from collections.abc import Callable
from typing import Any, Protocol

from ...errors import ConfigurationError

Buffer = bytes | bytearray | memoryview
Compute = Callable[[Buffer, int], int]
Combine = Callable[[int, int, int], int]

#: The CRCs this module knows: width in bits and reflected polynomial.
_PARAMETERS: dict[str, tuple[int, int]] = {
    "CRC32": (32, 0xEDB88320),
    "CRC32C": (32, 0x82F63B78),
    "CRC64NVME": (64, 0x9A6C9329AC4BC9B5),
}
#: What to install to compute each one, for :func:`require_crc`'s message.
_PACKAGES = {"CRC32C": "google-crc32c (or awscrt)", "CRC64NVME": "awscrt"}


class Crc:
    """One CRC algorithm: ``compute`` over bytes, ``combine`` two values, ``encode``/``decode`` text.

    Build one with :func:`crc` or :func:`require_crc`; instances are shared and thread-safe.
    """

    def __init__(self, name: str, width: int, poly: int, compute: Compute, combine: Combine | None) -> None:
        self.name = name
        self.width = width
        self._poly = poly
        self._compute = compute
        self._combine = combine
        self._mask = (1 << width) - 1
        self._x2n = self._powers() if combine is None else []

    def compute(self, data: Buffer, value: int = 0) -> int:
        """The CRC of ``data``, continuing from ``value`` (the CRC of the bytes before it)."""
        return self._compute(data, value) & self._mask

    def combine(self, first: int, second: int, second_len: int) -> int:
        """The CRC of A+B from the CRC of A (``first``), that of B (``second``) and B's length in bytes."""
        if second_len == 0:
            return first
        if self._combine is not None:
            return self._combine(first, second, second_len) & self._mask
        return gf2_combine(first, second, second_len, self.width, self._poly, self._x2n)

    def encode(self, value: int) -> str:
        """The base64 text of ``value`` (its big-endian bytes), as S3, GCS and Azure write it."""
        return base64.b64encode((value & self._mask).to_bytes(self.width // 8, "big")).decode("ascii")

    def decode(self, text: str) -> int:
        """The value of base64 ``text``.

        Raises:
            ValueError: not base64, or not ``width / 8`` bytes.
        """
        raw = base64.b64decode(text, validate=True)
        if len(raw) != self.width // 8:
            raise ValueError(f"a {self.name} value has {self.width // 8} bytes, not {len(raw)}")
        return int.from_bytes(raw, "big")

    def _powers(self) -> list[int]:
        """x ** (2 ** k) modulo the polynomial for k < 72 (lengths up to 2 ** 64 bytes)."""
        table, value = [], 1 << (self.width - 2)  # x ** 1, bit-reflected
        for _ in range(72):
            table.append(value)
            value = _gf2_multiply(value, value, self.width, self._poly)
        return table

    def __repr__(self) -> str:
        return f"Crc({self.name!r})"


def _gf2_multiply(a: int, b: int, width: int, poly: int) -> int:
    """a * b modulo the (reflected) polynomial, both bit-reflected."""
    product, m = 0, 1 << (width - 1)
    while m:
        if a & m:
            product ^= b
        b = (b >> 1) ^ poly if b & 1 else b >> 1
        m >>= 1
    return product


def gf2_combine(first: int, second: int, second_len: int, width: int, poly: int, powers: list[int]) -> int:
    """The pure-Python combination: ``first * x ** (8 * second_len) + second`` in GF(2).

    ``powers`` is ``x ** (2 ** k)`` for k = 0, 1, ... (see :meth:`Crc._powers`).
    """
    if second_len == 0:
        return first
    shift, k, n = 1 << (width - 1), 3, second_len  # x ** 0; 8 * n = n << 3
    while n:
        if n & 1:
            shift = _gf2_multiply(powers[k], shift, width, poly)
        n >>= 1
        k += 1
    return _gf2_multiply(shift, first, width, poly) ^ second


class Digest(Protocol):
    """A running checksum of bytes fed in order: ``update`` them, then ``value()`` is the base64 text."""

    name: str

    def update(self, data: Buffer) -> None: ...

    def value(self) -> str: ...


class CrcDigest:
    """A :class:`Digest` over a :class:`Crc`."""

    def __init__(self, crc: Crc) -> None:
        self.name = crc.name
        self.crc = crc
        self.current = 0

    def update(self, data: Buffer) -> None:
        self.current = self.crc.compute(data, self.current)

    def value(self) -> str:
        return self.crc.encode(self.current)


class Md5Digest:
    """A :class:`Digest` over ``hashlib.md5`` (Azure's Content-MD5, GCS's md5Hash)."""

    name = "MD5"

    def __init__(self) -> None:
        self._md5 = hashlib.md5(usedforsecurity=False)

    def update(self, data: Buffer) -> None:
        self._md5.update(data)

    def value(self) -> str:
        return base64.b64encode(self._md5.digest()).decode("ascii")


_cache: dict[str, Crc | None] = {}
_SLICE = 1024 * 1024


def crc(name: str) -> Crc | None:
    """The CRC called ``name`` (``CRC32``, ``CRC32C``, ``CRC64NVME``; any case), or ``None`` when
    it cannot be computed in this process (its library is not installed, or the name is not a CRC
    this module knows, such as ``SHA256``)."""
    key = name.upper()
    if key not in _cache:
        _cache[key] = _build(key)
    return _cache[key]


def crc32() -> Crc:
    """CRC-32 (zlib's polynomial, S3's ``CRC32``), which every process computes (zlib at the least)."""
    found = crc("CRC32")
    assert found is not None
    return found


def require_crc(name: str, *, hint: str) -> Crc:
    """The CRC called ``name``, for a setting that asks for it.

    Raises:
        ConfigurationError: the name is unknown, or the package that computes it is not installed;
            the message names the package to install and ends with ``hint`` (the other way out,
            such as ``or set FLYTE_CHECKPOINT_S3_CHECKSUM=CRC32``).
    """
    found = crc(name)
    if found is not None:
        return found
    return _missing(name, hint)


def digest(name: str) -> Digest:
    """A new running checksum for ``name``: one of the CRCs, or ``MD5`` (any case).

    Raises:
        ConfigurationError: the name is unknown or cannot be computed here (the message says what
            to install).
    """
    if name.upper() == "MD5":
        return Md5Digest()
    return CrcDigest(require_crc(name, hint=""))


def _missing(name: str, hint: str) -> Any:
    key = name.upper()
    tail = f"; {hint}" if hint else ""
    if key in _PACKAGES:
        raise ConfigurationError(f"the {key} checksum needs {_PACKAGES[key]}: pip install it{tail}")
    known = ", ".join([*_PARAMETERS, "MD5"])
    raise ConfigurationError(f"unknown checksum {name!r}: use one of {known}{tail}")


def _build(name: str) -> Crc | None:
    if name not in _PARAMETERS:
        return None
    compute = _compute(name)
    if compute is None:
        return None
    width, poly = _PARAMETERS[name]
    return Crc(name, width, poly, compute, _library_combine(name))


def _awscrt() -> Any:
    try:
        from awscrt import checksums
    except ImportError:
        return None
    return checksums


def _compute(name: str) -> Compute | None:
    if name == "CRC32":
        try:
            from isal import isal_zlib

            return isal_zlib.crc32
        except ImportError:
            return zlib.crc32
    crt = _awscrt()
    fn = getattr(crt, name.lower(), None) if crt is not None else None
    if fn is not None:  # it reads any buffer in place
        return lambda data, value: fn(data, value)
    if name == "CRC32C":
        try:
            import google_crc32c
        except ImportError:
            return None
        return lambda data, value: _extend_in_slices(google_crc32c.extend, data, value)
    return None


def _extend_in_slices(extend: Callable[[int, bytes], int], data: Buffer, value: int) -> int:
    """``google_crc32c.extend`` takes only ``bytes``: other buffers go through a bounded copy."""
    if isinstance(data, bytes):
        return extend(value, data)
    with memoryview(data) as whole:
        view = whole.cast("B")
        for start in range(0, len(view), _SLICE):
            value = extend(value, view[start : start + _SLICE].tobytes())
    return value


def _library_combine(name: str) -> Combine | None:
    crt = _awscrt()
    fn = getattr(crt, f"combine_{name.lower()}", None) if crt is not None else None
    if fn is not None:  # aws-crt-python has them since its PR #707 (December 2025)
        return fn
    if name == "CRC32":
        try:
            from isal import isal_zlib
        except ImportError:
            return None
        return getattr(isal_zlib, "crc32_combine", None)
    return None


__all__ = [
    "Buffer",
    "Crc",
    "CrcDigest",
    "Digest",
    "Md5Digest",
    "crc",
    "crc32",
    "digest",
    "gf2_combine",
    "require_crc",
]
