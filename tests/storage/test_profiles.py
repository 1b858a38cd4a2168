"""Configuration in code: configure_store per process and per URI prefix, through the registry.

A recording factory shows what each store was built with; its config class is a CloudConfig, as
a cloud plugin's is, so precedence over the environment is the kit's real one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import ConfigurationError, InvalidURIError, UnknownSchemeError
from flyte_checkpoint.storage.kit.settings import TEXT, CloudConfig, MiB, setting
from flyte_checkpoint.storage.registry import Registry, StoreSpec, get_registry
from flyte_checkpoint.storage.stores.memory import MemoryStore


@dataclass(frozen=True, repr=False)
class RecConfig(CloudConfig):
    BACKEND: ClassVar[str] = "rec"

    access_key_id: str | None = setting(TEXT, None, doc="Key id.")
    secret_access_key: str | None = setting(TEXT, None, doc="Secret.", secret=True)


class Recorded(MemoryStore):
    """A store that remembers the settings its factory received and whether it was closed."""

    def __init__(self, settings: dict[str, Any]) -> None:
        super().__init__()
        self.settings = settings
        self.config = RecConfig.resolve(**settings)
        self.was_closed = False

    def close(self) -> None:
        self.was_closed = True
        super().close()


BUILT: list[Recorded] = []


def make_store(**settings: Any) -> Recorded:
    store = Recorded(settings)
    BUILT.append(store)
    return store


@pytest.fixture
def reg() -> Registry:
    BUILT.clear()
    registry = Registry(autoload=False)
    registry.register(StoreSpec("rec", ("rec", "recs"), make_store, config=f"{__name__}:RecConfig"))
    registry.register(StoreSpec("plain", ("plain",), MemoryStore))  # no config: takes no settings
    return registry


def built_with(store: Any) -> dict[str, Any]:
    assert isinstance(store, Recorded)
    return store.settings


def test_unconfigured_factory_is_called_without_arguments(reg):
    """A factory written before configure_store existed (no parameters) keeps working."""
    assert built_with(reg.store_for("rec://b/k")) == {}
    assert isinstance(reg.store_for("plain://b/k"), MemoryStore)


def test_two_endpoints_one_prefix_on_premises_every_other_bucket_default(reg):
    reg.configure(
        "rec://onprem/",
        {"endpoint_url": "https://minio.corp:9000", "access_key_id": "AK", "secret_access_key": "SK"},
    )
    onprem = reg.store_for("rec://onprem/run/ckpt")
    aws = reg.store_for("rec://aws-bucket/run/ckpt")
    assert built_with(onprem) == {
        "endpoint_url": "https://minio.corp:9000",
        "access_key_id": "AK",
        "secret_access_key": "SK",
    }
    assert onprem.config.endpoint_url == "https://minio.corp:9000"
    assert built_with(aws) == {} and aws.config.endpoint_url is None
    # one store per matched prefix, shared by every URI under it; list(prefix) matches on its prefix
    assert reg.store_for("rec://onprem/other") is onprem
    assert reg.store_for("rec://onprem/run/") is onprem
    assert reg.store_for("REC://onprem/x") is onprem  # matched on the normalized spelling
    assert reg.store_for("rec://aws-bucket/x") is aws and reg.store_for("rec://third/x") is aws
    assert len(BUILT) == 2


def test_precedence_prefix_then_process_then_environment_then_default(reg, monkeypatch):
    monkeypatch.setenv("FLYTE_CHECKPOINT_REC_PART_SIZE", "1MiB")
    monkeypatch.setenv("FLYTE_CHECKPOINT_REC_READ_RANGE_SIZE", "2MiB")
    reg.configure("rec", {"part_size": "4MiB", "read_concurrency": 3})
    reg.configure("rec://b/", {"part_size": "16MiB"})
    under = reg.store_for("rec://b/k").config
    other = reg.store_for("rec://c/k").config
    assert (under.part_size, under.read_concurrency, under.read_range_size) == (16 * MiB, 3, 2 * MiB)
    assert (other.part_size, other.read_concurrency, other.read_range_size) == (4 * MiB, 3, 2 * MiB)
    assert other.max_concurrency == 8  # the default
    assert built_with(reg.store_for("rec://b/k")) == {"part_size": "16MiB", "read_concurrency": 3}


def test_longest_prefix_wins(reg):
    reg.configure("rec://b/", {"part_size": "2MiB"})
    reg.configure("rec://b/team/", {"part_size": "4MiB"})
    assert built_with(reg.store_for("rec://b/team/run")) == {"part_size": "4MiB"}
    assert built_with(reg.store_for("rec://b/teammate/run")) == {"part_size": "2MiB"}
    assert built_with(reg.store_for("rec://b/k")) == {"part_size": "2MiB"}


def test_a_bucket_prefix_does_not_match_a_longer_bucket_name(reg):
    reg.configure("rec://data", {"part_size": "2MiB"})
    assert built_with(reg.store_for("rec://data/k")) == {"part_size": "2MiB"}
    assert built_with(reg.store_for("rec://data-archive/k")) == {}


def test_reconfiguration_drops_the_backends_stores_without_closing_them(reg):
    first = reg.store_for("rec://b/k")
    plain = reg.store_for("plain://b/k")
    reg.configure("rec", {"part_size": "2MiB"})
    second = reg.store_for("rec://b/k")
    assert second is not first and built_with(second) == {"part_size": "2MiB"}
    assert not first.was_closed  # may still be in use by a save in flight
    assert reg.store_for("plain://b/k") is plain  # another backend's store is kept
    reg.configure("rec", {})  # no settings: the entry is removed
    third = reg.store_for("rec://b/k")
    assert third is not second and built_with(third) == {}
    reg.close()  # closes the stores replaced by a configuration too
    assert first.was_closed and second.was_closed and third.was_closed


def test_settings_are_checked_at_the_call_and_a_refused_one_changes_nothing(reg):
    reg.configure("rec://b/", {"part_size": "2MiB"})
    kept = reg.store_for("rec://b/k")
    with pytest.raises(ConfigurationError) as info:
        reg.configure("rec://b/", {"part_size": "8 megs"})
    assert str(info.value).startswith(
        "configure_store('rec://b/', part_size='8 megs') is not a size: give bytes or a number"
    )
    with pytest.raises(ConfigurationError, match=r"no setting 'part_sise' \(did you mean 'part_size'\?\)"):
        reg.configure("rec", {"part_sise": "2MiB"})
    with pytest.raises(ConfigurationError, match=r"no setting 'bogus' \(configure_store\('rec'\)\)"):
        reg.configure("rec", {"bogus": 1})
    assert reg.store_for("rec://b/k") is kept and built_with(kept) == {"part_size": "2MiB"}


def test_a_prefix_is_checked_against_merged_per_process_settings(reg):
    """What is validated is what the prefix's store will receive."""

    @dataclass(frozen=True, repr=False)
    class Picky(RecConfig):
        def _check(self) -> None:
            if self.read_range_size > self.part_size:
                raise ConfigurationError("read_range_size above part_size")

    reg.register(StoreSpec("rec", ("rec",), make_store, config=Picky))
    reg.configure("rec", {"read_range_size": "32MiB", "part_size": "32MiB"})
    with pytest.raises(ConfigurationError, match="read_range_size above part_size"):
        reg.configure("rec://b/", {"part_size": "16MiB"})


