"""The FTP backend written from CONTRIBUTING.md alone (ftp_backend/) passes BlobStoreSuite,
CheckpointSuite, RequestFaultSuite (with ContainerSuite) and CrashSuite against pyftpdlib on
127.0.0.1 (see ftp_classes.py for why not FaultSuite)."""

import pytest

from flyte_checkpoint.errors import StoreError
from flyte_checkpoint.storage.blobstore import BlobStore

from .ftp_classes import FtpSuites, ftp_server  # noqa: F401 - the module's server fixture


class TestFtpStore(FtpSuites):
    def test_an_object_under_an_objects_name_is_a_store_error(
        self, store: BlobStore, store_root: str
    ) -> None:
        """FTP names a file or a folder, not both: a write of ``a/b`` over an object ``a`` is a
        StoreError saying so (it was NotFoundError, "no object", from a write), and ``a`` stays."""
        store.write_bytes(f"{store_root}/a", b"first")
        with pytest.raises(StoreError, match="a part of its path is an object"):
            store.write_bytes(f"{store_root}/a/b", b"second")
        assert store.read_bytes(f"{store_root}/a") == b"first"
        assert store.stat(f"{store_root}/a/b") is None
