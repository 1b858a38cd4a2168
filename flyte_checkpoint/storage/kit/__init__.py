"""The backend kit: what every cloud backend needs and writes the same way.

- :mod:`.settings`: a config's settings from arguments and ``FLYTE_CHECKPOINT_<BACKEND>_*``
  variables, one parser, and the settings table of the README;
- :mod:`.locations`: a URI's bucket and key;
- :mod:`.pools`: one thread pool per store, per process;
- :mod:`.errors`: the same error for the same HTTP answer on every cloud;
- :mod:`.redaction`: secrets kept out of SDK log lines and messages;
- :mod:`.files`: downloads into a file that appears only when whole;
- :mod:`.checksums`: CRC32/CRC32C/CRC64NVME computed and combined, MD5, from the best library here;
- :mod:`.reads`: :class:`RangedReader`, a stream of ranges fetched ahead, bounded, in order, verified;
- :mod:`.parts`: :class:`PartWriter`, parts sent from the pool, bounded, committed or cancelled;
- :mod:`.plans`: :func:`plan_shard`, a rank's parts of a sharded save from its store's limits (pure);
- from the core's small pieces, for a backend's own code: :class:`PerProcess` and
  :func:`per_process_lock` (clients, pools and locks a forked child makes afresh),
  :func:`open_source` (the file an ``upload_file`` reads, checked unchanged before the commit)
  and :func:`check_cancelled` (called before a commit made without a ``BlobWriter``).

It never retries: the core's retry policy (:mod:`flyte_checkpoint.util.retry`) is the one that decides.
"""

from __future__ import annotations

from ...util.cancellation import check as check_cancelled
from ...util.forksafe import PerProcess
from ...util.forksafe import lock as per_process_lock
from ...util.sources import SourceFile, open_source
from .checksums import Crc, Digest, crc, digest, require_crc
from .errors import TRANSIENT_STATUS, chain, container_missing, from_status, transport_failed
from .files import download_to_file
from .locations import Location, parse_location
from .parts import PartWriter, part_size_for
from .plans import PartLimits, PlannedShards, ShardPlan, check_world, compose_plan, plan_shard
from .pools import StorePool
from .reads import RangedReader, RangeFetch
from .redaction import protect_logs, scrub, scrub_values
from .settings import (
    CHOICE,
    COUNT,
    FLAG,
    OBJECT,
    SECONDS,
    SIZE,
    TEXT,
    URL,
    CloudConfig,
    GiB,
    KiB,
    Kind,
    MiB,
    SettingDoc,
    StoreConfig,
    parse,
    setting,
)

__all__ = [
    "PerProcess",
    "SourceFile",
    "check_cancelled",
    "open_source",
    "per_process_lock",
    "require_crc",
    "part_size_for",
    "digest",
    "crc",
    "RangedReader",
    "RangeFetch",
    "PartWriter",
    "PartLimits",
    "ShardPlan",
    "PlannedShards",
    "check_world",
    "compose_plan",
    "plan_shard",
    "Digest",
    "Crc",
    "CHOICE",
    "COUNT",
    "FLAG",
    "OBJECT",
    "SECONDS",
    "SIZE",
    "TEXT",
    "TRANSIENT_STATUS",
    "URL",
    "CloudConfig",
    "GiB",
    "KiB",
    "Kind",
    "Location",
    "MiB",
    "SettingDoc",
    "StoreConfig",
    "StorePool",
    "chain",
    "container_missing",
    "download_to_file",
    "from_status",
    "parse",
    "parse_location",
    "protect_logs",
    "scrub",
    "scrub_values",
    "setting",
    "transport_failed",
]
