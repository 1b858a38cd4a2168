"""The FTP store's settings: arguments, ``configure_store`` or ``FLYTE_CHECKPOINT_FTPSTORE_*``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flyte_checkpoint.storage.kit import COUNT, SECONDS, SIZE, TEXT, MiB, StoreConfig, setting


@dataclass(frozen=True, repr=False)
class FtpConfig(StoreConfig):
    """``FtpConfig.resolve(endpoint="127.0.0.1:2121", user=..., password=...)``."""

    BACKEND: ClassVar[str] = "ftpstore"

    endpoint: str = setting(TEXT, "127.0.0.1:21", doc="The FTP server, HOST:PORT.")
    user: str = setting(TEXT, "anonymous", doc="The login name.")
    password: str = setting(TEXT, "", doc="The login password.", secret=True)
    part_size: int = setting(SIZE, 8 * MiB, doc="Bytes a writer holds before it sends any.", minimum=1)
    max_concurrency: int = setting(COUNT, 1, doc="Parts in flight (one STOR stream: 1).", minimum=1)
    timeout: float = setting(SECONDS, 60.0, doc="Connect and read timeout of every connection.")
