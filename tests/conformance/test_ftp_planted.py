"""Each bug planted in the FTP store (ftp_backend/planted.py) harms users, shown through a plain
``Checkpoint`` save or load, or a listing; the correct store does not show the harm.

These are the probes of issue 33's last trial: test_ftp_catches.py then shows the suites fail
each planted store, naming the promise.
"""

from __future__ import annotations

import functools
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import CheckpointError, TransientError
from flyte_checkpoint.storage.registry import register_store, unregister_store
from flyte_checkpoint.testing import Fault
from flyte_checkpoint.util.retry import RetryPolicy

from .ftp_backend import server
from .ftp_backend.planted import PLANTED, build_planted
from .ftp_backend.server import matching
from .ftp_backend.store import FtpStore
from .ftp_classes import build_ftp

#: Few, quick retries: a fault the probe puts at every try ends the save in a second.
QUICK = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05, total_timeout=60)


@pytest.fixture(scope="module")
def ftp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[server.FtpServer, Path]]:
    root = tmp_path_factory.mktemp("ftp-probes")
    (root / "bucket").mkdir()
    with server.ftp_server(root) as srv:
        yield srv, root


@dataclass
class Probe:
    """A probe's world: the server, its root folder, a fresh prefix, and a builder of the store
    under test (``build(**settings)``: the planted variant or the correct store)."""

    srv: server.FtpServer
    root: Path
    uri: str
    build: Callable[..., FtpStore]
    stores: list[FtpStore] = field(default_factory=list)

    def use(self, **settings: Any) -> FtpStore:
        """A store built with ``settings``, registered for ``ftpstore://`` (as users get it)."""
        store = self.build(**settings)
        self.stores.append(store)
        unregister_store("ftpstore")
        register_store("ftpstore", ("ftpstore",), lambda **_: store)
        return store

    @property
    def store(self) -> FtpStore:
        return self.stores[-1]


def load(uri: str) -> bytes | None:
    """What the next attempt of a task whose previous checkpoint is ``uri`` restores."""
    cp = fc.Checkpoint(f"ftpstore://bucket/{uuid.uuid4().hex}", uri, retry=QUICK)  # alive: it owns path
    path = cp.load_sync()
    return None if path is None else path.read_bytes()


def save(uri: str, data: bytes) -> None:
    fc.Checkpoint(uri, retry=QUICK).save_sync(data)


def temp_errors_ignored(p: Probe) -> str | None:
    uri = p.uri
    save(uri, b"step 1")
    p.srv.fail_request(matching(r"^RNTO "), Fault.answer(500))  # once (451): a retry goes through
    save(uri, b"step 2")  # returns normally
    got = load(uri)
    return f"save_sync returned normally but the load gave {got!r}" if got != b"step 2" else None


def early_end_accepted(p: Probe) -> str | None:
    """Through ``Checkpoint`` the core compares the bytes read with the size and retries; a
    reader of the store's own stream (a plugin of the user's, a copy tool) gets short data."""
    uri = p.uri
    data = bytes(range(256)) * 2048
    save(uri, data)
    p.srv.fail_request(
        matching(r"^RETR "), Fault.truncate()
    )  # half the file, then the data connection ends cleanly
    try:
        with p.store.open_read(uri) as stream:
            got = stream.read()
    except TransientError:
        return None
    return f"open_read returned {len(got)} of {len(data)} bytes, no error" if got != data else None


def _objects(uris: Iterable[str]) -> list[str]:
    """The checkpoints listed, without their history beside them (each save writes a manifest
    into NAME.fcp-history/: docs/history.md)."""
    return [u for u in uris if ".fcp-history/" not in u]


def prefix_as_folder(p: Probe) -> str | None:
    uri = p.uri
    for name in ("ckpt-1", "ckpt-10"):
        save(f"{uri}/{name}", name.encode())
    listed = _objects(p.store.list(f"{uri}/ckpt-1"))
    return f"ls {uri}/ckpt-1 listed {listed}" if listed != [f"{uri}/ckpt-1", f"{uri}/ckpt-10"] else None


def hidden_listed(p: Probe) -> str | None:
    uri = p.uri
    save(f"{uri}/ckpt", b"old")
    writer = p.store.open_write(f"{uri}/ckpt")
    writer.write(b"x" * (300 * 1024))  # a part went: the hidden file exists, as a killed save leaves it
    try:
        listed = _objects(p.store.list(f"{uri}/"))
    finally:
        writer.abort()
    return f"ls {uri}/ listed {listed}" if listed != [f"{uri}/ckpt"] else None


def missing_container_is_absent(p: Probe) -> str | None:
    try:
        got = load("ftpstore://no-such-bukcet/ckpt")  # a typo in the bucket
    except CheckpointError:
        return None
    return f"a load from a mistyped bucket gave {got!r}: the task starts over from zero"


