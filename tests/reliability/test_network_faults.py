"""Network faults between the client and each cloud test server, through :mod:`.faultproxy`.

For S3 (moto), GCS (gcp-storage-emulator) and Azure (Azurite), each started on 127.0.0.1 by a
module fixture, the plugin's endpoint setting points at a :class:`FaultProxy` in front of the
server. The proxy resets, truncates or stalls connections mid-upload and mid-download, or
accepts and then never answers. What must hold:

- a save or load either succeeds after retries (the object, or the restored tree, is whole)
  or fails within a bounded time with a project error; a failed save leaves the previous
  checkpoint exactly as it was, a failed load leaves nothing in the workspace and never
  returns ``None`` for a checkpoint that exists;
- transient errors are retried by the core with exponential backoff and full jitter,
  bounded in attempts and total time (``FLYTE_CHECKPOINT_RETRY_*``), and each retry is logged;
- permanent errors (missing bucket/container, access denied where the server can refuse)
  fail at once, with no retry;
- a connection that stalls fails by the plugin's read timeout, instead of hanging;
- each plugin's SDK retries of one request are what its settings say.

SDK-level retries are turned off (``request_attempts=1`` / ``request_attempts=1`` / ``retries=0``)
so that every retry counted here is the core's, except in the tests of those settings; the
servers' objects are checked directly, without the proxy.

Outcomes depend on counts and events, never on the machine's speed: tries are counted from
the core's report and the proxy's records (connections, faults fired, HTTP request lines
forwarded to the server); "no retry" is the same requests with 4 tries allowed as with 1;
the total-time limit of retries is shown on a clock that advances only by the retry pauses.
Wall-clock limits are hang guards only (the test timeout, generous socket timeouts).
"""

from __future__ import annotations

import io
import logging
import os
import random
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import flyte_checkpoint as fc
from conftest import require
from flyte_checkpoint.errors import (
    CheckpointError,
    CheckpointPermissionError,
    ContainerNotFoundError,
    CorruptCheckpointError,
    TransientError,
)
from flyte_checkpoint.format.restore import restore
from flyte_checkpoint.storage.blobstore import BlobStore
from flyte_checkpoint.storage.registry import get_registry, store_for
from flyte_checkpoint.testing.faultproxy import HANG_GUARD, Fault, FaultProxy
from flyte_checkpoint.util.retry import RetryPolicy
from tests.helpers import snapshot
from tests.test_retry import Clock as PauseClock  # time for the retry module: only pauses advance it

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

KEY_ID = "AKIARELIABILITY00000"
SECRET = "reliability-s3cr3t"
#: Bytes into a connection at which faults fire: inside the body of any part, block or range
#: (all 256-512 KiB here), past every header and small answer (stat, list, commit).
MID_BODY = 100_000
#: The core's retry policy for these tests: quick backoff, so the suite stays fast.
ATTEMPTS = 4
BASE_DELAY = 0.05
MAX_DELAY = 0.4
#: Socket timeouts for tests that stall (the stall must end by a timeout); for the rest, a
#: hang guard (the machine is shared).
STALL_TIMEOUT = 1.0
CALM_TIMEOUT = HANG_GUARD
RETRY_LINE = re.compile(r"transient error \(try (\d+) of (\d+)\), retrying in ([\d.]+)s")

FOREIGN_ENV = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "FLYTE_AWS_ENDPOINT",
    "FLYTE_AWS_ACCESS_KEY_ID",
    "FLYTE_AWS_SECRET_ACCESS_KEY",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "STORAGE_EMULATOR_HOST",
    "FLYTE_CHECKPOINT_GCS_ENDPOINT_URL",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_ENDPOINT",
    "AZURE_STORAGE_CLIENT_SECRET",
    "AZURE_CLIENT_SECRET",
    "FLYTE_CHECKPOINT_MAX_UNPACKED_BYTES",
)


# --------------------------------------------------------------------------- servers


@dataclass
class Server:
    """A running test server: how to point the plugin at an endpoint, and direct access."""

    name: str
    upstream: str  # http://127.0.0.1:PORT (Azure: plus /ACCOUNT)
    bucket_uri: str  # scheme://bucket
    missing_container_uri: str
    env_for: Callable[[str, float], dict[str, str]]  # (endpoint, socket timeout) -> variables
    direct: Callable[[], BlobStore]  # a store talking to the server itself, not the proxy


