"""The S3 store's settings: constructor arguments, then environment variables, then defaults.

Nothing here imports boto3. Precedence, highest first (the README has the full table):

- endpoint: ``endpoint_url=`` > ``FLYTE_AWS_ENDPOINT`` > ``AWS_ENDPOINT_URL_S3`` >
  ``AWS_ENDPOINT_URL`` > the profile's ``endpoint_url`` (read by botocore) > AWS;
- credentials: ``access_key_id=``/``secret_access_key=`` > ``profile=`` >
  ``FLYTE_AWS_ACCESS_KEY_ID``/``FLYTE_AWS_SECRET_ACCESS_KEY`` > boto3's default chain
  (``AWS_ACCESS_KEY_ID``..., ``AWS_PROFILE``, config files, container/instance roles);
- addressing style: ``addressing_style=`` > ``FLYTE_AWS_S3_ADDRESSING_STYLE`` > the profile's
  ``s3.addressing_style`` > botocore's ``auto``;
- tuning knobs: constructor argument > ``FLYTE_CHECKPOINT_S3_<NAME>`` > default.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from flyte_checkpoint.uri import redact

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

#: Prefix of the environment variables of the tuning knobs.
ENV_PREFIX = "FLYTE_CHECKPOINT_S3_"

CHECKSUM_CHOICES = ("CRC32", "CRC32C", "CRC64NVME", "NONE")
CHECKSUM_TYPES = ("FULL_OBJECT", "COMPOSITE")
ADDRESSING_STYLES = ("auto", "path", "virtual")

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmg]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": KiB, "m": MiB, "g": GiB}
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def parse_size(text: str | int, what: str) -> int:
    """Bytes from ``8388608``, ``8MiB``, ``8M`` or ``512KiB`` (binary units).

    Raises:
        ValueError: the text is not a size; the message names ``what``.
    """
    if isinstance(text, int):
        return text
    m = _SIZE_RE.match(text)
    if not m:
        raise ValueError(f"{what}={text!r} is not a size: give bytes or a number with KiB, MiB or GiB")
    unit = (m.group(2) or "").lower()[:1]
    return int(m.group(1)) * _UNITS[unit]


@dataclass(frozen=True)
class S3Config:
    """Resolved settings of one :class:`~flyte_checkpoint_s3.store.S3Store`.

    Secrets are kept out of ``repr``; :attr:`sources` says where the endpoint and the
    credentials came from (names of variables or arguments, never values).
    """

    endpoint_url: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    profile: str | None = None
    region: str | None = None
    addressing_style: str | None = None
    #: Size of each multipart part (the first 1000; then it doubles every 1000 parts).
    part_size: int = 8 * MiB
    #: Parts of one upload in flight at once (memory <= part_size x (this + 1)).
    upload_concurrency: int = 8
    #: Size of each ranged GET of a large object; objects up to this size are one GET.
    range_size: int = 8 * MiB
    #: Ranges of one read fetched ahead at once (memory <= range_size x (this + 1)).
    read_concurrency: int = 8
    #: Flexible checksum asked of S3 on upload: CRC32, CRC32C, CRC64NVME (those two need
    #: awscrt) or NONE.
    checksum: str = "CRC32"
    #: How a multipart upload's checksum is stored: FULL_OBJECT (the whole object's CRC,
    #: which reads verify) or COMPOSITE (a checksum of the parts' checksums, as boto3's
    #: ``upload_file`` stores; S3 checks each part, reads cannot verify the whole).
    checksum_type: str = "FULL_OBJECT"
    #: Verify full-object checksums on download where the algorithm is computable here.
    verify_checksums: bool = True
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    #: botocore's own tries per request ("standard" mode); the core retries whole operations.
    max_attempts: int = 3
    max_pool_connections: int | None = None
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.part_size < 1 or self.range_size < 1:
            raise ValueError("part_size and range_size must be positive byte counts")
        if self.upload_concurrency < 1 or self.read_concurrency < 1:
            raise ValueError("upload_concurrency and read_concurrency must be at least 1")
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1 (1 means botocore does not retry)")
        if self.connect_timeout <= 0 or self.read_timeout <= 0:
            raise ValueError("connect_timeout and read_timeout must be positive seconds")
        checksum = self.checksum.upper()
        if checksum not in CHECKSUM_CHOICES:
            raise ValueError(f"checksum={self.checksum!r}: choose one of {', '.join(CHECKSUM_CHOICES)}")
        object.__setattr__(self, "checksum", checksum)
        checksum_type = self.checksum_type.upper()
        if checksum_type not in CHECKSUM_TYPES:
            raise ValueError(
                f"checksum_type={self.checksum_type!r}: choose one of {', '.join(CHECKSUM_TYPES)}"
            )
        if checksum == "CRC64NVME" and checksum_type == "COMPOSITE":
            raise ValueError(
                "checksum=CRC64NVME is stored as FULL_OBJECT only: set checksum_type=FULL_OBJECT"
            )
        object.__setattr__(self, "checksum_type", checksum_type)
        if self.addressing_style is not None:
            style = self.addressing_style.lower()
            if style not in ADDRESSING_STYLES:
                raise ValueError(
                    f"addressing_style={self.addressing_style!r}:"
                    f" choose one of {', '.join(ADDRESSING_STYLES)}"
                )
            object.__setattr__(self, "addressing_style", style)
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("give both access_key_id and secret_access_key, or neither")

    def __repr__(self) -> str:
        shown = []
        for f in fields(self):
            if f.repr and f.name != "sources":
                value = getattr(self, f.name)
                if f.name == "endpoint_url" and value:
                    value = redact(value)
                shown.append(f"{f.name}={value!r}")
        return f"S3Config({', '.join(shown)})"

    @property
    def pool_connections(self) -> int:
        """HTTP connections kept per client: enough for one upload and one read at full width."""
        if self.max_pool_connections is not None:
            return self.max_pool_connections
        return 2 * (self.upload_concurrency + self.read_concurrency)

    @property
    def secrets(self) -> tuple[str, ...]:
        """Values that must never appear in a message (used to scrub SDK error text)."""
        return tuple(s for s in (self.access_key_id, self.secret_access_key, self.session_token) if s)

    def describe_endpoint(self) -> str:
        """The endpoint for messages, with where it was set, e.g. ``http://h:9000 (FLYTE_AWS_ENDPOINT)``."""
        if not self.endpoint_url:
            return "the AWS S3 endpoint of the region"
        return f"{redact(self.endpoint_url)} (from {self.sources.get('endpoint', 'endpoint_url')})"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> S3Config:
        """Resolve the settings from keyword arguments, ``env`` (default ``os.environ``) and defaults.

        Raises:
            ValueError: an argument or variable has an invalid value (the message names it),
                or an unknown keyword argument is given.
        """
        env = os.environ if env is None else env
        known = {f.name for f in fields(cls)} - {"sources"}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown S3 store setting(s): {', '.join(sorted(unknown))}")
        given = {k: v for k, v in overrides.items() if v is not None}
        sources: dict[str, str] = {}
        values: dict[str, Any] = {}

        values["endpoint_url"], sources["endpoint"] = _endpoint(given, env)
        values.update(_credentials(given, env, sources))
        for name in ("profile", "region", "session_token"):
            if name in given:
                values[name] = given[name]
        values["addressing_style"] = (
            given.get("addressing_style") or env.get("FLYTE_AWS_S3_ADDRESSING_STYLE") or None
        )

        defaults = cls()
        for f in fields(cls):
            if f.name in values or f.name == "sources" or f.name in _CONNECTION_FIELDS:
                continue
            if f.name in given:
                values[f.name] = given[f.name]
                continue
            var = ENV_PREFIX + f.name.upper()
            raw = env.get(var, "").strip()
            if raw:
                values[f.name] = _parse_knob(f.name, raw, var, getattr(defaults, f.name))
        return replace(defaults, **values, sources={k: v for k, v in sources.items() if v})


