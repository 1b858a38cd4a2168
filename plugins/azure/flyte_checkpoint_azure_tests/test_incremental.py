"""Incremental folder saves on Azure (issue 18): unchanged files become Put Block From URL
blocks; the bytes that go up are counted at a proxy in front of Azurite (the core's
``IncrementalSuite``)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from flyte_checkpoint_azure.uris import parse

from flyte_checkpoint.testing import IncrementalSuite, StoreRecipe

from .helpers import BUCKET, fault_store
from .server import AzureServer

pytestmark = pytest.mark.integration


class TestAzureIncremental(IncrementalSuite):
    """Blocks of 1 MiB, files of 3 MiB: no minimum block, so a rename sends no data either.
    Azurite refuses a copy from a replaced source itself (``x-ms-source-if-match``: 412).
    Staged blocks cannot be deleted alone: a failed or killed save leaves them uncommitted
    (invisible) until the blob's next commit drops them, which ``pieces_left`` checks."""

    replaced_detail = "Azure answered 412"
    abort_removes_pieces = False

    @pytest.fixture
    def store_recipe(self, azure_server: AzureServer) -> StoreRecipe:
        return StoreRecipe(azure_server.endpoint, fault_store)

    @pytest.fixture
    def store_root(self, azure_env: AzureServer) -> str:
        return f"az://{BUCKET}/{uuid.uuid4().hex}"

    def pieces_left(self, server: Any, uri: str) -> list[Any]:
        return list(server.client.blob(parse(uri)).get_block_list("uncommitted")[1])


def test_copied_blocks_store_no_md5(azure_env: AzureServer, make_store, prefix: str) -> None:
    """MD5 cannot be combined from blocks: an object with copied blocks is committed without
    one (a stale or wrong MD5 would fail every read), one without copies keeps it."""
    store = make_store()
    src, dest = f"az://{BUCKET}/{prefix}/src", f"az://{BUCKET}/{prefix}/dest"
    store.write_bytes(src, bytes(range(256)) * 4096)
    assert store.client.blob(parse(src)).get_blob_properties().content_settings.content_md5
    source = store.copy_source(src)
    with store.open_write(dest) as w:
        w.write(b"head" * 1000)
        w.copy(source, 0, source.size)
    assert store.client.blob(parse(dest)).get_blob_properties().content_settings.content_md5 is None
    assert store.read_bytes(dest) == b"head" * 1000 + bytes(range(256)) * 4096
