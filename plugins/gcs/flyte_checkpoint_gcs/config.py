"""Settings of the GCS store: constructor arguments, then environment variables, then defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from typing import Any

MiB = 1024 * 1024
#: Resumable-upload chunks must be a multiple of this (a rule of the GCS protocol).
CHUNK_MULTIPLE = 256 * 1024

ENV_PREFIX = "FLYTE_CHECKPOINT_GCS_"
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
PROJECT_ENVS = ("GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT")


@dataclass(frozen=True)
class GcsConfig:
    """How the store talks to GCS.

    Attributes:
        endpoint: base URL of the service (``http://127.0.0.1:9023`` for an emulator);
            ``None`` means the real service.
        project: project for requests that need one (none of the store's do); informative.
        anonymous: send no credentials (the default when an emulator endpoint is used).
        credentials: a ``google.auth`` credentials object to use instead of
            Application Default Credentials.
        chunk_size: bytes per resumable-upload request (a multiple of 256 KiB); objects
            smaller than this are uploaded in one request.
        read_range_size: bytes per ranged GET when reading a large object.
        read_concurrency: ranged GETs in flight per reader (1 = one streaming GET).
        connect_timeout: seconds to open a connection.
        read_timeout: seconds to wait for the next bytes of an answer.
        retry_timeout: seconds the SDK may spend retrying one request on 429/5xx and
            connection errors (0: no SDK retries; the core retries whole operations).
    """

    endpoint: str | None = None
    project: str | None = None
    anonymous: bool = False
    credentials: Any = field(default=None, repr=False)
    chunk_size: int = 16 * MiB
    read_range_size: int = 16 * MiB
    read_concurrency: int = 6
    connect_timeout: float = 10.0
    read_timeout: float = 120.0
    retry_timeout: float = 20.0

    def __post_init__(self) -> None:
        if self.chunk_size <= 0 or self.chunk_size % CHUNK_MULTIPLE:
            raise ValueError(
                f"chunk_size must be a positive multiple of 256 KiB ({CHUNK_MULTIPLE} bytes), "
                f"not {self.chunk_size}: GCS resumable uploads require it"
            )
        if self.read_range_size <= 0:
            raise ValueError(f"read_range_size must be positive, not {self.read_range_size}")
        if self.read_concurrency < 1:
            raise ValueError(f"read_concurrency must be at least 1, not {self.read_concurrency}")
        if self.connect_timeout <= 0 or self.read_timeout <= 0:
            raise ValueError("connect_timeout and read_timeout must be positive (seconds)")
        if self.retry_timeout < 0:
            raise ValueError(f"retry_timeout must be >= 0, not {self.retry_timeout}")

    @property
    def timeout(self) -> tuple[float, float]:
        """The ``(connect, read)`` timeout pair passed to every request."""
        return (self.connect_timeout, self.read_timeout)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides: Any) -> GcsConfig:
        """Build the settings: ``overrides`` (not ``None``) win over the environment,
        which wins over the defaults.

        Environment: ``FLYTE_CHECKPOINT_GCS_<FIELD>`` for each field (e.g.
        ``FLYTE_CHECKPOINT_GCS_CHUNK_SIZE``), ``STORAGE_EMULATOR_HOST`` for the endpoint
        (then anonymous by default), ``GOOGLE_CLOUD_PROJECT`` / ``GCLOUD_PROJECT`` /
        ``CLOUDSDK_CORE_PROJECT`` for the project.

        Raises:
            ValueError: a setting is malformed (the message names the variable).
        """
        env = dict(os.environ if env is None else env)
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name == "credentials":
                continue
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is not None and raw.strip():
                values[f.name] = _convert(f.name, raw.strip())
        if "endpoint" not in values and env.get(EMULATOR_ENV, "").strip():
            values["endpoint"] = env[EMULATOR_ENV].strip()
            values.setdefault("anonymous", True)
        if "project" not in values:
            project = next((env[k].strip() for k in PROJECT_ENVS if env.get(k, "").strip()), None)
            if project:
                values["project"] = project
        values.update({k: v for k, v in overrides.items() if v is not None})
        if values.get("endpoint"):
            values["endpoint"] = normalize_endpoint(values["endpoint"])
        return replace(cls(), **values)


def normalize_endpoint(endpoint: str) -> str:
    """``host:port`` becomes ``http://host:port``; a trailing slash is dropped."""
    endpoint = endpoint.strip().rstrip("/")
    if "://" not in endpoint:
        endpoint = "http://" + endpoint
    return endpoint


_DEFAULTS = GcsConfig()


def _convert(name: str, raw: str) -> Any:
    default = getattr(_DEFAULTS, name)
    var = ENV_PREFIX + name.upper()
    if isinstance(default, bool) or name == "anonymous":
        lowered = raw.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{var}={raw!r} is not a boolean: use 1/0, true/false")
    if isinstance(default, int):
        try:
            return _parse_size(raw)
        except ValueError:
            raise ValueError(f"{var}={raw!r} is not a size: use bytes or a suffix (256KiB, 16MiB)")
    if isinstance(default, float):
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"{var}={raw!r} is not a number of seconds")
    return raw


_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "kib": 1024,
    "m": MiB,
    "mb": MiB,
    "mib": MiB,
    "g": 1024 * MiB,
    "gb": 1024 * MiB,
    "gib": 1024 * MiB,
}


def _parse_size(raw: str) -> int:
    text = raw.strip().lower().replace("_", "")
    digits = text.rstrip("abcdefghijklmnopqrstuvwxyz ")
    unit = text[len(digits) :].strip()
    if not digits or unit not in _UNITS:
        raise ValueError(raw)
    return int(digits) * _UNITS[unit]
