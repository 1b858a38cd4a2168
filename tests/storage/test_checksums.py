"""The kit's checksums: CRCs computed and combined by the best library here, MD5, and their errors."""

from __future__ import annotations

import base64
import hashlib
import sys
import types
import zlib

import google_crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from isal import isal_zlib

from flyte_checkpoint.errors import ConfigurationError
from flyte_checkpoint.storage.kit import checksums
from flyte_checkpoint.storage.kit.checksums import Crc, crc, digest, gf2_combine, require_crc

#: name -> (width, reflected polynomial, the standard check value of b"123456789")
REFERENCE = {
    "CRC32": (32, 0xEDB88320, 0xCBF43926),
    "CRC32C": (32, 0x82F63B78, 0xE3069283),
    "CRC64NVME": (64, 0x9A6C9329AC4BC9B5, 0xAE8B14860A799888),
}


def bitwise(name: str, data: bytes, value: int = 0) -> int:
    """A slow, obviously-correct CRC (reflected, initial value and final XOR all ones)."""
    width, poly, _ = REFERENCE[name]
    mask = (1 << width) - 1
    reg = value ^ mask
    for byte in data:
        reg ^= byte
        for _ in range(8):
            reg = (reg >> 1) ^ poly if reg & 1 else reg >> 1
    return reg ^ mask


def pure(name: str) -> Crc:
    """The CRC with no library combine: the GF(2) code written in the kit."""
    width, poly, _ = REFERENCE[name]
    return Crc(name, width, poly, lambda data, value: bitwise(name, bytes(data), value), None)


@pytest.fixture
def fresh(monkeypatch):
    """An empty cache, so the libraries are looked up again (and may be faked)."""
    monkeypatch.setattr(checksums, "_cache", {})


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_the_reference_crc_gives_the_published_check_values(name):
    assert bitwise(name, b"123456789") == REFERENCE[name][2]


blobs = st.binary(max_size=300)
CRC32_POWERS = pure("CRC32")._x2n


@settings(max_examples=200, deadline=None)
@given(a=st.integers(0, 2**32 - 1), b=st.integers(0, 2**32 - 1), n=st.integers(1, 2**45))
def test_gf2_combine_equals_isal_crc32_combine(a, b, n):
    assert gf2_combine(a, b, n, 32, 0xEDB88320, CRC32_POWERS) == isal_zlib.crc32_combine(a, b, n)


@settings(max_examples=100, deadline=None)
@given(a=blobs, b=blobs)
def test_combine_of_crc32c_equals_the_crc32c_of_the_concatenation(a, b):
    combined = pure("CRC32C").combine(google_crc32c.value(a), google_crc32c.value(b), len(b))
    assert combined == google_crc32c.value(a + b)


@settings(max_examples=60, deadline=None)
@given(a=blobs, b=blobs)
def test_combine_of_crc64nvme_equals_the_crc64nvme_of_the_concatenation(a, b):
    c = pure("CRC64NVME")
    assert c.combine(c.compute(a), c.compute(b), len(b)) == bitwise("CRC64NVME", a + b)


@settings(max_examples=100, deadline=None)
@given(parts=st.lists(blobs, max_size=6))
def test_the_crcs_here_compute_and_combine_parts_into_the_whole(parts):
    """What a writer does with its parts, against zlib and google_crc32c on the whole object."""
    whole = b"".join(parts)
    for name, expected in (("CRC32", zlib.crc32(whole)), ("CRC32C", google_crc32c.value(whole))):
        c = crc(name)
        assert c is not None
        value = 0
        for part in parts:
            value = c.combine(value, c.compute(bytearray(part)), len(part))
        assert value == expected == c.compute(memoryview(whole))


def test_crc32_is_combined_by_isal_when_no_awscrt_has_a_combine(fresh, monkeypatch):
    monkeypatch.setattr(checksums, "_awscrt", lambda: None)
    c = crc("crc32")
    assert c is not None and c._combine is isal_zlib.crc32_combine
    assert c.compute(b"123456789") == 0xCBF43926


