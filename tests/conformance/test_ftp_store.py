"""The FTP backend written from CONTRIBUTING.md alone (ftp_backend/) passes the suites, against
pyftpdlib on 127.0.0.1.

FaultSuite is not mixed in: its FaultProxy speaks HTTP (it frames and answers HTTP requests) and
FTP's data connections go to ports the server names, around any proxy of the control
connection. ``test_ftp_faults.py`` puts faults at each FTP request inside the server instead.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flyte_checkpoint.storage.blobstore import BlobStore
from flyte_checkpoint.testing import BlobStoreSuite, CheckpointSuite, ContainerSuite, CrashSuite, StoreRecipe

from .ftp_backend import server
from .ftp_backend.store import FtpStore

#: Small parts, so that a few MiB cross many of them (the suite tests around them).
SMALL: dict[str, Any] = {"part_size": 256 * 1024, "timeout": 20.0}
MISSING = "ftpstore://no-such-bucket/ckpt"


def build_ftp(endpoint: str, _upstream: object = None, **settings: Any) -> FtpStore:
    """A store of the server at ``endpoint`` (module level: CrashSuite's child unpickles it)."""
    base = {"endpoint": endpoint, "user": server.USER, "password": server.PASSWORD}
    return FtpStore(**{**base, **SMALL, **settings})


@pytest.fixture(scope="module")
def ftp_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root: Path = tmp_path_factory.mktemp("ftp")
    (root / "bucket").mkdir()
    with server.ftp_server(root) as srv:
        yield srv.endpoint


class TestFtpStore(BlobStoreSuite, CheckpointSuite, ContainerSuite, CrashSuite):
    large_object_size = 3 * 256 * 1024 + 5

    @pytest.fixture
    def store_recipe(self, ftp_endpoint: str) -> StoreRecipe:
        # No upstream: the crash test kills the child on its own report (no proxy can follow FTP)
        return StoreRecipe(None, functools.partial(build_ftp, ftp_endpoint), missing_container=MISSING)

    @pytest.fixture
    def store(self, ftp_endpoint: str) -> Iterator[BlobStore]:
        from flyte_checkpoint.storage.registry import register_store, unregister_store

        store = build_ftp(ftp_endpoint)
        register_store("ftpstore", ("ftpstore",), lambda **_: store)  # CheckpointSuite resolves ftpstore://
        yield store
        unregister_store("ftpstore")
        store.close()

    @pytest.fixture
    def store_root(self) -> str:
        return f"ftpstore://bucket/{uuid.uuid4().hex}"
