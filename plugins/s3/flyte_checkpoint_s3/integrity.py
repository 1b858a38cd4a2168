"""S3's checksums on the wire: CRC32 (the default), CRC32C or CRC64NVME, computed by the kit.

A one-request ``PUT`` sends the object's CRC. A multipart upload sends each part's CRC with the
part (S3 refuses a damaged part); by default the kit's :meth:`~flyte_checkpoint.storage.kit.Crc.combine`
joins the parts' CRCs in order into the whole object's, which the completion sends, so S3
stores a ``FULL_OBJECT`` checksum that a plain download can verify (``checksum_type=COMPOSITE``
stores S3's checksum of the parts' checksums instead). A read verifies the stored full-object
value of :func:`stored` (never a ``COMPOSITE`` one: it cannot be computed from the bytes).
"""

from __future__ import annotations

import logging
from typing import Any

from flyte_checkpoint.storage.kit.checksums import Crc, CrcDigest, Digest, crc, require_crc
from flyte_checkpoint.uri import redact

from .config import S3Config

log = logging.getLogger("flyte_checkpoint.s3")

#: The way out named when the ``checksum`` setting's CRC cannot be computed here.
HINT = "pip install 'flyte-checkpoint-s3[crt]', or set checksum=CRC32 (FLYTE_CHECKPOINT_S3_CHECKSUM)"
#: Checksum fields of a GetObject answer, strongest first.
_FIELDS = ("CRC64NVME", "CRC32C", "CRC32", "SHA256", "SHA1")


def for_write(config: S3Config) -> Crc | None:
    """The checksum every write sends (``None`` for ``checksum=NONE``): a CRC, not a running
    digest as on GCS and Azure, because S3 takes each part's CRC and the kit combines them
    into the whole object's (parts are sent in parallel, out of order).

    Raises:
        ConfigurationError: the CRC cannot be computed here (the message says what to install).
    """
    return None if config.checksum == "NONE" else require_crc(config.checksum, hint=HINT)


def request_args(algorithm: Crc, value: int) -> dict[str, str]:
    """The arguments that make a ``PutObject``/``UploadPart`` send ``value`` for S3 to check."""
    return {"ChecksumAlgorithm": algorithm.name, field(algorithm): algorithm.encode(value)}


def field(algorithm: Crc) -> str:
    """The boto3 parameter and answer field of ``algorithm``, e.g. ``ChecksumCRC32``."""
    return f"Checksum{algorithm.name}"


def stored(answer: dict[str, Any], algorithm: str) -> str | None:
    """The base64 value of ``algorithm`` that S3 stored with the object ``answer`` (a GET's)
    describes, if it is a full-object checksum; else ``None`` (none stored, or a ``COMPOSITE``
    one, which cannot be computed from the bytes)."""
    if str(answer.get("ChecksumType") or "").upper() == "COMPOSITE":
        return None
    value = answer.get(f"Checksum{algorithm}")
    if value and "-" not in value:  # "<value>-<parts>" is a composite checksum
        return str(value)
    return None


def for_read(config: S3Config, response: dict[str, Any], uri: str) -> tuple[Digest, str] | None:
    """(a running digest, the stored value) a read of the object of ``response`` verifies;
    ``None`` with ``verify_checksums=false``, without a full-object checksum, or when its
    algorithm cannot be computed here (SHA-1/SHA-256, a CRC whose library is missing)."""
    if not config.verify_checksums:
        return None
    found = next(((name, value) for name in _FIELDS if (value := stored(response, name))), None)
    if found is None:
        return None
    algorithm = crc(found[0])
    if algorithm is None:
        log.debug("%s: its %s checksum cannot be computed here; not verified", redact(uri), found[0])
        return None
    return CrcDigest(algorithm), found[1]


__all__ = ["HINT", "field", "for_read", "for_write", "request_args", "stored"]