def _s3() -> Iterator[Server]:
    try:
        from flyte_checkpoint_s3_tests import server
    except ImportError:
        require(False, "the S3 plugin's test package (flyte_checkpoint_s3_tests) is not installed")
        raise
    require(server.server_installed(), f"moto's S3 server is not installed: {server.INSTALL_HINT}")
    from flyte_checkpoint_s3.store import S3Store

    with server.run_server() as running:
        running.create_bucket("reliability")
        endpoint = running.endpoint

        def env_for(url: str, timeout: float) -> dict[str, str]:
            return {
                "AWS_ENDPOINT_URL_S3": url,
                "AWS_ACCESS_KEY_ID": KEY_ID,
                "AWS_SECRET_ACCESS_KEY": SECRET,
                "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_EC2_METADATA_DISABLED": "true",
                "AWS_CONFIG_FILE": os.devnull,
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
                "FLYTE_CHECKPOINT_S3_CONNECT_TIMEOUT": str(timeout),
                "FLYTE_CHECKPOINT_S3_READ_TIMEOUT": str(timeout),
                "FLYTE_CHECKPOINT_S3_REQUEST_ATTEMPTS": "1",
                "FLYTE_CHECKPOINT_S3_PART_SIZE": "256KiB",
                "FLYTE_CHECKPOINT_S3_READ_RANGE_SIZE": "512KiB",
                "FLYTE_CHECKPOINT_S3_MAX_CONCURRENCY": "2",
                "FLYTE_CHECKPOINT_S3_READ_CONCURRENCY": "2",
            }

        def direct() -> BlobStore:
            return S3Store(
                endpoint_url=endpoint, access_key_id=KEY_ID, secret_access_key=SECRET, region="us-east-1"
            )

        yield Server("s3", endpoint, "s3://reliability", "s3://no-such-bucket-rel", env_for, direct)


def _gcs() -> Iterator[Server]:
    try:
        from flyte_checkpoint_gcs_tests import server
    except ImportError:
        require(False, "the GCS plugin's test package (flyte_checkpoint_gcs_tests) is not installed")
        raise
    require(server.server_installed(), f"gcp-storage-emulator is not installed: {server.INSTALL_HINT}")
    from flyte_checkpoint_gcs.store import GCSStore

    with server.run_server() as emu:
        emu.create_bucket("reliability")

        def env_for(url: str, timeout: float) -> dict[str, str]:
            return {
                "STORAGE_EMULATOR_HOST": url,
                "FLYTE_CHECKPOINT_GCS_CONNECT_TIMEOUT": str(timeout),
                "FLYTE_CHECKPOINT_GCS_READ_TIMEOUT": str(timeout),
                "FLYTE_CHECKPOINT_GCS_REQUEST_ATTEMPTS": "1",
                "FLYTE_CHECKPOINT_GCS_PART_SIZE": "256KiB",
                "FLYTE_CHECKPOINT_GCS_READ_RANGE_SIZE": "512KiB",
                "FLYTE_CHECKPOINT_GCS_READ_CONCURRENCY": "2",
            }

        def direct() -> BlobStore:
            return GCSStore(endpoint_url=emu.endpoint, anonymous=True)

        yield Server("gcs", emu.endpoint, "gs://reliability", "gs://no-such-bucket-rel", env_for, direct)


def _azure() -> Iterator[Server]:
    try:
        from flyte_checkpoint_azure_tests import server
    except ImportError:
        require(False, "the Azure plugin's test package (flyte_checkpoint_azure_tests) is not installed")
        raise
    require(server.server_installed(), f"azurite-blob is not installed: {server.INSTALL_HINT}")
    from flyte_checkpoint_azure.store import AzureStore

    try:
        running = server.run_server()
        srv = running.__enter__()
    except server.ServerStartError as exc:  # installed but not started: a failure, CI or not
        pytest.fail(str(exc), pytrace=False)
    try:
        srv.create_bucket("reliability")

        def conn(endpoint: str, key: str = srv.account_key) -> str:
            return (
                f"DefaultEndpointsProtocol=http;AccountName={srv.account_name};"
                f"AccountKey={key};BlobEndpoint={endpoint};"
            )

        def env_for(url: str, timeout: float) -> dict[str, str]:
            return {
                "AZURE_STORAGE_CONNECTION_STRING": conn(url),
                "FLYTE_CHECKPOINT_AZURE_CONNECT_TIMEOUT": str(timeout),
                "FLYTE_CHECKPOINT_AZURE_READ_TIMEOUT": str(timeout),
                "FLYTE_CHECKPOINT_AZURE_REQUEST_ATTEMPTS": "1",
                "FLYTE_CHECKPOINT_AZURE_PART_SIZE": "256KiB",
                "FLYTE_CHECKPOINT_AZURE_READ_RANGE_SIZE": "512KiB",
                "FLYTE_CHECKPOINT_AZURE_MAX_CONCURRENCY": "2",
                "FLYTE_CHECKPOINT_AZURE_READ_CONCURRENCY": "2",
            }

        def direct() -> BlobStore:
            return AzureStore(connection_string=srv.connection_string)

        yield Server("azure", srv.endpoint, "az://reliability", "az://no-such-container-rel", env_for, direct)
    finally:
        running.__exit__(None, None, None)


SERVERS = {"s3": _s3, "gcs": _gcs, "azure": _azure}


@pytest.fixture(scope="module", params=sorted(SERVERS))
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    gen = SERVERS[request.param]()
    yield next(gen)
    gen.close()


@pytest.fixture(scope="module")
def direct(server: Server) -> Iterator[BlobStore]:
    store = server.direct()
    yield store
    store.close()


@pytest.fixture
def proxy(server: Server) -> Iterator[FaultProxy]:
    with FaultProxy(server.upstream) as p:
        yield p


