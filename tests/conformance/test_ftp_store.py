"""The FTP backend written from CONTRIBUTING.md alone (ftp_backend/) passes BlobStoreSuite,
CheckpointSuite, RequestFaultSuite (with ContainerSuite) and CrashSuite against pyftpdlib on
127.0.0.1 (see ftp_classes.py for why not FaultSuite)."""

from .ftp_classes import FtpSuites, ftp_server  # noqa: F401 - the module's server fixture


class TestFtpStore(FtpSuites):
    pass
