"""The folder store's settings: from the environment, from configure_store, per URI prefix."""

import pytest
from fc_example_store.config import FolderConfig
from fc_example_store.store import FolderStore

from flyte_checkpoint import configure_store
from flyte_checkpoint.errors import ConfigurationError, InvalidURIError
from flyte_checkpoint.storage import store_for


@pytest.fixture(autouse=True)
def unconfigured():
    yield
    configure_store("folder://archive/")
    configure_store("folder")


def test_root_from_the_environment_then_the_default(monkeypatch, tmp_path):
    monkeypatch.setenv("FLYTE_CHECKPOINT_FOLDER_ROOT", str(tmp_path))
    assert FolderStore().root == tmp_path
    assert FolderConfig.resolve(env={}).root == "/tmp/folder-store"
    assert FolderStore(root="/elsewhere").root.as_posix() == "/elsewhere"  # an argument beats both


def test_one_prefix_has_its_own_root(tmp_path):
    for bucket in ("main/runs", "cold/archive"):  # buckets exist before they are written to
        (tmp_path / bucket).mkdir(parents=True)
    configure_store("folder", root=str(tmp_path / "main"))
    configure_store("folder://archive/", root=str(tmp_path / "cold"))
    store_for("folder://runs/a").write_bytes("folder://runs/a", b"hot")
    store_for("folder://archive/a").write_bytes("folder://archive/a", b"cold")
    assert (tmp_path / "main" / "runs" / "a").read_bytes() == b"hot"
    assert (tmp_path / "cold" / "archive" / "a").read_bytes() == b"cold"
    assert list(store_for("folder://archive/").list("folder://archive/")) == ["folder://archive/a"]


def test_bad_settings_are_refused_when_given():
    with pytest.raises(ConfigurationError, match=r"no setting 'rot' \(did you mean 'root'\?\)"):
        configure_store("folder", rot="/data")
    with pytest.raises(InvalidURIError, match="folder:// names no bucket: write folder://NAME/KEY"):
        FolderStore().stat("folder://")
