"""The GCS store's settings: the shared cloud settings with GCS's defaults, and GCS's own.

Precedence, highest first: arguments (``configure_store``, then the store's keyword arguments),
``FLYTE_CHECKPOINT_GCS_<SETTING>``, Google's own variables (``STORAGE_EMULATOR_HOST``, the
project variables), the rule below, the default. Imports no SDK.

The rule: with ``STORAGE_EMULATOR_HOST`` set, ``anonymous`` defaults to true, as in Google's
client libraries (an emulator takes no credentials).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from flyte_checkpoint.storage.kit import (
    CHOICE,
    COUNT,
    FLAG,
    OBJECT,
    SIZE,
    TEXT,
    URL,
    CloudConfig,
    GiB,
    KiB,
    MiB,
    PartLimits,
)
from flyte_checkpoint.storage.kit import setting as _setting
from flyte_checkpoint.storage.kit.settings import Setting

EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
#: GCS's rules for the chunks of one resumable upload (the same four names in every plugin's
#: config): every chunk but the last a multiple of PART_MULTIPLE (a rule of the protocol),
#: so at least MIN_PART_SIZE; no limit on a chunk's size or on their count (a session numbers
#: no chunks: the chunk size never needs to grow).
PART_MULTIPLE = 256 * KiB
MIN_PART_SIZE = PART_MULTIPLE
MAX_PART_SIZE = sys.maxsize
MAX_PARTS = sys.maxsize
#: A sharded save's pieces (``flyte_checkpoint.storage.kit.plans``): each rank's segment is a
#: whole object (a resumable upload: no count or size of chunks to plan), composed by the
#: committing rank at most MAX_SOURCES a request, in rounds; no smallest piece, so no padding.
#: GCS's largest object, a piece or the composite, is 5 TiB.
MAX_OBJECT_SIZE = 5 * 1024 * GiB
MAX_SOURCES = 32
SHARD_LIMITS = PartLimits(
    store="GCS",
    min_part=0,
    max_part=MAX_OBJECT_SIZE,
    max_parts=None,
    max_object=MAX_OBJECT_SIZE,
    described="objects of at most 5 TiB, composed 32 a request",
)
PROJECT_ENVS = ("GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT")


@dataclass(frozen=True, repr=False)
class GCSConfig(CloudConfig):
    """How a GCS store talks to the service; each field is a row of the README's settings table."""

    BACKEND: ClassVar[str] = "gcs"

    endpoint_url: str | None = _setting(
        URL,
        None,
        doc="The service's URL, for an emulator or a compatible server; `host:port` means"
        " `http://host:port`; default: https://storage.googleapis.com.",
        env=(EMULATOR_ENV,),
    )
    anonymous: bool = _setting(
        FLAG,
        False,
        doc=f"Send no credentials (public buckets, emulators); true by default when `{EMULATOR_ENV}` is set.",
    )
    part_size: int = _setting(
        SIZE,
        16 * MiB,
        doc="Bytes of one resumable-upload request; a smaller object goes up in one request.",
        minimum=MIN_PART_SIZE,
        multiple_of=PART_MULTIPLE,
        why="GCS takes a session's chunks in multiples of 256KiB, one at a time, so larger"
        " requests amortise the round trips.",
    )
    max_concurrency: int = _setting(
        COUNT,
        1,
        doc="Parts one writer sends at the same time.",
        minimum=1,
        maximum=1,
        why="A GCS resumable session takes its chunks in order, one at a time (the caller"
        " fills the next chunk while one is on the wire).",
    )
    checksum: str = _setting(
        CHOICE,
        "CRC32C",
        doc="The full-object checksum sent with each write and checked by the server; NONE sends none.",
        choices=("CRC32C", "MD5", "NONE"),
    )
    credentials: Any = _setting(
        OBJECT,
        None,
        doc="A `google.auth` credentials object to use instead of Application Default Credentials.",
        secret=True,
    )
    project: str | None = _setting(
        TEXT,
        None,
        doc="The project of requests that need one (none of the store's do); informative.",
        env=PROJECT_ENVS,
    )
    session: Any = _setting(
        OBJECT,
        None,
        doc="A `requests` session to send every request through (proxies, adapters); default:"
        " an authorized session the store builds.",
    )

    @property
    def timeout(self) -> tuple[float, float]:
        """The ``(connect, read)`` timeout pair passed to every request."""
        return (self.connect_timeout, self.read_timeout)

    @classmethod
    def _cloud_rules(cls, values: dict[str, Any], env: Mapping[str, str], sources: dict[str, str]) -> None:
        if "anonymous" not in values and env.get(EMULATOR_ENV, "").strip():
            values["anonymous"], sources["anonymous"] = True, EMULATOR_ENV

    @classmethod
    def _parse(cls, name: str, spec: Setting, raw: Any, source: str) -> Any:
        if name == "endpoint_url" and isinstance(raw, str) and raw.strip() and "://" not in raw:
            raw = "http://" + raw.strip()  # STORAGE_EMULATOR_HOST's usual form, host:port
        value = super()._parse(name, spec, raw, source)
        return value.rstrip("/") if name == "endpoint_url" else value
