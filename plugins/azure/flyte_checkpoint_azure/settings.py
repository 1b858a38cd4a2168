"""Tuning knobs of the Azure store: sizes, concurrency, timeouts, retries, checksums."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from flyte_checkpoint.errors import StoreError

MiB = 1024 * 1024
#: Azure's largest block (service versions since 2019-12-12).
MAX_BLOCK_SIZE = 4000 * MiB
ENV_PREFIX = "FLYTE_CHECKPOINT_AZURE_"

_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": MiB, "mb": MiB, "mib": MiB,
          "g": 1024 * MiB, "gb": 1024 * MiB, "gib": 1024 * MiB}  # fmt: skip
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([a-zA-Z]*)\s*$")


@dataclass(frozen=True)
class AzureSettings:
    """How the store moves bytes. Each field can be set by a constructor argument of the
    same name or by the environment variable ``FLYTE_CHECKPOINT_AZURE_<FIELD>`` (upper case).

    Attributes:
        block_size: bytes per staged block; an object smaller than this goes in one request.
            Memory per writer is at most ``block_size * (upload_concurrency + 1)``.
        upload_concurrency: blocks of one writer uploading at once (and its threads).
        read_chunk_size: bytes per ranged GET when reading.
        read_concurrency: ranged GETs of one reader in flight (its prefetch window).
        connect_timeout: seconds to open a connection.
        read_timeout: seconds without a byte from the service before a request fails.
        retries: SDK-level retries of one request (whole operations are retried by the core).
        checksum: send an MD5 with every block and store the object's MD5 with it, and
            check it on full reads; ``False`` saves the hashing time.
    """

    block_size: int = 8 * MiB
    upload_concurrency: int = 8
    read_chunk_size: int = 8 * MiB
    read_concurrency: int = 8
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    retries: int = 3
    checksum: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.block_size <= MAX_BLOCK_SIZE:
            raise StoreError(f"block_size must be 1 byte to 4000 MiB, not {self.block_size}")
        if self.read_chunk_size < 1:
            raise StoreError(f"read_chunk_size must be at least 1 byte, not {self.read_chunk_size}")
        for name in ("upload_concurrency", "read_concurrency"):
            if getattr(self, name) < 1:
                raise StoreError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.retries < 0:
            raise StoreError(f"retries must be 0 or more, not {self.retries}")
        if self.connect_timeout <= 0 or self.read_timeout <= 0:
            raise StoreError("connect_timeout and read_timeout must be positive numbers of seconds")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> AzureSettings:
        """Defaults, then ``FLYTE_CHECKPOINT_AZURE_*`` variables, then ``overrides`` (not None).

        Raises:
            StoreError: a value that is not a number (or size, or boolean) or out of range;
                the message names the variable.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            var = ENV_PREFIX + f.name.upper()
            raw = env.get(var, "").strip()
            if raw:
                values[f.name] = _convert(f.name, raw, var)
        unknown = set(overrides) - {f.name for f in fields(cls)}
        if unknown:
            raise TypeError(f"unknown Azure store settings: {', '.join(sorted(unknown))}")
        values.update({k: v for k, v in overrides.items() if v is not None})
        return replace(cls(), **values)


def parse_size(text: str) -> int:
    """``"8MiB"``, ``"256k"``, ``"1048576"`` -> bytes. Raises ValueError otherwise."""
    m = _SIZE_RE.match(text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def _convert(name: str, raw: str, var: str) -> Any:
    default = getattr(AzureSettings, name)
    try:
        if isinstance(default, bool):
            low = raw.lower()
            if low in ("1", "true", "yes", "on", "md5"):
                return True
            if low in ("0", "false", "no", "off", "none"):
                return False
            raise ValueError(raw)
        if name.endswith("size"):
            return parse_size(raw)
        if isinstance(default, int):
            return int(raw)
        return float(raw)
    except ValueError:
        kind = "a size such as 8MiB" if name.endswith("size") else type(default).__name__
        raise StoreError(f"{var}={raw!r} is not valid: expected {kind}") from None
