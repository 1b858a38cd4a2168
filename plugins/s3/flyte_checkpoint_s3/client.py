"""The boto3 S3 client of a store: built on first use in each process, shared by its threads.

botocore retries each request at most ``request_attempts`` times in total ("standard" mode),
so the core's retry policy is the layer that decides (CONTRIBUTING.md, the fault table).
"""

from __future__ import annotations

from typing import Any

from flyte_checkpoint.storage.kit import PerProcess

from . import redaction
from .config import S3Config

#: The region when neither the settings, the environment nor a profile name one.
FALLBACK_REGION = "us-east-1"


class S3Client:
    """Builds the client on first :meth:`get` (importing boto3 then) and keeps it until :meth:`close`.

    One client per process: a forked child builds its own rather than share the parent's
    pooled connections.
    """

    def __init__(self, config: S3Config) -> None:
        self.config = config
        self._client: PerProcess[Any] = PerProcess(self._build)

    def get(self) -> Any:
        """The shared ``botocore`` S3 client (thread-safe to use).

        Raises:
            botocore.exceptions.ProfileNotFound: the configured profile does not exist.
        """
        return self._client.get()

    def _build(self) -> Any:
        redaction.install()
        return _build_client(self.config)

    def close(self) -> None:
        """Close the client's connections; the next :meth:`get` builds a new one."""
        client = self._client.take()
        if client is not None:
            client.close()


def _build_client(config: S3Config) -> Any:
    """A botocore S3 client for ``config``: region, endpoint, credentials (or none, with
    ``anonymous``), timeouts, bounded retries, and the pool of ``max_connections``."""
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    session = boto3.session.Session(
        aws_access_key_id=config.access_key_id,
        aws_secret_access_key=config.secret_access_key,
        aws_session_token=config.session_token,
        profile_name=config.profile,
    )
    s3_options: dict[str, Any] = {}
    if config.addressing_style:
        s3_options["addressing_style"] = config.addressing_style
    botocore_config = Config(
        connect_timeout=config.connect_timeout,
        read_timeout=config.read_timeout,
        retries={"mode": "standard", "total_max_attempts": config.request_attempts},
        max_pool_connections=config.max_connections,
        s3=s3_options or None,
        signature_version=UNSIGNED if config.anonymous else None,
        # The store computes and checks checksums itself (per part, combined into the
        # whole object's), so botocore must not add or verify its own.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        tcp_keepalive=True,
    )
    client = session.client(
        "s3",
        endpoint_url=config.endpoint_url,
        # explicit: boto3 would read AWS_DEFAULT_REGION but not AWS_REGION (config.py)
        region_name=config.region or session.region_name or FALLBACK_REGION,
        config=botocore_config,
    )
    client.meta.events.register("before-sign.s3.GetObject", _ask_for_checksum)
    return client


def _ask_for_checksum(request: Any, **_: Any) -> None:
    # ``ChecksumMode=ENABLED`` as a parameter would also make botocore wrap and verify the
    # body, which a read that stops early (ranged reads) cannot use; the header alone makes
    # S3 return the stored checksum, which the reader verifies over the bytes it delivers.
    request.headers["x-amz-checksum-mode"] = "ENABLED"


__all__ = ["FALLBACK_REGION", "S3Client"]
