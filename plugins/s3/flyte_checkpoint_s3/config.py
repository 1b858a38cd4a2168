"""The S3 store's settings: the shared ones of every cloud, and S3's own (no boto3 imported here).

Every setting is read, highest first, from arguments (``configure_store`` or ``S3Store(...)``),
``FLYTE_CHECKPOINT_S3_<NAME>``, then the AWS and Flyte variables listed in its row of the
README's table, then S3's rules below, then its default. S3's rules, where a list of variables
cannot say it:

- ``AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true`` skips ``AWS_ENDPOINT_URL_S3`` and
  ``AWS_ENDPOINT_URL``, as botocore does;
- a ``profile`` given as an argument wins over keys found in ``FLYTE_AWS_*`` variables (keys
  given as arguments win over a profile);
- the region is ``AWS_REGION`` before ``AWS_DEFAULT_REGION`` (Flyte, the AWS CLI v2 and the
  other AWS SDKs read ``AWS_REGION``; boto3 reads only ``AWS_DEFAULT_REGION``), then the
  profile's, then ``us-east-1``; the client gets it as ``region_name``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from flyte_checkpoint.errors import ConfigurationError
from flyte_checkpoint.storage.kit import CHOICE, SIZE, TEXT, URL, CloudConfig, GiB, MiB, PartLimits, setting
from flyte_checkpoint.uri import redact

if TYPE_CHECKING:
    from typing_extensions import Self

#: S3's rules for the parts of one upload (the kit's PartWriter, copies and sharded saves keep
#: them; the same four names in every plugin's config): every part but the last at least
#: MIN_PART_SIZE (AWS's 5 MiB; test servers may take less), at most MAX_PART_SIZE, at most
#: MAX_PARTS of them; sizes any multiple of PART_MULTIPLE.
MIN_PART_SIZE = 5 * MiB
MAX_PART_SIZE = 5 * GiB
MAX_PARTS = 10_000
PART_MULTIPLE = 1
#: The parts of a sharded save's one upload (``flyte_checkpoint.storage.kit.plans``): the ranks
#: share part numbers 1 to 9,999 (10,000 is the tail's); every rank's last part, followed by the
#: next rank's, must reach MIN_PART_SIZE too. AWS's largest object is 48.8 TiB (10,000 x 5 GiB).
SHARD_LIMITS = PartLimits(
    store="S3",
    min_part=MIN_PART_SIZE,
    max_part=MAX_PART_SIZE,
    max_parts=MAX_PARTS,
    max_object=MAX_PARTS * MAX_PART_SIZE,
    multiple=PART_MULTIPLE,
    described="10,000 parts of 5 MiB to 5 GiB",
)

#: botocore's switch that turns the ``AWS_ENDPOINT_URL*`` variables off.
IGNORE_ENDPOINTS = "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"
_ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
_KEYS = ("access_key_id", "secret_access_key", "session_token")


@dataclass(frozen=True, repr=False)
class S3Config(CloudConfig):
    """Resolved settings of one :class:`~flyte_checkpoint_s3.store.S3Store` (see the module docstring)."""

    BACKEND: ClassVar[str] = "s3"

    endpoint_url: str | None = setting(
        URL,
        None,
        doc="The S3 endpoint, for MinIO, Ceph or an emulator; default: AWS's for the region"
        " (or the profile's `endpoint_url`). `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true` skips"
        " the two `AWS_ENDPOINT_URL*` variables.",
        env=("FLYTE_AWS_ENDPOINT", *_ENDPOINT_VARIABLES),
    )
    part_size: int = setting(
        SIZE,
        8 * MiB,
        doc="Bytes of each part of a multipart upload (the first 1,000; then it doubles every 1,000)."
        " AWS needs at least 5MiB except for the last part.",
        minimum=1,
        maximum=MAX_PART_SIZE,
        why="S3 parts are at most 5GiB.",
    )
    checksum: str = setting(
        CHOICE,
        "CRC32",
        doc="The full-object checksum sent with each write and stored with the object; NONE sends none."
        " CRC32C needs awscrt or google-crc32c, CRC64NVME awscrt (`pip install 'flyte-checkpoint-s3[crt]'`).",
        choices=("CRC32", "CRC32C", "CRC64NVME", "NONE"),
    )
    access_key_id: str | None = setting(
        TEXT,
        None,
        doc="AWS access key id; with `secret_access_key`.",
        env=("FLYTE_AWS_ACCESS_KEY_ID",),
        secret=True,
    )
    addressing_style: str | None = setting(
        CHOICE,
        None,
        doc="`path` for S3-compatible servers that need it, `virtual`, or `auto`; default: the profile's,"
        " else botocore's `auto`.",
        env=("FLYTE_AWS_S3_ADDRESSING_STYLE",),
        choices=("auto", "path", "virtual"),
    )
    checksum_type: str = setting(
        CHOICE,
        "FULL_OBJECT",
        doc="How a multipart upload's checksum is stored: FULL_OBJECT (the whole object's, which reads"
        " verify) or COMPOSITE (a checksum of the parts' checksums, as boto3's `upload_file` stores;"
        " reads cannot verify it). CRC64NVME is FULL_OBJECT only.",
        choices=("FULL_OBJECT", "COMPOSITE"),
    )
    profile: str | None = setting(
        TEXT, None, doc="A profile of the AWS config files (botocore reads `AWS_PROFILE` itself)."
    )
    region: str | None = setting(
        TEXT,
        None,
        doc="The AWS region; default: the profile's, else us-east-1.",
        env=("AWS_REGION", "AWS_DEFAULT_REGION"),
    )
    secret_access_key: str | None = setting(
        TEXT,
        None,
        doc="AWS secret access key; with `access_key_id`.",
        env=("FLYTE_AWS_SECRET_ACCESS_KEY",),
        secret=True,
    )
    session_token: str | None = setting(TEXT, None, doc="AWS session token of temporary keys.", secret=True)

    @classmethod
    def resolve(
        cls, *, env: Mapping[str, str] | None = None, origin: str = "argument", **settings: Any
    ) -> Self:
        """The configuration (see :meth:`StoreConfig.resolve`), with S3's rules of the module docstring.

        Raises:
            ConfigurationError: a bad value (naming where it came from), half of a key pair, or
                CRC64NVME with COMPOSITE.
        """
        environ = os.environ if env is None else env
        if environ.get(IGNORE_ENDPOINTS, "").strip().lower() in ("1", "true", "yes", "on"):
            environ = {k: v for k, v in environ.items() if k not in _ENDPOINT_VARIABLES}
        return super().resolve(env=environ, origin=origin, **settings)

    @classmethod
    def _cloud_rules(cls, values: dict[str, Any], env: Mapping[str, str], sources: dict[str, str]) -> None:
        profile_given = "profile" in values and not _is_variable(sources.get("profile", ""))
        keys_from_variables = any(_is_variable(sources.get(k, "")) for k in _KEYS if k in values)
        if profile_given and keys_from_variables:
            for name in _KEYS:
                if name in values and _is_variable(sources[name]):
                    del values[name], sources[name]

    def _check(self) -> None:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            given, missing = (
                ("access_key_id", "secret_access_key")
                if self.access_key_id is not None
                else ("secret_access_key", "access_key_id")
            )
            raise ConfigurationError(
                f"{given} is set ({self.sources[given]}) but {missing} is not: give both"
                f" ({self.variable(missing)} or the {missing}= argument), or neither"
            )
        if self.checksum == "CRC64NVME" and self.checksum_type == "COMPOSITE":
            raise ConfigurationError(
                "checksum=CRC64NVME is stored as FULL_OBJECT only: set checksum_type=FULL_OBJECT"
                f" ({self.variable('checksum_type')}) or choose another checksum"
            )

    def describe_endpoint(self) -> str:
        """The endpoint for messages, with where it was set: ``http://h:9000 (FLYTE_AWS_ENDPOINT)``."""
        if not self.endpoint_url:
            return "the AWS S3 endpoint of the region"
        return f"{redact(self.endpoint_url)} (from {self.sources.get('endpoint_url', 'argument')})"


def _is_variable(source: str) -> bool:
    return bool(source) and source.isupper()


__all__ = ["S3Config"]