@dataclass
class Rig:
    """One test's setup: the proxy, the server, where to write, and the retry log."""

    server: Server
    proxy: FaultProxy
    direct: BlobStore
    root: str
    caplog: pytest.LogCaptureFixture
    monkeypatch: pytest.MonkeyPatch

    def use(self, *, timeout: float = CALM_TIMEOUT, attempts: int = ATTEMPTS, **extra: str | None) -> None:
        """Point the plugin at the proxy with these settings (stores are rebuilt on next use);
        an ``extra`` of None removes that variable (the plugin's default applies)."""
        env: dict[str, str | None] = {
            "FLYTE_CHECKPOINT_RETRY_ATTEMPTS": str(attempts),
            "FLYTE_CHECKPOINT_RETRY_BASE_DELAY": str(BASE_DELAY),
            "FLYTE_CHECKPOINT_RETRY_MAX_DELAY": str(MAX_DELAY),
            "FLYTE_CHECKPOINT_RETRY_TOTAL_TIMEOUT": str(HANG_GUARD * 5),
            **self.server.env_for(self.proxy.url, timeout),
            **extra,
        }
        for k, v in env.items():
            if v is None:
                self.monkeypatch.delenv(k, raising=False)
            else:
                self.monkeypatch.setenv(k, v)
        get_registry().close()

    @property
    def tag(self) -> str:
        """The random folder name of :attr:`root`: it appears in every request for its objects."""
        return self.root.rsplit("/", 1)[1]

    def requests_for(self, marker: str | None = None) -> list[str]:
        """The HTTP request lines the proxy forwarded that name ``marker`` (default: :attr:`tag`)."""
        return [r for r in self.proxy.requests if (marker or self.tag) in r]

    def retries(self) -> list[tuple[int, int, float]]:
        """(try, of, pause) of each retry the core logged."""
        out = []
        for rec in self.caplog.records:
            m = RETRY_LINE.search(rec.getMessage())
            if m:
                out.append((int(m.group(1)), int(m.group(2)), float(m.group(3))))
        return out


@pytest.fixture
def rig(server, proxy, direct, caplog, monkeypatch) -> Iterator[Rig]:
    for k in FOREIGN_ENV:
        monkeypatch.delenv(k, raising=False)
    caplog.set_level(logging.DEBUG, logger="flyte_checkpoint")
    r = Rig(server, proxy, direct, f"{server.bucket_uri}/{uuid.uuid4().hex}", caplog, monkeypatch)
    r.use()
    yield r
    get_registry().close()


# --------------------------------------------------------------------------- payloads


def make_tree(root: Path, seed: int) -> Path:
    """A checkpoint folder of about 1.3 MB that does not compress (so bodies stay large)."""
    rnd = random.Random(seed)
    (root / "optim").mkdir(parents=True)
    (root / "model.bin").write_bytes(rnd.randbytes(1_200_000))
    (root / "optim" / "adam.bin").write_bytes(rnd.randbytes(70_000))
    (root / "meta.json").write_text(f'{{"seed": {seed}}}')
    (root / "last").symlink_to("model.bin")
    return root


def tarball_of(tree: Path, tmp: Path) -> bytes:
    """The object ``save()`` writes for ``tree`` (made on the local file backend)."""
    obj = tmp / f"obj-{uuid.uuid4().hex}"
    with fc.Checkpoint(str(obj)) as cp:
        cp.save_sync(tree)
    return obj.read_bytes()


def restored_tree(blob: bytes, tmp: Path) -> dict[str, object]:
    dest = tmp / f"restored-{uuid.uuid4().hex}"
    dest.mkdir()
    assert restore(io.BytesIO(blob), str(dest), len(blob)) is True
    return snapshot(dest)


def assert_backoff(retries: list[tuple[int, int, float]], attempts: int) -> None:
    """Each logged pause is within the full-jitter bound of its try: [0, min(max, base * 2**(n-1))]."""
    for n, of, pause in retries:
        assert of == attempts
        assert 0 <= pause <= min(MAX_DELAY, BASE_DELAY * 2 ** (n - 1)) + 0.005, (n, pause)
    assert [n for n, _, _ in retries] == list(range(1, len(retries) + 1))


# --------------------------------------------------------------------------- faults that clear

UPLOAD_FAULTS = {
    "reset": Fault.reset("up", after=MID_BODY),
    "truncate": Fault.truncate("up", after=MID_BODY),
}
DOWNLOAD_FAULTS = {
    "reset": Fault.reset("down", after=MID_BODY),
    "truncate": Fault.truncate("down", after=MID_BODY),
}


@pytest.mark.parametrize("kind", sorted(UPLOAD_FAULTS))
def test_save_succeeds_once_upload_faults_clear(rig: Rig, tmp_path: Path, kind: str):
    """Connections cut mid-upload twice, then healthy: the save succeeds after retries and the
    stored object is the whole new checkpoint (never a partial one)."""
    tree = make_tree(tmp_path / "tree", 1)
    uri = f"{rig.root}/ckpt"
    rig.proxy.fail(UPLOAD_FAULTS[kind], times=2)
    with fc.Checkpoint(uri) as cp:
        cp.save_sync(tree)
    assert rig.proxy.fired == 2
    retries = rig.retries()
    assert 1 <= len(retries) <= 2, retries  # parallel parts may meet both faults in one try
    assert_backoff(retries, ATTEMPTS)
    assert restored_tree(rig.direct.read_bytes(uri), tmp_path) == snapshot(tree)


