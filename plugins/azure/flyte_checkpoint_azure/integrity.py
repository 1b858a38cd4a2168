"""Azure's checksum on the wire: MD5, in a block's Content-MD5 and as the blob's stored Content-MD5.

The service checks each block's (and a single-request upload's) ``Content-MD5`` as it arrives;
the commit stores the whole object's MD5, which a read to the end compares (``verify_checksums``).
Azure's other checksum, CRC64, needs ``azure-storage-extensions`` and is not used. MD5 cannot be
combined from the parts' digests, so the whole-object MD5 is computed over the bytes in order.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from flyte_checkpoint.storage.kit.checksums import Digest, digest

from .config import AzureConfig

ALGORITHM = "MD5"


def _sends(config: AzureConfig) -> bool:
    """Whether writes send MD5s and store the object's."""
    return config.checksum == ALGORITHM


def for_write(config: AzureConfig) -> Digest | None:
    """A running MD5 of the object as it is written (``None`` for ``checksum=NONE``): the
    whole object's, computed over the bytes in order, since MD5s cannot be combined."""
    return digest(ALGORITHM) if _sends(config) else None


def block_headers(config: AzureConfig, data: bytes | bytearray | memoryview) -> dict[str, str] | None:
    """The ``Content-MD5`` header of one block (the SDK's own ``validate_content`` wants bytes)."""
    if not _sends(config):
        return None
    return {"Content-MD5": base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()}


def content_settings(value: Digest | None) -> Any:
    """The ``ContentSettings`` that store the object's MD5 at commit (``None``: store none)."""
    if value is None:
        return None
    from azure.storage.blob import ContentSettings

    return ContentSettings(content_md5=bytearray(base64.b64decode(value.value())))


def stored(answer: Any, algorithm: str) -> str | None:
    """The base64 value of ``algorithm`` that Azure stored with the blob ``answer`` (its
    properties) describes, else ``None``: only an MD5 (Content-MD5) is stored, and objects
    written by other tools may carry none."""
    md5 = answer.content_settings.content_md5 if answer is not None and algorithm == ALGORITHM else None
    return base64.b64encode(bytes(md5)).decode() if md5 else None


def for_read(config: AzureConfig, properties: Any, uri: str) -> tuple[Digest, str] | None:
    """(a running digest, the stored value) a read of the blob of ``properties`` verifies: its
    stored MD5 (:func:`stored`); ``None`` with ``verify_checksums=false`` or when there is none
    (``checksum`` is what writes send: an MD5 stored by anyone is checked). (``uri`` for the
    same signature as S3's and GCS's: an MD5 is always computed here.)"""
    expected = stored(properties, ALGORITHM) if config.verify_checksums else None
    return None if expected is None else (digest(ALGORITHM), expected)
