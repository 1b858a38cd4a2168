"""Every backend's test server, started once per session, for the reliability tests.

One :class:`Backend` per name in :data:`BACKENDS` (``file``, ``s3``, ``gcs``, ``azure``):
its test server running on 127.0.0.1 (moto's S3 server, gcp-storage-emulator, Azurite;
none for ``file``), a bucket/container made for these tests, a root URI under it, and the
environment variables that point the registry's store at that server. The same variables
work in this process (:meth:`Backend.activated`) and in a child process
(:meth:`Backend.child_env`).

Use it through the fixtures (import them into a test module)::

    from tests.reliability.backends import backend, backend_pool  # noqa: F401

    def test_something(backend):             # runs once per backend name
        uri = backend.fresh("ckpt")           # a fresh, empty URI on that backend
        ...                                   # os.environ points at its server here

or by hand (``pool = BackendPool(); b = pool.get("s3"); ...; pool.close()``).

Servers are started lazily, the first time a backend is asked for, and stopped when the
session ends (or :meth:`BackendPool.close`). A server that is not installed skips the test
(a failure with ``CI=true``, see the root conftest); one that is installed but does not start
fails it, CI or not, with the server's output. Stores use small parts, blocks and
chunks (see ``*_TUNING``), so a checkpoint of a few MiB is a multi-part upload everywhere.
Credentials are fake but distinctive (:data:`S3_ACCESS_KEY`, :data:`S3_SECRET_KEY`) where the
server accepts any, and Azurite's well-known key otherwise; :attr:`Backend.secrets` lists the
strings that must never appear in logs, errors or reprs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from conftest import require

#: The backend names, in the order tests run them.
BACKENDS = ("file", "s3", "gcs", "azure")

#: Fake S3 credentials (moto accepts any); distinctive so a leak is easy to find.
S3_ACCESS_KEY = "AKIARELIAB1L1TYKEY77"
S3_SECRET_KEY = "rel/S3cretKey+Never+Logged/9f8e7d6c5b4a"

BUCKET = "fcp-reliability"

S3_TUNING = {
    "FLYTE_CHECKPOINT_S3_PART_SIZE": "256KiB",
    "FLYTE_CHECKPOINT_S3_MAX_CONCURRENCY": "3",
    "FLYTE_CHECKPOINT_S3_READ_RANGE_SIZE": "1MiB",
    "FLYTE_CHECKPOINT_S3_READ_CONCURRENCY": "3",
}
GCS_TUNING = {
    "FLYTE_CHECKPOINT_GCS_PART_SIZE": "256KiB",
    "FLYTE_CHECKPOINT_GCS_READ_RANGE_SIZE": "1MiB",
    "FLYTE_CHECKPOINT_GCS_READ_CONCURRENCY": "3",
}
AZURE_TUNING = {
    "FLYTE_CHECKPOINT_AZURE_PART_SIZE": "320KiB",
    "FLYTE_CHECKPOINT_AZURE_MAX_CONCURRENCY": "3",
    "FLYTE_CHECKPOINT_AZURE_READ_RANGE_SIZE": "1MiB",
    "FLYTE_CHECKPOINT_AZURE_READ_CONCURRENCY": "3",
    "FLYTE_CHECKPOINT_AZURE_READ_TIMEOUT": "30",
}

#: Variables that could steer a store away from the test servers (removed while a backend
#: is active, and from a child's environment). Prefixes end with ``_``.
FOREIGN_ENV = (
    "AWS_",
    "FLYTE_AWS_",
    "FLYTE_CHECKPOINT_S3_",
    "FLYTE_CHECKPOINT_GCS_",
    "FLYTE_CHECKPOINT_AZURE_",
    "AZURE_",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
    "GCLOUD_PROJECT",
    "CLOUDSDK_CORE_PROJECT",
    "STORAGE_EMULATOR_HOST",
)


def is_foreign(name: str) -> bool:
    """Whether an environment variable could point a store somewhere else than our servers."""
    return any(name.startswith(p) if p.endswith("_") else name == p for p in FOREIGN_ENV)


@dataclass(frozen=True)
class Backend:
    """A backend whose test server is running.

    Attributes:
        name: one of :data:`BACKENDS`.
        root: a URI prefix of its own on that server (a folder for ``file``), with no
            trailing slash; :meth:`fresh` makes unique URIs under it.
        env: the variables that point the registry's store at the server (small parts too).
        secrets: credential strings in use that must never be shown.
        details: server facts a test may need: ``endpoint`` (s3, gcs), ``connection_string``,
            ``blob_endpoint``, ``account_name``, ``account_key``, ``container`` (azure), ``bucket``.
    """

    name: str
    root: str
    env: Mapping[str, str]
    secrets: tuple[str, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)

    def fresh(self, label: str = "ckpt") -> str:
        """A URI nobody has used yet: ``{root}/{random}/{label}``."""
        return f"{self.root}/{uuid.uuid4().hex}/{label}"

    def child_env(self, **extra: str) -> dict[str, str]:
        """A whole environment for a child process that should use this backend."""
        env = {k: v for k, v in os.environ.items() if not is_foreign(k)}
        env.update(self.env)
        env.update(extra)
        return env

    @contextlib.contextmanager
    def activated(self, **extra: str) -> Iterator[Backend]:
        """Point this process's registry at the server (``os.environ``), restored after."""
        from flyte_checkpoint.storage.registry import get_registry

        saved = dict(os.environ)
        for k in [k for k in os.environ if is_foreign(k)]:
            del os.environ[k]
        os.environ.update(self.env)
        os.environ.update(extra)
        get_registry().close()  # stores are rebuilt from this environment on next use
        try:
            yield self
        finally:
            get_registry().close()
            os.environ.clear()
            os.environ.update(saved)

    def __repr__(self) -> str:
        return f"Backend({self.name!r}, root={self.root!r})"