@pytest.mark.parametrize("kind", sorted(DOWNLOAD_FAULTS))
def test_load_succeeds_once_download_faults_clear(rig: Rig, tmp_path: Path, kind: str):
    """Connections cut mid-download twice, then healthy: the load succeeds after retries and
    restores the whole tree."""
    tree = make_tree(tmp_path / "tree", 2)
    uri = f"{rig.root}/ckpt"
    rig.direct.write_bytes(uri, tarball_of(tree, tmp_path))
    rig.proxy.fail(DOWNLOAD_FAULTS[kind], times=2)
    with fc.Checkpoint(f"{rig.root}/next", uri) as cp:
        path = cp.load_sync()
        assert path == cp.path
        assert snapshot(path) == snapshot(tree)
    assert rig.proxy.fired == 2
    retries = rig.retries()
    # Azure's SDK re-reads a body cut mid-way by itself (3 tries, 1 s apart, whatever its
    # retry setting), so there the core may see no error at all
    assert (0 if rig.server.name == "azure" else 1) <= len(retries) <= 2, retries
    assert_backoff(retries, ATTEMPTS)


# --------------------------------------------------------------------------- faults that persist


@pytest.mark.parametrize("kind", sorted(UPLOAD_FAULTS))
def test_save_under_persistent_upload_faults_fails_bounded_and_keeps_previous(
    rig: Rig, tmp_path: Path, kind: str
):
    """Every connection cut mid-upload: the save raises TransientError after exactly
    ATTEMPTS tries (a bound by count, not time) with logged, growing, jittered pauses, and
    the previous checkpoint is left whole and unchanged."""
    uri = f"{rig.root}/ckpt"
    previous = tarball_of(make_tree(tmp_path / "old", 3), tmp_path)
    rig.direct.write_bytes(uri, previous)
    rig.proxy.fail(UPLOAD_FAULTS[kind])
    with fc.Checkpoint(uri) as cp, pytest.raises(TransientError, match=f"failed after {ATTEMPTS} tries"):
        cp.save_sync(make_tree(tmp_path / "new", 4))
    assert rig.proxy.fired >= ATTEMPTS  # every try met the fault
    retries = rig.retries()
    assert len(retries) == ATTEMPTS - 1, retries
    assert_backoff(retries, ATTEMPTS)
    assert rig.direct.read_bytes(uri) == previous


@pytest.mark.parametrize("kind", sorted(DOWNLOAD_FAULTS))
def test_load_under_persistent_download_faults_fails_bounded_never_none(rig: Rig, tmp_path: Path, kind: str):
    """Every connection cut mid-download: load raises (never returns None for an object that
    exists) after exactly ATTEMPTS tries, and nothing is left in the workspace."""
    uri = f"{rig.root}/ckpt"
    rig.direct.write_bytes(uri, tarball_of(make_tree(tmp_path / "tree", 5), tmp_path))
    rig.proxy.fail(DOWNLOAD_FAULTS[kind])
    with fc.Checkpoint(f"{rig.root}/next", uri) as cp:
        with pytest.raises(TransientError, match=f"failed after {ATTEMPTS} tries"):
            cp.load_sync()
        assert list(cp.path.iterdir()) == []
    assert rig.proxy.fired >= ATTEMPTS  # every try met the fault
    retries = rig.retries()
    assert len(retries) == ATTEMPTS - 1, retries
    assert_backoff(retries, ATTEMPTS)


class _FixedPauses(RetryPolicy):
    """The policy with every pause at its bound (no jitter), so the count is exact."""

    def delay(self, attempt: int) -> float:
        return min(self.max_delay, self.base_delay * 2 ** (attempt - 1))