_CONNECTION_FIELDS = {
    "endpoint_url",
    "access_key_id",
    "secret_access_key",
    "session_token",
    "profile",
    "region",
    "addressing_style",
}


def _endpoint(given: Mapping[str, Any], env: Mapping[str, str]) -> tuple[str | None, str]:
    if given.get("endpoint_url"):
        return given["endpoint_url"], "endpoint_url argument"
    names = ["FLYTE_AWS_ENDPOINT"]
    if env.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").strip().lower() not in _TRUE:
        names += ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"]
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return value, name
    return None, ""


def _credentials(given: Mapping[str, Any], env: Mapping[str, str], sources: dict[str, str]) -> dict[str, Any]:
    if given.get("access_key_id") or given.get("secret_access_key"):
        sources["credentials"] = "access_key_id/secret_access_key arguments"
        return {
            "access_key_id": given.get("access_key_id"),
            "secret_access_key": given.get("secret_access_key"),
        }
    if given.get("profile"):
        sources["credentials"] = "profile argument"
        return {}
    key = env.get("FLYTE_AWS_ACCESS_KEY_ID", "").strip()
    secret = env.get("FLYTE_AWS_SECRET_ACCESS_KEY", "").strip()
    if key or secret:
        if not (key and secret):
            missing = "FLYTE_AWS_SECRET_ACCESS_KEY" if key else "FLYTE_AWS_ACCESS_KEY_ID"
            raise ValueError(
                f"{missing} is not set but its partner is: set both FLYTE_AWS_* keys, or neither"
            )
        sources["credentials"] = "FLYTE_AWS_ACCESS_KEY_ID/FLYTE_AWS_SECRET_ACCESS_KEY"
        return {"access_key_id": key, "secret_access_key": secret}
    sources["credentials"] = "boto3 default chain"
    return {}


def _parse_knob(name: str, raw: str, var: str, default: Any) -> Any:
    if isinstance(default, bool):
        low = raw.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError(f"{var}={raw!r} is not a boolean: use 1/0, true/false, yes/no")
    if name.endswith("_size"):
        return parse_size(raw, var)
    try:
        if isinstance(default, float):
            return float(raw)
        if isinstance(default, int) or default is None:
            return int(raw)
    except ValueError:
        raise ValueError(f"{var}={raw!r} is not a number") from None
    return raw