class BackendPool:
    """Starts each backend's server on first use and keeps it until :meth:`close`."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._started: dict[str, Backend] = {}
        self._failed: dict[str, _Unavailable] = {}

    def get(self, name: str) -> Backend:
        """The running backend ``name``.

        Skips (fails with ``CI=true``) when its server is not installed, and fails when the
        server is installed but did not start (every later request fails the same way).
        """
        if name not in BACKENDS:
            raise ValueError(f"unknown backend {name!r}: one of {BACKENDS}")
        if name not in self._started and name not in self._failed:
            try:
                self._started[name] = getattr(self, f"_start_{name}")()
            except _Unavailable as exc:
                self._failed[name] = exc
        failed = self._failed.get(name)
        if isinstance(failed, _StartFailed):
            pytest.fail(str(failed), pytrace=False)
        if failed is not None:
            require(False, str(failed))
        return self._started[name]

    def close(self) -> None:
        """Stop every server started (idempotent)."""
        self._started.clear()
        self._failed.clear()
        self._stack.close()

    # -- one starter per backend -------------------------------------------------------

    def _start_file(self) -> Backend:
        root = tempfile.mkdtemp(prefix="fcp-reliability-")
        self._stack.callback(shutil.rmtree, root, True)
        return Backend("file", root, {})

    def _start_s3(self) -> Backend:
        try:
            from flyte_checkpoint_s3_tests import server
        except ImportError:
            raise _Unavailable("the S3 plugin's test package (flyte_checkpoint_s3_tests) is not installed")
        if not server.server_installed():
            raise _Unavailable(f"moto's S3 server is not installed: {server.INSTALL_HINT}")
        try:
            endpoint = self._stack.enter_context(server.run_server()).endpoint
        except server.ServerStartError as exc:
            raise _StartFailed(str(exc))
        env = {
            "AWS_ENDPOINT_URL_S3": endpoint,
            "AWS_ACCESS_KEY_ID": S3_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": S3_SECRET_KEY,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            **S3_TUNING,
        }
        client = s3_client(endpoint)
        try:
            client.create_bucket(Bucket=BUCKET)
        finally:
            client.close()
        return Backend(
            "s3",
            f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}",
            env,
            (S3_SECRET_KEY, S3_ACCESS_KEY),
            {"endpoint": endpoint, "bucket": BUCKET},
        )

    def _start_gcs(self) -> Backend:
        try:
            from flyte_checkpoint_gcs_tests import server
        except ImportError:
            raise _Unavailable("the GCS plugin's test package (flyte_checkpoint_gcs_tests) is not installed")
        if not server.server_installed():
            raise _Unavailable(f"gcp-storage-emulator is not installed: {server.INSTALL_HINT}")
        try:
            emu = self._stack.enter_context(server.run_server())
        except server.ServerStartError as exc:
            raise _StartFailed(str(exc))
        emu.create_bucket(BUCKET)
        env = {"STORAGE_EMULATOR_HOST": emu.endpoint, **GCS_TUNING}
        return Backend(
            "gcs",
            f"gs://{BUCKET}/{uuid.uuid4().hex[:8]}",
            env,
            (),
            {"endpoint": emu.endpoint, "bucket": BUCKET},
        )

    def _start_azure(self) -> Backend:
        try:
            from flyte_checkpoint_azure_tests import server
        except ImportError:
            raise _Unavailable(
                "the Azure plugin's test package (flyte_checkpoint_azure_tests) is not installed"
            )
        if not server.server_installed():
            raise _Unavailable(f"azurite-blob is not installed: {server.INSTALL_HINT}")
        try:
            srv = self._stack.enter_context(server.run_server())
        except server.ServerStartError as exc:
            raise _StartFailed(str(exc))
        srv.create_bucket(BUCKET)
        env = {"AZURE_STORAGE_CONNECTION_STRING": srv.connection_string, **AZURE_TUNING}
        return Backend(
            "azure",
            f"az://{BUCKET}/{uuid.uuid4().hex[:8]}",
            env,
            (srv.account_key,),
            {
                "connection_string": srv.connection_string,
                "blob_endpoint": srv.endpoint,
                "account_name": srv.account_name,
                "account_key": srv.account_key,
                "container": BUCKET,
            },
        )


class _Unavailable(RuntimeError):
    """A backend's server is not installed here."""


class _StartFailed(_Unavailable):
    """A backend's server is installed but did not start."""


def s3_client(endpoint: str) -> Any:
    """A plain boto3 client on the moto server, with the fake credentials."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=S3_ACCESS_KEY,
        aws_secret_access_key=S3_SECRET_KEY,
        region_name="us-east-1",
    )


def s3_open_uploads(backend: Backend, uri: str) -> list[dict[str, Any]]:
    """Multipart uploads started and neither completed nor aborted under ``uri``'s key."""
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    client = s3_client(backend.details["endpoint"])
    try:
        return client.list_multipart_uploads(Bucket=bucket, Prefix=key).get("Uploads", [])
    finally:
        client.close()


_POOL = BackendPool()


@pytest.fixture(scope="session")
def backend_pool() -> Iterator[BackendPool]:
    """The session's servers, stopped when the session ends."""
    yield _POOL
    _POOL.close()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, backend_pool: BackendPool) -> Iterator[Backend]:
    """Each backend in turn, its server running and ``os.environ`` pointing at it."""
    b = backend_pool.get(request.param)
    with b.activated():
        yield b