def test_retry_total_timeout_bounds_a_failing_load(rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """With 1,000 tries allowed and every download cut, the total-time limit stops the
    retries: no new try starts once the next pause would pass the total. Pauses 0.5, 1, 1
    (doubling, at most 1 s) against a total of 2.5 s: tries 1-3 fail and are followed by
    pauses (0.5 + 1 = 1.5 s so far, the third pause ends at 2.5 s); after try 4 the next
    pause would end at 3.5 s, so the load raises after exactly 4 tries."""
    import flyte_checkpoint.util.retry as retry_module

    uri = f"{rig.root}/ckpt"
    rig.direct.write_bytes(uri, tarball_of(make_tree(tmp_path / "tree", 6), tmp_path))
    clock = PauseClock()
    monkeypatch.setattr(retry_module, "clock", clock)
    policy = _FixedPauses(attempts=1000, base_delay=0.5, max_delay=1.0, total_timeout=2.5)
    rig.proxy.fail(Fault.reset("down", after=MID_BODY))
    cp = fc.Checkpoint(f"{rig.root}/next", uri, retry=policy)
    with cp, pytest.raises(TransientError, match=r"failed after 4 tries in 2\.5s"):
        cp.load_sync()
    assert clock.sleeps == [0.5, 1.0, 1.0]
    assert [(n, of) for n, of, _ in rig.retries()] == [(1, 1000), (2, 1000), (3, 1000)]
    assert rig.proxy.fired >= 4  # each try met the fault


# --------------------------------------------------------------------------- stalls


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and every exception behind it (causes, contexts, and errors the SDKs wrap)."""
    seen: list[BaseException] = []
    stack = [exc]
    while stack:
        e = stack.pop()
        if e is None or any(e is s for s in seen):
            continue
        seen.append(e)
        stack += [e.__cause__, e.__context__]  # type: ignore[list-item]
        kwargs = getattr(e, "kwargs", None)  # botocore keeps the urllib3 error here
        if isinstance(kwargs, dict) and isinstance(kwargs.get("error"), BaseException):
            stack.append(kwargs["error"])
        stack += [a for a in e.args if isinstance(a, BaseException)]
        for attr in ("inner_exception", "reason"):
            v = getattr(e, attr, None)
            if isinstance(v, BaseException):
                stack.append(v)
    return seen


def assert_timed_out(exc: BaseException) -> None:
    """The failure came from a socket timeout (the configured read timeout), not from a
    reset or an early end of the stream."""
    causes = _causes(exc)
    assert any(type(e) is TimeoutError or type(e).__name__ == "ReadTimeoutError" for e in causes), [
        f"{type(e).__name__}: {e}" for e in causes
    ]


def test_load_from_a_server_that_accepts_and_never_answers_fails_by_timeout(rig: Rig, tmp_path: Path):
    """Stall at connect (accept, then silence): load raises TransientError after exactly its 2
    tries, each ended by the read timeout, instead of hanging; each try used a fresh
    connection (the stalled one was dropped)."""
    uri = f"{rig.root}/ckpt"
    rig.direct.write_bytes(uri, b"an existing checkpoint")
    rig.use(timeout=STALL_TIMEOUT, attempts=2)
    rig.proxy.fail(Fault.blackhole())
    with (
        fc.Checkpoint(f"{rig.root}/next", uri) as cp,
        pytest.raises(TransientError, match="after 2 tries") as info,
    ):
        cp.load_sync()
    assert_timed_out(info.value)
    assert len(rig.retries()) == 1
    assert rig.proxy.fired >= 2


def test_save_to_a_server_that_accepts_and_never_answers_fails_by_timeout(rig: Rig, tmp_path: Path):
    """Stall at connect on save: TransientError after exactly 2 tries, ended by the read
    timeout; nothing is stored."""
    uri = f"{rig.root}/ckpt"
    rig.use(timeout=STALL_TIMEOUT, attempts=2)
    rig.proxy.fail(Fault.blackhole())
    with fc.Checkpoint(uri) as cp, pytest.raises(TransientError, match="after 2 tries") as info:
        cp.save_sync(make_tree(tmp_path / "tree", 7))
    assert_timed_out(info.value)
    assert rig.proxy.fired >= 2
    assert rig.direct.stat(uri) is None


def test_load_stalled_mid_body_fails_by_timeout(rig: Rig, tmp_path: Path):
    """The download stops after MID_BODY bytes with the connection open: load raises
    TransientError after exactly 2 tries, ended by the read timeout; the workspace stays
    empty."""
    uri = f"{rig.root}/ckpt"
    rig.direct.write_bytes(uri, tarball_of(make_tree(tmp_path / "tree", 8), tmp_path))
    rig.use(timeout=STALL_TIMEOUT, attempts=2)
    rig.proxy.fail(Fault.stall("down", after=MID_BODY))
    with fc.Checkpoint(f"{rig.root}/next", uri) as cp:
        with pytest.raises(TransientError, match="after 2 tries") as info:
            cp.load_sync()
        assert list(cp.path.iterdir()) == []
    assert_timed_out(info.value)
    assert rig.proxy.fired >= 2


def test_save_stalled_mid_upload_fails_by_timeout_and_keeps_previous(rig: Rig, tmp_path: Path):
    """The server stops receiving after MID_BODY bytes of an upload: save raises TransientError
    after exactly 2 tries, ended by the read timeout, and the previous checkpoint is unchanged."""
    uri = f"{rig.root}/ckpt"
    rig.direct.write_bytes(uri, b"previous")
    rig.use(timeout=STALL_TIMEOUT, attempts=2)
    rig.proxy.fail(Fault.stall("up", after=MID_BODY))
    with fc.Checkpoint(uri) as cp, pytest.raises(TransientError, match="after 2 tries") as info:
        cp.save_sync(make_tree(tmp_path / "tree", 9))
    assert_timed_out(info.value)
    assert rig.proxy.fired >= 2
    rig.proxy.heal()
    assert rig.direct.read_bytes(uri) == b"previous"


def test_stalled_load_then_healthy_network_loads(rig: Rig, tmp_path: Path):
    """One stalled download, then a healthy network: the client gives up on the stalled
    connection (the proxy sees the client close it) and the retried load restores the whole
    tree. S3 and GCS: the core retried (their SDK retries are off); Azure: its SDK re-reads
    the body itself."""
    tree = make_tree(tmp_path / "tree", 10)
    uri = f"{rig.root}/ckpt"
    rig.direct.write_bytes(uri, tarball_of(tree, tmp_path))
    rig.use(timeout=STALL_TIMEOUT * 5)
    rig.proxy.fail(Fault.stall("down", after=MID_BODY), times=1)
    with fc.Checkpoint(f"{rig.root}/next", uri) as cp:
        assert snapshot(cp.load_sync()) == snapshot(tree)  # type: ignore[arg-type]
    assert rig.proxy.fired == 1
    stalled = next(r for r in rig.proxy.records if r.fired)
    # a stalled connection ends only when the client leaves it (or the proxy stops)
    rig.proxy.wait_for(lambda: stalled.closed, what="the client leaving the stalled connection")
    if rig.server.name != "azure":
        assert 1 <= len(rig.retries()) < ATTEMPTS, rig.retries()


# --------------------------------------------------------------------------- permanent errors


def requests_with_attempts(rig: Rig, attempts: int, scenario: Callable[[], None], **env: str) -> list[str]:
    """The HTTP requests ``scenario`` sends with the core allowed ``attempts`` tries (sorted)."""
    rig.use(attempts=attempts, **env)
    rig.proxy.reset_records()
    scenario()
    return sorted(rig.proxy.requests)


def assert_no_retry(rig: Rig, scenario: Callable[[], None], **env: str) -> list[str]:
    """``scenario`` sends exactly the same requests with ATTEMPTS tries allowed as with one,
    and logs no retry: nothing was tried again. Returns the requests."""
    once = requests_with_attempts(rig, 1, scenario, **env)
    rig.caplog.clear()
    allowed = requests_with_attempts(rig, ATTEMPTS, scenario, **env)
    assert once, "the scenario sent no request: the count shows nothing"
    assert allowed == once, (once, allowed)
    assert rig.retries() == []
    return once


def test_missing_container_fails_at_once_without_retry(rig: Rig, tmp_path: Path):
    """A missing bucket/container is a configuration error: load and save raise
    ContainerNotFoundError naming the bucket, on the first try: the same requests reach the
    server with 4 tries allowed as with 1."""
    missing = rig.server.missing_container_uri
    bucket = missing.split("://", 1)[1]

    def scenario() -> None:
        with fc.Checkpoint(f"{missing}/a/next", f"{missing}/a/ckpt") as cp:
            with pytest.raises(ContainerNotFoundError, match=bucket):
                cp.load_sync()
            with pytest.raises(ContainerNotFoundError, match=bucket):
                cp.save_sync(b"state")

    sent = assert_no_retry(rig, scenario)
    assert all(bucket in r for r in sent), sent


def test_access_denied_fails_at_once_without_retry(rig: Rig, tmp_path: Path):
    """Credentials the server refuses: load and save raise CheckpointPermissionError on the first
    try: the same requests reach the server with 4 tries allowed as with 1. S3: moto with
    authentication switched on; Azure: Azurite with a wrong account key; GCS: the emulator
    authenticates nothing, so a stand-in server answers 403 (and counts the requests itself)."""
    uri = f"{rig.root}/ckpt"
    rig.direct.write_bytes(uri, b"exists")

    def scenario() -> None:
        with fc.Checkpoint(uri, uri) as cp:
            with pytest.raises(CheckpointPermissionError):
                cp.load_sync()
            with pytest.raises(CheckpointPermissionError):
                cp.save_sync(b"new state")

    if rig.server.name == "gcs":
        # the emulator authenticates nothing: a stand-in on 127.0.0.1 answers every request 403
        counts = []
        with _DenyingServer() as deny:
            for attempts in (1, ATTEMPTS):
                before = deny.requests
                rig.use(attempts=attempts, STORAGE_EMULATOR_HOST=deny.url)
                scenario()
                counts.append(deny.requests - before)
        assert counts[0] >= 2 and counts[1] == counts[0], counts  # load and save: one try each
        assert rig.retries() == []
        return
    if rig.server.name == "azure":
        import base64

        bad_key = base64.b64encode(b"not-the-account-key-" * 3).decode()
        env = rig.server.env_for(rig.proxy.url, CALM_TIMEOUT)
        good = env["AZURE_STORAGE_CONNECTION_STRING"]
        bad = re.sub(r"AccountKey=[^;]*", f"AccountKey={bad_key}", good)
        assert_no_retry(rig, scenario, AZURE_STORAGE_CONNECTION_STRING=bad)
        assert bad_key not in "\n".join(r.getMessage() for r in rig.caplog.records)
        return
    _moto_auth(rig.server.upstream, "0")  # moto now checks every request's credentials
    try:
        assert_no_retry(rig, scenario, AWS_ACCESS_KEY_ID="AKIAUNKNOWNKEY000000")
    finally:
        _moto_auth(rig.server.upstream, "inf")


class _DenyingServer:
    """An HTTP server on 127.0.0.1 that answers every request 403 with a GCS-style error body."""

    def __init__(self) -> None:
        import http.server
        import threading

        outer = self
        self.requests = 0
        lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            def _deny(self) -> None:
                with lock:
                    outer.requests += 1
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                body = b'{"error": {"code": 403, "message": "Access denied.", "errors": []}}'
                self.send_response(403)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = do_PATCH = _deny

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05})

    def __enter__(self) -> _DenyingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(HANG_GUARD)


def _moto_auth(endpoint: str, count: str) -> None:
    from flyte_checkpoint_s3_tests.server import moto_auth

    moto_auth(endpoint, count)


# --------------------------------------------------------------------------- SDK retries

#: Each plugin's setting for its SDK's retries of one request: the variable, a value, and how
#: many requests one always-failing request then makes.
SDK_RETRY_SETTINGS = {
    "s3": ("FLYTE_CHECKPOINT_S3_REQUEST_ATTEMPTS", "3", 3),  # tries in all
    "azure": ("FLYTE_CHECKPOINT_AZURE_REQUEST_ATTEMPTS", "3", 3),  # tries in all
    "gcs": ("FLYTE_CHECKPOINT_GCS_REQUEST_ATTEMPTS", "3", 3),  # tries in all
}
#: The request reached the server (it began to answer); the answer is cut after one byte.
CUT_ANSWER = Fault.reset("down", after=1)


def test_sdk_retry_setting_is_the_number_of_requests_sent(rig: Rig):
    """The plugin's SDK retry setting is what reaches the server: a metadata request whose
    answer is always cut is sent exactly N times, counted at the proxy (S3 REQUEST_ATTEMPTS=3: 3;
    Azure REQUEST_ATTEMPTS=3: 3; GCS REQUEST_ATTEMPTS=3: 3), then the store raises TransientError."""
    name, value, expected = SDK_RETRY_SETTINGS[rig.server.name]
    uri = f"{rig.root}/ckpt"
    rig.direct.write_bytes(uri, b"exists")
    rig.use(**{name: value})
    rig.proxy.fail(CUT_ANSWER)
    with pytest.raises(TransientError):
        store_for(uri).stat(uri)
    assert len(rig.requests_for()) == expected, rig.requests_for()
    assert rig.proxy.fired == expected == rig.proxy.connections  # one cut answer per request


def test_sdk_retries_by_default_recover_one_cut_answer(rig: Rig):
    """With each plugin's default SDK retries (S3 3 tries, Azure 3 retries, GCS 3 tries), a
    metadata request whose first answer is cut succeeds without the core: exactly 2 requests
    reached the server."""
    name, _value, _expected = SDK_RETRY_SETTINGS[rig.server.name]
    uri = f"{rig.root}/ckpt"
    rig.direct.write_bytes(uri, b"exists")
    rig.use(**{name: None})
    rig.proxy.fail(CUT_ANSWER, times=1)
    assert store_for(uri).stat(uri) == 6
    assert len(rig.requests_for()) == 2, rig.requests_for()
    assert rig.proxy.fired == 1


#: Reads of one small object's body when every answer is cut mid-body, before the store
#: gives up: S3 reads once (the core retries), whatever the SDK retry setting; GCS reads it
#: REQUEST_ATTEMPTS times (the SDK resumes a cut download as a retry of that request);
#: azure-storage-blob re-reads a cut body itself, whatever the setting.
BODY_READS: dict[str, int | dict[str, int]] = {"s3": 1, "gcs": {"off": 1, "default": 3}, "azure": 3}


@pytest.mark.parametrize("sdk_retries", ["off", "default"])
def test_a_body_cut_mid_way_is_read_a_fixed_number_of_times(rig: Rig, sdk_retries: str):
    """A 300 KB object whose every answer is cut 100,000 bytes in: the store reads the body
    exactly BODY_READS times (each read's cut counted at the proxy) and raises TransientError,
    with the plugin's SDK retries off and at their default (Azure: "3 re-reads whatever
    REQUEST_ATTEMPTS says"; GCS: as many reads as its REQUEST_ATTEMPTS)."""
    uri = f"{rig.root}/ckpt"
    rig.direct.write_bytes(uri, random.Random(13).randbytes(300_000))
    name = SDK_RETRY_SETTINGS[rig.server.name][0]
    rig.use(attempts=1, **({name: None} if sdk_retries == "default" else {}))
    rig.proxy.fail(Fault.reset("down", after=MID_BODY))
    with pytest.raises(TransientError), store_for(uri).open_read(uri) as f:
        f.read()
    reads = BODY_READS[rig.server.name]
    expected = reads[sdk_retries] if isinstance(reads, dict) else reads
    assert rig.proxy.fired == expected, rig.requests_for()


# --------------------------------------------------------------------------- the policy itself


class _Flaky:
    def __init__(self, fails: int) -> None:
        self.fails = fails
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.fails:
            raise TransientError("flaky")
        return "ok"


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record the retry policy's pauses instead of sleeping them (on a :class:`PauseClock`)."""
    import flyte_checkpoint.util.retry as retry_module

    clock = PauseClock()
    monkeypatch.setattr(retry_module, "clock", clock)
    return clock.sleeps


def test_backoff_is_exponential_with_full_jitter_and_bounded(sleeps: list[float]):
    """Over 400 failing operations: pause n lies in [0, min(max, base x 2^(n-1))], the bounds
    double, pauses vary (jitter: many distinct values, mean near half the bound), and the
    number of tries is exactly ``attempts``."""
    policy = RetryPolicy(attempts=5, base_delay=0.1, max_delay=0.5, total_timeout=1e9)
    by_try: dict[int, list[float]] = {1: [], 2: [], 3: [], 4: []}
    for _ in range(400):
        flaky = _Flaky(fails=100)
        sleeps.clear()
        with pytest.raises(TransientError, match="failed after 5 tries"):
            policy.call(flaky, "op")
        assert flaky.calls == 5 and len(sleeps) == 4
        for n, pause in enumerate(sleeps, start=1):
            by_try[n].append(pause)
    caps = {1: 0.1, 2: 0.2, 3: 0.4, 4: 0.5}
    for n, pauses in by_try.items():
        assert max(pauses) <= caps[n] and min(pauses) >= 0
        assert len(set(pauses)) > 350  # jittered, not a fixed schedule
        mean = sum(pauses) / len(pauses)
        assert 0.35 * caps[n] < mean < 0.65 * caps[n], (n, mean)  # uniform over [0, cap]
        assert max(pauses) > 0.8 * caps[n]  # the bound grows as it should


def test_retry_env_vars_set_the_policy(monkeypatch: pytest.MonkeyPatch, sleeps: list[float]):
    """FLYTE_CHECKPOINT_RETRY_ATTEMPTS/_BASE_DELAY/_MAX_DELAY/_TOTAL_TIMEOUT are honoured;
    a non-transient error is raised on the first try."""
    monkeypatch.setenv("FLYTE_CHECKPOINT_RETRY_ATTEMPTS", "3")
    monkeypatch.setenv("FLYTE_CHECKPOINT_RETRY_BASE_DELAY", "0.01")
    monkeypatch.setenv("FLYTE_CHECKPOINT_RETRY_MAX_DELAY", "0.02")
    monkeypatch.setenv("FLYTE_CHECKPOINT_RETRY_TOTAL_TIMEOUT", "7")
    policy = RetryPolicy.from_env()
    assert policy == RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.02, total_timeout=7)
    flaky = _Flaky(fails=10)
    with pytest.raises(TransientError):
        policy.call(flaky, "op")
    assert flaky.calls == 3 and all(0 <= s <= 0.02 for s in sleeps)
    assert policy.call(_Flaky(fails=2), "op") == "ok"

    def denied() -> Any:
        denied.calls += 1  # type: ignore[attr-defined]
        raise CheckpointPermissionError("no")

    denied.calls = 0  # type: ignore[attr-defined]
    with pytest.raises(CheckpointPermissionError):
        policy.call(denied, "op")
    assert denied.calls == 1  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- a short read


class _ShortReads(BlobStore):
    """``shortread:///path`` is the local file ``/path``, but its reads end early (a clean EOF),
    as a truncating network might deliver to an SDK that does not check the length."""

    def __init__(self, inner: BlobStore, keep: int) -> None:
        self.inner, self.keep = inner, keep
        self.opens = 0

    @staticmethod
    def _local(uri: str) -> str:
        return "file://" + uri.split("://", 1)[1]

    def open_read(self, uri: str):
        self.opens += 1
        data = self.inner.read_bytes(self._local(uri))
        return io.BytesIO(data[: self.keep])

    def open_write(self, uri: str):
        return self.inner.open_write(self._local(uri))

    def stat(self, uri: str) -> int | None:
        return self.inner.stat(self._local(uri))

    def delete(self, uri: str) -> None:
        self.inner.delete(self._local(uri))

    def list(self, prefix: str):
        return self.inner.list(self._local(prefix))


@pytest.mark.parametrize("kind", ["tar.gz", "payload"])
def test_a_body_shorter_than_stat_is_retried_and_never_restores_a_partial_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
):
    """restore() compares the bytes read with stat's size: a body that ends early raises
    TransientError or CorruptCheckpointError (retried or reported), and the workspace holds
    nothing, for a tarball and for a payload."""
    from flyte_checkpoint.storage.registry import register_store, unregister_store

    local = store_for(str(tmp_path / "x"))
    obj = tmp_path / "obj"
    if kind == "tar.gz":
        blob = tarball_of(make_tree(tmp_path / "tree", 11), tmp_path)
    else:
        blob = random.Random(12).randbytes(300_000)
    obj.write_bytes(blob)
    short = _ShortReads(local, keep=len(blob) - 1000)
    register_store("short-reads", ("shortread",), lambda: short)
    monkeypatch.setenv("FLYTE_CHECKPOINT_RETRY_ATTEMPTS", "3")
    monkeypatch.setenv("FLYTE_CHECKPOINT_RETRY_BASE_DELAY", "0")
    try:
        with fc.Checkpoint(str(tmp_path / "dest"), f"shortread://{obj}") as cp:
            with pytest.raises((TransientError, CorruptCheckpointError)) as info:
                cp.load_sync()
            assert list(cp.path.iterdir()) == []
        if kind == "payload":  # a raw payload can only be caught by the length check
            assert isinstance(info.value, TransientError) and "store reported" in str(info.value)
            assert short.opens == 3  # retried, as a cut connection should be
        assert short.opens >= 1
        assert isinstance(info.value, CheckpointError)
    finally:
        unregister_store("short-reads")