def fake_awscrt(monkeypatch, *, with_combine: bool) -> list[str]:
    """An ``awscrt`` package whose checksums module records its calls (older ones lack combine)."""
    calls: list[str] = []
    module = types.ModuleType("awscrt.checksums")

    def crc32c(data, previous=0):
        calls.append("crc32c")
        return google_crc32c.extend(previous, bytes(data))

    def crc64nvme(data, previous=0):
        calls.append("crc64nvme")
        return bitwise("CRC64NVME", bytes(data), previous)

    module.crc32c = crc32c  # type: ignore[attr-defined]
    module.crc64nvme = crc64nvme  # type: ignore[attr-defined]
    if with_combine:

        def combine_crc32c(a, b, n):
            calls.append("combine_crc32c")
            return pure("CRC32C").combine(a, b, n)

        module.combine_crc32c = combine_crc32c  # type: ignore[attr-defined]
    package = types.ModuleType("awscrt")
    package.checksums = module  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "awscrt", package)
    monkeypatch.setitem(sys.modules, "awscrt.checksums", module)
    return calls


def test_an_awscrt_with_combine_functions_is_used_for_compute_and_combine(fresh, monkeypatch):
    calls = fake_awscrt(monkeypatch, with_combine=True)
    c = crc("CRC32C")
    assert c is not None
    assert c.combine(c.compute(b"1234"), c.compute(bytearray(b"56789")), 5) == 0xE3069283
    assert calls == ["crc32c", "crc32c", "combine_crc32c"]


def test_an_awscrt_without_combine_falls_back_to_the_gf2_code(fresh, monkeypatch):
    calls = fake_awscrt(monkeypatch, with_combine=False)
    c = crc("CRC64NVME")
    assert c is not None and c._combine is None
    assert c.combine(c.compute(b"1234"), c.compute(b"56789"), 5) == 0xAE8B14860A799888
    assert calls == ["crc64nvme", "crc64nvme"]


def test_crc32c_from_google_crc32c_reads_any_buffer_of_any_size(fresh, monkeypatch):
    monkeypatch.setattr(checksums, "_awscrt", lambda: None)
    data = bytes(range(256)) * 9000  # over two of the MiB slices google_crc32c is fed
    c = crc("CRC32C")
    assert c is not None
    for buffer in (data, bytearray(data), memoryview(bytearray(data))[7:]):
        assert c.compute(buffer) == google_crc32c.value(bytes(buffer))
    assert c.compute(data[1000:], c.compute(data[:1000])) == google_crc32c.value(data)


def test_encode_and_decode_are_base64_of_the_big_endian_bytes():
    c = crc("CRC32")
    assert c is not None
    assert c.encode(0xCBF43926) == base64.b64encode(bytes.fromhex("cbf43926")).decode()
    assert c.decode(c.encode(0xCBF43926)) == 0xCBF43926
    with pytest.raises(ValueError, match="has 4 bytes, not 8"):
        c.decode(base64.b64encode(b"12345678").decode())


def test_crc_is_none_for_what_cannot_be_computed_here(fresh, monkeypatch):
    monkeypatch.setattr(checksums, "_awscrt", lambda: None)
    assert crc("CRC64NVME") is None
    assert crc("SHA256") is None


def test_require_crc_names_the_package_to_install_and_the_hint(fresh, monkeypatch):
    monkeypatch.setattr(checksums, "_awscrt", lambda: None)
    hint = "or set FLYTE_CHECKPOINT_S3_CHECKSUM=CRC32"
    with pytest.raises(ConfigurationError, match=r"CRC64NVME checksum needs awscrt: pip install it; or set"):
        require_crc("crc64nvme", hint=hint)
    with pytest.raises(ConfigurationError, match=r"unknown checksum 'XXH3': use one of CRC32, CRC32C"):
        require_crc("XXH3", hint=hint)
    assert require_crc("CRC32", hint=hint).name == "CRC32"


def test_digests_match_the_libraries_and_unknown_names_are_refused():
    data = b"flyte" * 1000
    md5 = digest("md5")
    crc32c = digest("CRC32C")
    for d in (md5, crc32c):
        d.update(data[:10])
        d.update(memoryview(bytearray(data[10:])))
    assert md5.name == "MD5"
    assert md5.value() == base64.b64encode(hashlib.md5(data).digest()).decode()
    assert crc32c.value() == base64.b64encode(google_crc32c.Checksum(data).digest()).decode()
    with pytest.raises(ConfigurationError, match="unknown checksum 'SHA1'"):
        digest("SHA1")
