"""Pinned reads on GCS against gcp-storage-emulator.

GCS serves the generation a read asks for, and answers 404 once it is gone. The emulator does
not: a media download ignores ``generation`` (and ``ifGenerationMatch``) and serves the object
there now, and sends no ``x-goog-generation`` header to tell which it was. So here the pin
tests are not part of the suite class (``server_honours_pins``); what keeps a load right
against it is the check after a failed read (``changed()`` compares the generation), tested
through the core in tests/test_pinned_reads.py, and the stored CRC32C a whole stream is
checked against. A test below pins the emulator's behaviour down, so that a release that
starts honouring generations is noticed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from flyte_checkpoint_gcs.store import GCSStore

from flyte_checkpoint.storage.blobstore import BlobStore
from flyte_checkpoint.testing import PinnedReadSuite

from .helpers import BUCKET, make_store
from .server import GCSServer


class TestGcsPins(PinnedReadSuite):
    server_honours_pins = False  # see the module docstring

    @pytest.fixture
    def store(self, gcs_server: GCSServer) -> Iterator[BlobStore]:
        store = make_store(gcs_server.endpoint)
        yield store
        store.close()

    @pytest.fixture
    def store_root(self, gcs_server: GCSServer) -> str:
        return f"gs://{BUCKET}/{uuid.uuid4().hex}"


def test_the_emulator_serves_the_object_there_now_whatever_generation_is_asked(
    gcs_server: GCSServer,
) -> None:
    store = make_store(gcs_server.endpoint)
    try:
        assert isinstance(store, GCSStore) and store.supports_pinned_reads
        uri = f"gs://{BUCKET}/{uuid.uuid4().hex}/obj"
        store.write_bytes(uri, b"a" * 1000)
        pinned = store.pin(uri)
        assert pinned is not None and pinned.version
        store.write_bytes(uri, b"b" * 1000)
        assert pinned.changed() is True
        # GCS would answer 404 (ObjectReplacedError); the emulator gives the new bytes
        assert pinned.read_range(0, 10) == b"b" * 10
    finally:
        store.close()
