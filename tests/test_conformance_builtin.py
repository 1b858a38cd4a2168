"""The shipped conformance suite, run on the built-in stores."""

from __future__ import annotations

import uuid

import pytest

from flyte_checkpoint.errors import NotFoundError, StoreError
from flyte_checkpoint.storage.registry import store_for
from flyte_checkpoint.storage.stores.local import LocalStore
from flyte_checkpoint.storage.stores.memory import MemoryStore
from flyte_checkpoint.testing import (
    BlobStoreSuite,
    CheckpointSuite,
    CopyCheckSuite,
    CopySuite,
    CrashSuite,
    StoreRecipe,
)
from flyte_checkpoint.testing.suite import CAPABILITY_TESTS


class TestLocalStore(BlobStoreSuite, CheckpointSuite, CopySuite, CopyCheckSuite):
    @pytest.fixture
    def store(self):
        return LocalStore()

    @pytest.fixture
    def store_root(self, tmp_path):
        return str(tmp_path / "store")


def local_store(endpoint: None) -> LocalStore:
    """The file store for CrashSuite's recipe (no server: the child is killed mid-write)."""
    return LocalStore()


class TestLocalStoreCrash(CrashSuite):
    """A child SIGKILLed with all but one part written leaves the previous file whole."""

    @pytest.fixture
    def store_recipe(self) -> StoreRecipe:
        return StoreRecipe(None, local_store)

    @pytest.fixture
    def store_root(self, tmp_path):
        return str(tmp_path / "store")


class TestLocalStoreByFileUri(BlobStoreSuite):
    large_object_size = 4 * 1024 * 1024

    @pytest.fixture
    def store(self):
        return store_for("file:///")

    @pytest.fixture
    def store_root(self, tmp_path):
        return str(tmp_path / "store")


class TestMemoryStore(BlobStoreSuite, CheckpointSuite, CopySuite, CopyCheckSuite):
    @pytest.fixture
    def store(self):
        return MemoryStore()

    @pytest.fixture
    def store_root(self):
        return f"memory://suite/{uuid.uuid4().hex}"


# --------------------------------------------------------------------------- the suite itself

UNLISTABLE = """
import uuid

import pytest

from flyte_checkpoint.storage.stores.memory import MemoryStore
from flyte_checkpoint.testing import BlobStoreSuite


class Unlistable(MemoryStore):
    def list(self, prefix):
        raise NotImplementedError("this store cannot list")


class TestUnlistable(BlobStoreSuite):
    supports_list = False
    large_object_size = 1024 * 1024

    @pytest.fixture
    def store(self):
        return Unlistable()

    @pytest.fixture
    def store_root(self):
        return f"memory://unlistable/{uuid.uuid4().hex}"


class TestListableAgain(TestUnlistable):
    supports_list = True

    @pytest.fixture
    def store(self):
        return MemoryStore()
"""


def test_a_store_without_listing_runs_the_suite_without_the_listing_test(pytester: pytest.Pytester):
    """``supports_list = False`` removes the listing test from the class (nothing skips) and no
    other test lists; a subclass that sets it back to True gets the test again."""
    pytester.makepyfile(test_unlistable=UNLISTABLE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v")
    suite_tests = [name for name in dir(BlobStoreSuite) if name.startswith("test_")]
    listing = CAPABILITY_TESTS["supports_list"]
    assert len(listing) == 3  # list, list_details, and siblings that share a name prefix
    result.assert_outcomes(passed=2 * len(suite_tests) - len(listing))
    out = result.stdout.str()
    assert "TestUnlistable::test_list_by_prefix" not in out
    assert "TestUnlistable::test_list_details" not in out
    assert "TestListableAgain::test_list_by_prefix PASSED" in out
    assert "TestUnlistable::test_delete PASSED" in out


class _RawKeyError(MemoryStore):
    def open_read(self, uri):
        raise KeyError(uri)  # an SDK's own error, not translated


class _WrongKind(MemoryStore):
    def _get(self, uri):
        raise StoreError(f"failed to read {uri}")


class _Unnamed(MemoryStore):
    def _get(self, uri):
        raise NotFoundError("not found")


@pytest.mark.parametrize(
    ("store", "error"),
    [
        (_RawKeyError(), "raised KeyError"),
        (_WrongKind(), "raised StoreError"),
        (_Unnamed(), "names the object"),
    ],
)
def test_the_error_test_fails_a_store_that_raises_other_errors(store, error, tmp_path):
    root = f"memory://suite/{uuid.uuid4().hex}"
    with pytest.raises(AssertionError, match=f"promise broken: .*{error}"):
        BlobStoreSuite.test_errors_are_the_projects_own(TestMemoryStore(), store, root, tmp_path)
    BlobStoreSuite.test_errors_are_the_projects_own(TestMemoryStore(), MemoryStore(), root, tmp_path)
