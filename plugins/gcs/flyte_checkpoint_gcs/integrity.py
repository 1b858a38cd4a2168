"""GCS's checksums on the wire: CRC32C (the default) or MD5 of the whole object.

A write sends the checksum of what it wrote, so the server refuses damaged bytes before the object
appears: in the metadata of a one-request upload (``crc32c`` / ``md5Hash``), and in the
``X-Goog-Hash`` header of a resumable upload's final request. The server's description of the
stored object is then compared with it too. A read verifies the object's stored CRC32C, or its
MD5 when it has no CRC32C (objects composed on the server have none).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flyte_checkpoint.storage.kit import checksums
from flyte_checkpoint.storage.kit.checksums import Digest

if TYPE_CHECKING:
    from .config import GCSConfig

#: ``checksum`` setting -> (the object resource's field, the X-Goog-Hash name, the Blob's property).
_SPELLING = {"CRC32C": ("crc32c", "crc32c", "crc32c"), "MD5": ("md5Hash", "md5", "md5_hash")}


def for_write(config: GCSConfig) -> Digest | None:
    """A running checksum of the object as it is written, for the ``checksum`` setting (the
    kit's CRC32C or MD5); ``None`` for NONE. The whole object's, since a resumable session
    takes its chunks in order."""
    return checksums.digest(config.checksum) if config.checksum in _SPELLING else None


def metadata(algorithm: str, value: str) -> dict[str, str]:
    """The object-resource field that makes a one-request upload check ``value``."""
    return {_SPELLING[algorithm][0]: value}


def hash_header(algorithm: str, value: str) -> dict[str, str]:
    """The header that makes a resumable upload's final request check the whole object."""
    return {"X-Goog-Hash": f"{_SPELLING[algorithm][1]}={value}"}


def stored(answer: Any, algorithm: str) -> str | None:
    """The base64 value of ``algorithm`` that GCS stored with the object ``answer`` describes
    (an upload's answer, the object resource; or a ``Blob``, its metadata), else ``None``."""
    field, _, prop = _SPELLING[algorithm]
    value = answer.get(field) if isinstance(answer, dict) else getattr(answer, prop, None)
    return None if value is None else str(value)


def for_read(config: GCSConfig, blob: Any, uri: str) -> tuple[Digest, str] | None:
    """(a running digest, the stored value) a read of ``blob`` (the object's metadata) verifies:
    its CRC32C, else its MD5; ``None`` with ``verify_checksums=false`` or when it has neither.
    (``uri`` for the same signature as S3's and Azure's: every GCS checksum is computed here.)"""
    if not config.verify_checksums:
        return None
    for algorithm in ("CRC32C", "MD5"):
        value = stored(blob, algorithm)
        if value:
            return checksums.digest(algorithm), value
    return None