@pytest.mark.parametrize(
    ("target", "error", "text"),
    [
        ("rec://", InvalidURIError, "rec:// names no bucket: write rec://BUCKET/ or rec://BUCKET/PREFIX"),
        ("rec://user:hunter2@b/", InvalidURIError, "carries credentials in the URI"),
        ("nope://b/", UnknownSchemeError, "no backend serves the 'nope' scheme"),
        ("recs", ConfigurationError, "no backend is named 'recs' ('recs://' URIs are served by the 'rec'"),
        ("plain", ConfigurationError, "the 'plain' backend takes no settings in code"),
    ],
)
def test_bad_targets_are_refused_at_the_call(reg, target, error, text):
    with pytest.raises(error) as info:
        reg.configure(target, {"part_size": "2MiB"})
    assert text in str(info.value) and "hunter2" not in str(info.value)


def test_removing_needs_no_config_class(reg):
    reg.configure("plain", {})  # nothing to check: nothing is configured
    assert isinstance(reg.store_for("plain://b/k"), MemoryStore)


def test_the_package_level_function_configures_the_process_registry():
    BUILT.clear()
    fc.register_store("rec", ("rec",), make_store, config=RecConfig)
    try:
        fc.configure_store("rec://onprem/", endpoint_url="https://minio.corp:9000")
        assert built_with(get_registry().store_for("rec://onprem/k")) == {
            "endpoint_url": "https://minio.corp:9000"
        }
        assert built_with(get_registry().store_for("rec://b/k")) == {}
        fc.configure_store("rec://onprem/")
        assert built_with(get_registry().store_for("rec://onprem/k")) == {}
    finally:
        fc.unregister_store("rec")
