"""Test classes mixing the suites into the toy stores (test_toy_store.py runs the correct ones;
test_suite_catches.py runs the broken ones in a pytest of their own and reads the failures)."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from flyte_checkpoint.storage.blobstore import BlobStore
from flyte_checkpoint.testing import BlobStoreSuite, CheckpointSuite, CrashSuite, FaultSuite, StoreRecipe

from . import toystore
from .toyserver import toy_server


@pytest.fixture(scope="module")
def toy_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with toy_server(tmp_path_factory.mktemp("toy")) as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def in_place_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with toy_server(tmp_path_factory.mktemp("toy-in-place"), in_place=True) as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def delete_first_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with toy_server(tmp_path_factory.mktemp("toy-delete-first"), replace="delete-first") as endpoint:
        yield endpoint


#: A bucket no toy server has.
MISSING = "toy://no-such-bucket/ckpt"


class _Toy:
    large_object_size = 1024 * 1024 + 7

    @pytest.fixture
    def store_root(self) -> str:
        return f"toy://bucket/{uuid.uuid4().hex}"


class ToyParts(_Toy, BlobStoreSuite, CheckpointSuite, FaultSuite, CrashSuite):
    """The correct toy store, staging 256 KiB parts, reading 64 KiB ranges."""

    @pytest.fixture
    def store_recipe(self, toy_endpoint: str) -> StoreRecipe:
        return StoreRecipe(toy_endpoint, toystore.build_toy, missing_container=MISSING)

    @pytest.fixture
    def store(self, store_recipe: StoreRecipe) -> Iterator[BlobStore]:
        from flyte_checkpoint.storage.registry import register_store, unregister_store

        store = store_recipe.direct()
        register_store("toy", toystore.SCHEMES, lambda **_: store)  # CheckpointSuite resolves toy://
        yield store
        unregister_store("toy")
        store.close()


class ToyWhole(ToyParts):
    """The correct toy store, sending the whole object at the commit (no part size)."""

    @pytest.fixture
    def store_recipe(self, toy_endpoint: str) -> StoreRecipe:
        build = functools.partial(toystore.build_toy, part_size=None)
        return StoreRecipe(toy_endpoint, build, missing_container=MISSING)


# -- broken ------------------------------------------------------------------------------------


class _BrokenToyFaults(_Toy, FaultSuite):
    kind = ""

    @pytest.fixture
    def store_recipe(self, toy_endpoint: str) -> StoreRecipe:
        build = functools.partial(toystore.build_broken, self.kind)
        return StoreRecipe(toy_endpoint, build, missing_container=MISSING)


class BrokenPartsInPlace(_BrokenToyFaults, CrashSuite):
    kind = "PartsInPlace"


class BrokenServerInPlace(_Toy, FaultSuite, CrashSuite):
    @pytest.fixture
    def store_recipe(self, in_place_endpoint: str) -> StoreRecipe:
        return StoreRecipe(in_place_endpoint, functools.partial(toystore.build_toy, part_size=None))


class BrokenDeniedIsAbsent(_BrokenToyFaults):
    kind = "DeniedIsAbsent"


class BrokenServerErrorsIgnored(_BrokenToyFaults):
    kind = "ServerErrorsIgnored"


class BrokenMissingBucketIsAbsent(_BrokenToyFaults):
    kind = "MissingBucketIsAbsent"


class BrokenStatErrorsAbsent(_BrokenToyFaults):
    kind = "StatErrorsAbsent"


class _BrokenToyBlobs(_Toy, BlobStoreSuite):
    kind = ""

    @pytest.fixture
    def store(self, toy_endpoint: str) -> Iterator[BlobStore]:
        store = toystore.build_broken(self.kind, toy_endpoint)
        yield store
        store.close()


class BrokenLastPartDropped(_BrokenToyBlobs):
    kind = "LastPartDropped"


class BrokenShortReads(_BrokenToyBlobs):
    kind = "ShortReads"


class BrokenPrefixAsFolder(_BrokenToyBlobs):
    kind = "PrefixAsFolder"

    @pytest.fixture
    def root(self, store: BlobStore, store_root: str) -> str:
        return store_root  # its listing of any root holds other tests' objects: not checked here


class BrokenViewKept(_BrokenToyBlobs):
    kind = "ViewKept"


class BrokenUnquotedKeys(_BrokenToyBlobs):
    kind = "UnquotedKeys"


class BrokenReplaceDeletesFirst(_Toy, BlobStoreSuite):
    @pytest.fixture
    def store(self, delete_first_endpoint: str) -> Iterator[BlobStore]:
        store = toystore.build_toy(delete_first_endpoint)
        yield store
        store.close()


# Only the readers' test can see a replace that deletes first: every other test that overwrites
# an object would wait, at each overwrite, for a reader that never comes (the hang guard).
for _name in dir(BlobStoreSuite):
    if _name.startswith("test_") and _name != "test_readers_see_one_whole_version_during_overwrites":
        setattr(BrokenReplaceDeletesFirst, _name, None)  # pytest collects only callables


class _Memory(BlobStoreSuite):
    large_object_size = 1024 * 1024 + 7

    @pytest.fixture
    def store_root(self) -> str:
        return f"memory://conformance/{uuid.uuid4().hex}"


class BrokenUnsortedList(_Memory):
    @pytest.fixture
    def store(self) -> BlobStore:
        return toystore.UnsortedList()


class BrokenPrefixIgnored(_Memory):
    @pytest.fixture
    def store(self, tmp_path: Path) -> BlobStore:
        toystore.PrefixIgnored().write_bytes("memory://conformance-elsewhere/object", b"x")
        return toystore.PrefixIgnored()


class BrokenFileInPlace(CrashSuite):
    @pytest.fixture
    def store_recipe(self) -> StoreRecipe:
        return StoreRecipe(None, toystore.build_file_in_place)

    @pytest.fixture
    def store_root(self, tmp_path: Path) -> str:
        return str(tmp_path / "store")
