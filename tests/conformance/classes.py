"""Test classes mixing the suites into the toy stores (test_toy_store.py runs the correct ones;
test_suite_catches.py runs the broken ones in a pytest of their own and reads the failures)."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from flyte_checkpoint.storage.blobstore import BlobStore
from flyte_checkpoint.testing import BlobStoreSuite, CrashSuite, FaultSuite, StoreRecipe

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


class _Toy:
    large_object_size = 1024 * 1024 + 7

    @pytest.fixture
    def store_root(self) -> str:
        return f"toy://bucket/{uuid.uuid4().hex}"


class ToyParts(_Toy, BlobStoreSuite, FaultSuite, CrashSuite):
    """The correct toy store, staging 256 KiB parts."""

    @pytest.fixture
    def store_recipe(self, toy_endpoint: str) -> StoreRecipe:
        return StoreRecipe(toy_endpoint, toystore.build_toy)

    @pytest.fixture
    def store(self, store_recipe: StoreRecipe) -> BlobStore:
        return store_recipe.direct()


class ToyWhole(ToyParts):
    """The correct toy store, sending the whole object at the commit (no part size)."""

    @pytest.fixture
    def store_recipe(self, toy_endpoint: str) -> StoreRecipe:
        return StoreRecipe(toy_endpoint, functools.partial(toystore.build_toy, part_size=None))


# -- broken ------------------------------------------------------------------------------------


class BrokenPartsInPlace(_Toy, FaultSuite, CrashSuite):
    @pytest.fixture
    def store_recipe(self, toy_endpoint: str) -> StoreRecipe:
        return StoreRecipe(toy_endpoint, toystore.build_parts_in_place)


class BrokenServerInPlace(_Toy, FaultSuite, CrashSuite):
    @pytest.fixture
    def store_recipe(self, in_place_endpoint: str) -> StoreRecipe:
        return StoreRecipe(in_place_endpoint, functools.partial(toystore.build_toy, part_size=None))


class BrokenDeniedIsAbsent(_Toy, FaultSuite):
    @pytest.fixture
    def store_recipe(self, toy_endpoint: str) -> StoreRecipe:
        return StoreRecipe(toy_endpoint, toystore.build_denied_is_absent)


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