def mkdir_creates_bucket(p: Probe) -> str | None:
    try:
        save("ftpstore://bukcet/ckpt", b"state")  # a typo in the bucket
    except CheckpointError:
        return None
    finally:
        shutil.rmtree(p.root / "bukcet", ignore_errors=True)
    return "a save to a mistyped bucket returned normally: it made the bucket, elsewhere than the loads look"


def delete_then_rename(p: Probe) -> str | None:
    uri = p.uri
    save(uri, b"step 1")
    p.srv.fail_request(
        matching(r"^RNFR "), Fault.answer(503), times=10**6
    )  # 421  # every try of the save fails
    try:
        with pytest.raises(TransientError):
            save(uri, b"step 2")
    finally:
        p.srv.heal()
    got = load(uri)
    return f"after a failed save the previous checkpoint loads as {got!r}" if got != b"step 1" else None


def fixed_temp_name(p: Probe) -> str | None:
    """Two writers of one object (a zombie attempt and its retry), interleaved."""
    uri = p.uri
    first, second = (p.store.open_write(uri) for _ in range(2))
    first.write(b"A" * (300 * 1024))  # a part of each went: both STORs are open
    second.write(b"B" * (300 * 1024))
    second.close()  # returns normally: B is committed
    try:
        first.close()
    except CheckpointError:
        pass  # the zombie's save fails; its bytes may already be in B's object
    got = load(uri)
    if got not in (b"A" * (300 * 1024), b"B" * (300 * 1024)):  # the last commit wins, whole
        return f"both saves returned or failed, and the load gave a mix of {sorted(set(got or b''))}"
    return None


def range_end_inclusive(p: Probe) -> str | None:
    """Through ``Checkpoint`` the core checks a ranged read's length (a member load goes
    through); a caller of the store's ``read_range`` gets one byte less at the end."""
    uri = p.uri
    save(uri, b"0123456789")
    got = p.store.read_range(uri, 6, 4)
    return f"read_range(6, 4) of b'0123456789' gave {got!r}" if got != b"6789" else None


def denied_is_absent(p: Probe) -> str | None:
    uri = f"ftpstore://bucket/private/{uuid.uuid4().hex}"
    save(uri, b"step 1")
    p.use(user=server.GUEST)  # may not look under /bucket/private
    try:
        got = load(uri)
    except CheckpointError:
        return None
    return f"a load by an account that may not see the object gave {got!r}: the task starts over"


def password_shown(p: Probe) -> str | None:
    uri = p.uri
    wrong = "s3cr3t-ftp-pw-2"  # a mistyped password is a secret too (the real one, nearly)
    p.use(password=wrong)
    try:
        load(uri)
    except CheckpointError as exc:
        return f"the message shows the password: {exc}" if wrong in str(exc) else None
    return None


PROBES: dict[str, Callable[[Probe], str | None]] = {
    "TempErrorsIgnored": temp_errors_ignored,
    "EarlyEndAccepted": early_end_accepted,
    "PrefixAsFolder": prefix_as_folder,
    "HiddenListed": hidden_listed,
    "MissingBucketIsAbsent": missing_container_is_absent,
    "MkdirCreatesBucket": mkdir_creates_bucket,
    "DeleteThenRename": delete_then_rename,
    "FixedTempName": fixed_temp_name,
    "RangeEndInclusive": range_end_inclusive,
    "DeniedIsAbsent": denied_is_absent,
    "PasswordShown": password_shown,
}


@pytest.mark.parametrize("kind", sorted(PLANTED))
def test_the_planted_bug_harms_users_where_the_correct_store_does_not(ftp, kind: str, capsys) -> None:
    srv, root = ftp
    outcomes = {}
    for name, builder in (("correct", build_ftp), (kind, functools.partial(build_planted, kind))):
        probe = Probe(
            srv, root, f"ftpstore://bucket/{uuid.uuid4().hex}", _with_endpoint(builder, srv.endpoint)
        )
        probe.use()
        try:
            outcomes[name] = PROBES[kind](probe)
        finally:
            srv.heal()
            unregister_store("ftpstore")
            for store in probe.stores:
                store.close()
    assert outcomes["correct"] is None, f"setup: the correct store shows the harm too: {outcomes['correct']}"
    assert outcomes[kind] is not None, f"setup: the planted bug {kind} ({PLANTED[kind]}) shows no harm"
    with capsys.disabled():
        print(f"\n{kind}: {outcomes[kind]}")


def _with_endpoint(builder: Callable[..., FtpStore], endpoint: str) -> Callable[..., FtpStore]:
    def build(**settings: Any) -> FtpStore:
        return builder(settings.pop("endpoint", endpoint), **settings)

    return build
