"""Test classes mixing the suites into the FTP store written from CONTRIBUTING.md alone
(ftp_backend/), and into each variant with a planted bug (ftp_backend/planted.py).

test_ftp_store.py runs the correct one; test_ftp_catches.py runs the planted ones in a pytest
of their own and reads the failures. FaultSuite is not mixed in: its FaultProxy speaks HTTP (it
frames and answers HTTP requests) and FTP's data connections go to ports the server names,
around any proxy of the control connection. RequestFaultSuite puts the same faults at each
request through the test server's own injection (server.py); the crash test kills its child
on the child's own report (``StoreRecipe(None, ...)``).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from flyte_checkpoint.storage.blobstore import BlobStore
from flyte_checkpoint.testing import (
    BlobStoreSuite,
    CheckpointSuite,
    CrashSuite,
    RequestFaultSuite,
    StoreRecipe,
)

from .ftp_backend import server
from .ftp_backend.planted import PLANTED, build_planted
from .ftp_backend.store import FtpStore

#: Small parts, so that a few MiB cross many of them (the suite tests around them).
SMALL: dict[str, Any] = {"part_size": 256 * 1024, "timeout": 20.0}
MISSING = "ftpstore://no-such-bucket/ckpt"


def build_ftp(endpoint: str, _upstream: object = None, **settings: Any) -> FtpStore:
    """A store of the server at ``endpoint`` (module level: CrashSuite's child unpickles it)."""
    base = {"endpoint": endpoint, "user": server.USER, "password": server.PASSWORD}
    return FtpStore(**{**base, **SMALL, **settings})


@pytest.fixture(scope="class")  # a class's store may break the server's state for the next
def ftp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[server.FtpServer]:
    root: Path = tmp_path_factory.mktemp("ftp")
    (root / "bucket").mkdir()
    with server.ftp_server(root) as srv:
        yield srv


class FtpSuites(BlobStoreSuite, CheckpointSuite, RequestFaultSuite, CrashSuite):
    """The suites on the FTP store (``kind``: a planted bug's name, or "" for none)."""

    kind: ClassVar[str] = ""
    large_object_size = 3 * 256 * 1024 + 5

    def builder(self, endpoint: str) -> Callable[..., FtpStore]:
        if self.kind:
            return functools.partial(build_planted, self.kind, endpoint)
        return functools.partial(build_ftp, endpoint)

    @pytest.fixture
    def store_recipe(self, ftp_server: server.FtpServer) -> StoreRecipe:
        build = self.builder(ftp_server.url)
        return StoreRecipe(None, build, missing_container=MISSING, commit="^RNTO ", injector=ftp_server)

    @pytest.fixture
    def store(self, ftp_server: server.FtpServer) -> Iterator[BlobStore]:
        from flyte_checkpoint.storage.registry import register_store, unregister_store

        store = self.builder(ftp_server.url)()
        register_store("ftpstore", ("ftpstore",), lambda **_: store)  # CheckpointSuite resolves ftpstore://
        yield store
        unregister_store("ftpstore")
        store.close()

    @pytest.fixture
    def store_root(self) -> str:
        return f"ftpstore://bucket/{uuid.uuid4().hex}"


#: A class per planted bug: ``Planted<kind>`` (not collected here: its name is not Test*).
for _kind in PLANTED:
    globals()[f"Planted{_kind}"] = type(f"Planted{_kind}", (FtpSuites,), {"kind": _kind})
