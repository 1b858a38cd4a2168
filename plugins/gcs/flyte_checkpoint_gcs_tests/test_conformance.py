"""The core's conformance suites against the emulator."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from flyte_checkpoint_gcs.store import GCSStore

from flyte_checkpoint.storage.blobstore import BlobStore
from flyte_checkpoint.storage.registry import get_registry
from flyte_checkpoint.testing import BlobStoreSuite, CheckpointSuite, CrashSuite, FaultSuite, StoreRecipe

from .helpers import BUCKET, CHUNK, MISSING_BUCKET, RecordingSession, fault_store, make_store
from .server import GCSServer

#: Crosses 20 upload chunks and 14 read ranges with the small sizes of ``STORE_ENV``.
LARGE = 5 * 1024 * 1024 + 123


class TestGcsConformance(BlobStoreSuite, CheckpointSuite):
    """``gs://`` through the registry (the installed entry point), parallel ranged reads."""

    large_object_size = LARGE
    delete_many_count = 250  # three batches of 100: the emulator writes 1,003 objects slowly

    @pytest.fixture
    def store(self, gcs_server: GCSServer) -> BlobStore:
        store = get_registry().store_for(f"gs://{BUCKET}/x")
        assert isinstance(store, GCSStore)
        assert store.config.part_size == CHUNK
        return store

    @pytest.fixture
    def store_root(self, gcs_server: GCSServer) -> str:
        return f"gs://{BUCKET}/{uuid.uuid4().hex}"


class TestGcsAliasSerialConformance(BlobStoreSuite):
    """``gcs://`` on a store built directly, reading one range at a time, SDK retries on."""

    large_object_size = LARGE
    delete_many_count = 250  # three batches of 100: the emulator writes 1,003 objects slowly

    @pytest.fixture
    def store(self, gcs_server: GCSServer) -> Iterator[BlobStore]:
        store = make_store(gcs_server.endpoint, read_concurrency=1, request_attempts=3)
        yield store
        store.close()

    @pytest.fixture
    def store_root(self, gcs_server: GCSServer) -> str:
        return f"gcs://{BUCKET}/{uuid.uuid4().hex}"


class TestGcsFaults(FaultSuite, CrashSuite):
    """Through the fault proxy in front of the emulator, and a child process killed mid-upload."""

    @pytest.fixture
    def store_recipe(self, gcs_server: GCSServer) -> StoreRecipe:
        return StoreRecipe(gcs_server.endpoint, fault_store, missing_container=f"gs://{MISSING_BUCKET}/ckpt")

    @pytest.fixture
    def store_root(self, gcs_server: GCSServer) -> str:
        return f"gs://{BUCKET}/{uuid.uuid4().hex}"


def test_list_details_comes_from_the_listing_alone(gcs_server: GCSServer) -> None:
    """Native: sizes and modification times come with the listing, one request per listing
    (counted at the session) and none per object, recursive or one level with folders."""
    session = RecordingSession()
    store = make_store(gcs_server.endpoint, session=session)
    root = f"gs://{BUCKET}/{uuid.uuid4().hex}"
    for name, data in {"a/1": b"1", "a/2/x": b"22", "b": b"333"}.items():
        store.write_bytes(f"{root}/{name}", data)
    session.calls.clear()
    every = list(store.list_details(root + "/"))
    assert [(i.uri, i.size, i.is_folder) for i in every] == [
        (f"{root}/a/1", 1, False),
        (f"{root}/a/2/x", 2, False),
        (f"{root}/b", 3, False),
    ]
    assert all(i.modified is not None and i.modified.tzinfo is not None for i in every)
    top = [(i.uri, i.size, i.is_folder) for i in store.list_details(root + "/", recursive=False)]
    assert top == [(f"{root}/a/", None, True), (f"{root}/b", 3, False)]
    listings = session.find("GET", f"/b/{BUCKET}/o?")
    assert len(session.calls) == len(listings) == 2, [c.url for c in session.calls]
    assert "delimiter" not in listings[0].url and "delimiter=%2F" in listings[1].url
    store.close()
