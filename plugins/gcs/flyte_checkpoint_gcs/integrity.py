"""GCS's checksums on the wire: CRC32C (the default) or MD5 of the whole object.

A write sends the checksum of what it wrote, so the server refuses damaged bytes before the object
appears: in the metadata of a one-request upload (``crc32c`` / ``md5Hash``), and in the
``X-Goog-Hash`` header of a resumable upload's final request. The server's description of the
stored object is then compared with it too. A read verifies the object's stored CRC32C, or its
MD5 when it has no CRC32C (objects composed on the server have none).
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import google_crc32c

#: ``checksum`` setting -> (the object resource's field, the X-Goog-Hash name).
_SPELLING = {"CRC32C": ("crc32c", "crc32c"), "MD5": ("md5Hash", "md5")}
#: Bytes checksummed per call (google_crc32c takes only ``bytes``, so a view is copied in pieces).
_PIECE = 1024 * 1024


class Digest:
    """A running CRC32C or MD5, its value in base64 as GCS spells it."""

    def __init__(self, algorithm: str) -> None:
        self.algorithm = algorithm
        self._crc = google_crc32c.Checksum() if algorithm == "CRC32C" else None
        self._md5 = hashlib.md5(usedforsecurity=False) if algorithm == "MD5" else None

    def update(self, data: bytes | bytearray | memoryview) -> None:
        if self._md5 is not None:
            self._md5.update(data)
        elif self._crc is not None:
            if isinstance(data, bytes):
                self._crc.update(data)
                return
            with memoryview(data) as view:
                for i in range(0, len(view), _PIECE):
                    self._crc.update(bytes(view[i : i + _PIECE]))

    def value(self) -> str:
        raw = self._crc.digest() if self._crc is not None else self._md5.digest()  # type: ignore[union-attr]
        return base64.b64encode(raw).decode("ascii")


def digest(algorithm: str) -> Digest | None:
    """A digest for the ``checksum`` setting's value; ``None`` for NONE."""
    return Digest(algorithm) if algorithm in _SPELLING else None


def metadata(algorithm: str, value: str) -> dict[str, str]:
    """The object-resource field that makes a one-request upload check ``value``."""
    return {_SPELLING[algorithm][0]: value}


def hash_header(algorithm: str, value: str) -> dict[str, str]:
    """The header that makes a resumable upload's final request check the whole object."""
    return {"X-Goog-Hash": f"{_SPELLING[algorithm][1]}={value}"}


def stored(resource: dict[str, Any], algorithm: str) -> str | None:
    """The value of ``algorithm`` in the server's description of a stored object (upload answer)."""
    return resource.get(_SPELLING[algorithm][0])


def for_read(blob: Any) -> tuple[str, str] | None:
    """``(algorithm, stored value)`` a read verifies: the CRC32C, else the MD5, else ``None``."""
    if blob.crc32c:
        return "CRC32C", blob.crc32c
    if blob.md5_hash:
        return "MD5", blob.md5_hash
    return None
