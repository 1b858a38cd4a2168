"""The kit's settings: the one parser, the precedence of sources, and the messages of bad values."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flyte_checkpoint.errors import CheckpointError, ConfigurationError
from flyte_checkpoint.storage.kit.settings import (
    CHOICE,
    COUNT,
    FLAG,
    OBJECT,
    SECONDS,
    SIZE,
    TEXT,
    URL,
    CloudConfig,
    KiB,
    MiB,
    StoreConfig,
    describe,
    format_value,
    markdown_table,
    parse,
    setting,
)


@dataclass(frozen=True)
class DemoConfig(CloudConfig):
    """A cloud config as a plugin writes one: shared fields redeclared, its own fields, both hooks."""

    BACKEND: ClassVar[str] = "demo"

    part_size: int = setting(
        SIZE,
        16 * MiB,
        doc="Bytes per chunk.",
        minimum=256 * KiB,
        multiple_of=256 * KiB,
        why="the service takes chunks in multiples of 256KiB",
    )
    checksum: str = setting(CHOICE, "CRC32C", doc="Checksum.", choices=("CRC32C", "NONE"))
    region: str | None = setting(TEXT, None, doc="Region.", env=("DEMO_REGION", "DEMO_DEFAULT_REGION"))
    token: str | None = setting(TEXT, None, doc="A token.", secret=True)
    session: Any = setting(OBJECT, None, doc="An HTTP session.")

    @classmethod
    def _cloud_rules(cls, values, env, sources):
        if "region" not in values and env.get("DEMO_PROFILE_REGION"):
            values["region"], sources["region"] = env["DEMO_PROFILE_REGION"], "profile 'dev'"

    def _check(self) -> None:
        if self.read_range_size > 64 * MiB and self.read_concurrency > 8:
            raise ConfigurationError("read_range_size over 64MiB needs read_concurrency of at most 8")


SHARED = [
    "endpoint_url",
    "anonymous",
    "part_size",
    "max_concurrency",
    "read_range_size",
    "read_concurrency",
    "checksum",
    "verify_checksums",
    "connect_timeout",
    "read_timeout",
    "request_attempts",
    "max_connections",
]


# --- the parser -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("8MiB", 8 * MiB),
        ("8 MiB", 8 * MiB),
        ("8m", 8 * MiB),
        ("8M", 8 * MiB),
        ("8MB", 8 * MiB),  # binary, like every unit here
        ("16K", 16 * KiB),
        ("16kb", 16 * KiB),
        ("1G", 1024 * MiB),
        ("2GiB", 2048 * MiB),
        ("1_048_576", MiB),
        ("512B", 512),
        ("1.5KiB", 1536),
        ("0", 0),
        (4096, 4096),
    ],
)
def test_sizes(raw, want):
    assert parse(SIZE, raw, name="part_size", source="argument") == want


@pytest.mark.parametrize("raw", ["8 megs", "", "MiB", "1.5", "8TiB", "1__0", "-1", "8,5M", 8.0, True, None])
def test_bad_sizes(raw):
    with pytest.raises(ConfigurationError, match=r"is not a size|is negative"):
        parse(SIZE, raw, name="part_size", source="argument")


def test_a_bad_variable_names_the_variable_and_the_fix():
    with pytest.raises(ConfigurationError) as info:
        parse(SIZE, "8 megs", name="part_size", source="FLYTE_CHECKPOINT_S3_PART_SIZE", example=8 * MiB)
    assert str(info.value) == (
        "FLYTE_CHECKPOINT_S3_PART_SIZE='8 megs' is not a size: give bytes or a number with KiB, MiB"
        " or GiB (8MiB)"
    )
    assert isinstance(info.value, ValueError) and isinstance(info.value, CheckpointError)


def test_sources_are_described_as_the_user_wrote_them():
    assert describe("FLYTE_CHECKPOINT_S3_PART_SIZE", "part_size", "x") == "FLYTE_CHECKPOINT_S3_PART_SIZE='x'"
    assert describe("argument", "part_size", "x") == "part_size='x' (argument)"
    assert (
        describe("configure_store('s3://b/')", "part_size", "x")
        == "configure_store('s3://b/', part_size='x')"
    )


@pytest.mark.parametrize(
    ("raw", "want"),
    [("10", 10.0), ("10s", 10.0), (" 10 s ", 10.0), ("500ms", 0.5), ("2m", 120.0), ("1.5s", 1.5), (3, 3.0)],
)
def test_durations(raw, want):
    assert parse(SECONDS, raw, name="read_timeout", source="argument") == want


@pytest.mark.parametrize("raw", ["10h", "ten", "", "-1", "1e3", True])
def test_bad_durations(raw):
    with pytest.raises(
        ConfigurationError, match=r"is not a duration: give seconds \(10 or 10s\)|is negative"
    ):
        parse(SECONDS, raw, name="read_timeout", source="argument")


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        *[("1", True), ("TRUE", True), ("yes", True), ("On", True), (True, True), (1, True)],
        *[("0", False), ("false", False), ("No", False), ("off", False), (False, False), (0, False)],
    ],
)
def test_flags(raw, want):
    assert parse(FLAG, raw, name="anonymous", source="argument") is want


@pytest.mark.parametrize("raw", ["maybe", "", 2, "t"])
def test_bad_flags(raw):
    with pytest.raises(ConfigurationError, match="is not a flag: give true or false"):
        parse(FLAG, raw, name="anonymous", source="argument")


def test_choices_are_case_insensitive_and_come_back_canonical():
    choices = ("CRC32", "CRC32C", "NONE")
    assert parse(CHOICE, " crc32c ", name="checksum", source="argument", choices=choices) == "CRC32C"
    with pytest.raises(ConfigurationError) as info:
        parse(CHOICE, "sha1", name="checksum", source="FLYTE_CHECKPOINT_S3_CHECKSUM", choices=choices)
    assert (
        str(info.value)
        == "FLYTE_CHECKPOINT_S3_CHECKSUM='sha1' is not one of CRC32, CRC32C, NONE: give one of them"
    )


def test_counts_urls_and_text():
    assert parse(COUNT, "1_000", name="n", source="argument") == 1000
    with pytest.raises(ConfigurationError, match=r"n='8.5' \(argument\) is not a whole number"):
        parse(COUNT, "8.5", name="n", source="argument")
    assert (
        parse(URL, " http://127.0.0.1:9000 ", name="endpoint_url", source="argument")
        == "http://127.0.0.1:9000"
    )
    for bad in ("127.0.0.1:9000", "ftp://host", "http://host:port", "https://"):
        with pytest.raises(ConfigurationError, match="is not a URL: give http"):
            parse(URL, bad, name="endpoint_url", source="argument")
    assert parse(TEXT, " eu-west-3 ", name="region", source="argument") == "eu-west-3"
    with pytest.raises(ConfigurationError, match="is not text"):
        parse(TEXT, 3, name="region", source="argument")


def test_constraints_say_the_bound_and_why():
    kw: dict[str, Any] = {
        "name": "max_concurrency",
        "source": "argument",
        "why": "a session takes chunks in order",
    }
    with pytest.raises(ConfigurationError) as info:
        parse(COUNT, 4, minimum=1, maximum=1, **kw)
    assert str(info.value) == (
        "max_concurrency=4 (argument) is above the maximum: give at most 1 (a session takes chunks in order)"
    )
    with pytest.raises(ConfigurationError, match=r"is below the minimum: give at least 256KiB"):
        parse(SIZE, "1K", name="part_size", source="argument", minimum=256 * KiB)
    with pytest.raises(ConfigurationError, match=r"is not a multiple of 256KiB: give a multiple of 256KiB"):
        parse(SIZE, "300K", name="part_size", source="argument", multiple_of=256 * KiB)
    with pytest.raises(ConfigurationError, match="is negative"):
        parse(COUNT, -1, name="n", source="argument")


def test_a_secret_value_never_reaches_the_message():
    with pytest.raises(ConfigurationError) as info:
        parse(SIZE, "hunter2-secret", name="key", source="FLYTE_CHECKPOINT_DEMO_KEY", secret=True)
    assert "hunter2" not in str(info.value) and "FLYTE_CHECKPOINT_DEMO_KEY='<redacted>'" in str(info.value)


#: No deadline (Hypothesis's default is 200 ms an example): a loaded machine's pause is no failure.
UNTIMED = settings(deadline=None)


@UNTIMED
@given(st.integers(min_value=0, max_value=1 << 50))
def test_a_formatted_size_parses_back(n):
    assert parse(SIZE, format_value(SIZE, n), name="s", source="argument") == n


@UNTIMED
@given(st.integers(min_value=0, max_value=10**7))
def test_a_formatted_duration_parses_back(ms):
    assert parse(SECONDS, format_value(SECONDS, ms / 1000), name="s", source="argument") == ms / 1000


# --- configs ----------------------------------------------------------------------------


def test_cloud_config_declares_the_shared_settings_with_generic_defaults():
    config = CloudConfig.resolve(env={})
    assert [f.name for f in dataclasses.fields(CloudConfig)] == SHARED
    assert (config.part_size, config.read_range_size, config.max_concurrency, config.read_concurrency) == (
        8 * MiB,
        8 * MiB,
        8,
        8,
    )
    assert (config.connect_timeout, config.read_timeout, config.request_attempts) == (10.0, 60.0, 3)
    assert (config.endpoint_url, config.anonymous, config.verify_checksums, config.max_connections) == (
        None,
        False,
        True,
        32,
    )


def test_a_redeclared_field_keeps_its_place_and_takes_the_new_default_and_constraints():
    assert [f.name for f in dataclasses.fields(DemoConfig)][: len(SHARED)] == SHARED
    config = DemoConfig.resolve(env={})
    assert config.part_size == 16 * MiB and config.checksum == "CRC32C"
    with pytest.raises(ConfigurationError) as info:
        DemoConfig.resolve(env={"FLYTE_CHECKPOINT_DEMO_PART_SIZE": "300KiB"})
    assert str(info.value) == (
        "FLYTE_CHECKPOINT_DEMO_PART_SIZE='300KiB' is not a multiple of 256KiB: give a multiple of 256KiB"
        " (the service takes chunks in multiples of 256KiB)"
    )
    with pytest.raises(ConfigurationError, match="is not one of CRC32C, NONE"):
        DemoConfig.resolve(env={}, checksum="CRC32")


def test_precedence_argument_variable_aliases_cloud_rule_default():
    env = {
        "FLYTE_CHECKPOINT_DEMO_REGION": "from-ours",
        "DEMO_REGION": "from-alias-1",
        "DEMO_DEFAULT_REGION": "from-alias-2",
        "DEMO_PROFILE_REGION": "from-profile",
    }
    order = [
        ("argument", "from-arg"),
        ("FLYTE_CHECKPOINT_DEMO_REGION", "from-ours"),
        ("DEMO_REGION", "from-alias-1"),
        ("DEMO_DEFAULT_REGION", "from-alias-2"),
        ("profile 'dev'", "from-profile"),
        ("default", None),
    ]
    args: dict[str, Any] = {"region": "from-arg"}
    for source, want in order:
        config = DemoConfig.resolve(env=env, **args)
        assert (config.region, config.sources["region"]) == (want, source)
        args = {}
        gone = "DEMO_PROFILE_REGION" if source == "profile 'dev'" else source
        env = {k: v for k, v in env.items() if k != gone}


def test_blank_variables_and_none_arguments_count_as_unset():
    config = DemoConfig.resolve(
        env={"FLYTE_CHECKPOINT_DEMO_REGION": "  ", "DEMO_REGION": "eu-west-3"}, region=None, part_size=None
    )
    assert config.region == "eu-west-3" and config.sources["region"] == "DEMO_REGION"
    assert config.part_size == 16 * MiB and config.sources["part_size"] == "default"


def test_the_origin_of_arguments_is_recorded_and_named_in_errors():
    config = DemoConfig.resolve(env={}, origin="configure_store('demo://b/')", read_concurrency=2)
    assert config.sources["read_concurrency"] == "configure_store('demo://b/')"
    with pytest.raises(ConfigurationError) as info:
        DemoConfig.resolve(env={}, origin="configure_store('demo://b/')", read_timeout="soon")
    assert str(info.value).startswith("configure_store('demo://b/', read_timeout='soon') is not a duration")
    with pytest.raises(ConfigurationError, match=r"^read_timeout='soon' \(argument\) is not a duration"):
        DemoConfig.resolve(env={}, read_timeout="soon")


def test_a_computed_default_sees_the_resolved_values_and_yields_to_a_given_value():
    config = DemoConfig.resolve(env={"FLYTE_CHECKPOINT_DEMO_READ_CONCURRENCY": "4"}, max_concurrency=1)
    assert config.max_connections == 2 * (1 + 4) and config.sources["max_connections"] == "default"
    assert DemoConfig.resolve(env={}, max_connections=5).max_connections == 5


def test_an_unknown_setting_is_refused_with_the_closest_name():
    with pytest.raises(ConfigurationError) as info:
        DemoConfig.resolve(env={}, part_sise="8MiB")
    assert str(info.value).startswith(
        "the demo backend has no setting 'part_sise' (did you mean 'part_size'?) (argument): its settings are"
        " endpoint_url, anonymous, part_size,"
    )


def test_check_hook_refuses_combinations():
    with pytest.raises(ConfigurationError, match="needs read_concurrency of at most 8"):
        DemoConfig.resolve(env={}, read_range_size="128MiB", read_concurrency=16)


def test_secrets_are_returned_and_hidden_from_repr():
    config = DemoConfig.resolve(env={"FLYTE_CHECKPOINT_DEMO_TOKEN": "tok-abcdef"})
    assert config.secrets() == ("tok-abcdef",)
    assert "tok-abcdef" not in repr(config) and "token=<redacted>" in repr(config)
    assert repr(config).startswith("DemoConfig(endpoint_url=None, anonymous=False, part_size=16777216,")
    assert DemoConfig.resolve(env={}).secrets() == () and "token=None" in repr(DemoConfig.resolve(env={}))


def test_repr_hides_the_password_of_an_endpoint_url():
    config = DemoConfig.resolve(env={}, endpoint_url="http://user:pw-secret@minio:9000")
    assert "pw-secret" not in repr(config) and "minio:9000" in repr(config)


def test_object_settings_are_arguments_only():
    session = object()
    config = DemoConfig.resolve(env={"FLYTE_CHECKPOINT_DEMO_SESSION": "x"}, session=session)
    assert config.session is session
    assert DemoConfig.resolve(env={"FLYTE_CHECKPOINT_DEMO_SESSION": "x"}).session is None
    assert (
        DemoConfig.variable("session") is None
        and DemoConfig.variable("region") == "FLYTE_CHECKPOINT_DEMO_REGION"
    )
    with pytest.raises(ValueError, match="reads no variables"):
        setting(OBJECT, None, doc="x", env=("X",))


def test_settings_table_lists_every_setting_as_a_readme_row():
    rows = {row.name: row for row in DemoConfig.settings_table()}
    assert list(rows) == [*SHARED, "region", "token", "session"]
    assert rows["part_size"].default == "16MiB" and rows["read_timeout"].default == "60s"
    assert rows["verify_checksums"].default == "true" and rows["endpoint_url"].default == ""
    assert rows["max_connections"].default == "2 * (max_concurrency + read_concurrency)"
    assert rows["region"].env == ("FLYTE_CHECKPOINT_DEMO_REGION", "DEMO_REGION", "DEMO_DEFAULT_REGION")
    assert rows["session"].env == ()
    assert rows["part_size"].row() == (
        "| `part_size` | `16MiB` | `FLYTE_CHECKPOINT_DEMO_PART_SIZE` | Bytes per chunk."
        " the service takes chunks in multiples of 256KiB |"
    )
    table = markdown_table(DemoConfig.settings_table())
    assert table.splitlines()[0] == "| setting | default | environment, first set wins | meaning |"
    assert len(table.splitlines()) == 2 + len(rows)


def test_calling_the_class_resolves_from_the_environment(monkeypatch):
    monkeypatch.setenv("FLYTE_CHECKPOINT_DEMO_READ_TIMEOUT", "500ms")
    config = DemoConfig(part_size=512 * KiB)
    assert config == DemoConfig.resolve(part_size="512KiB")
    assert (
        config.read_timeout == 0.5 and config.sources["read_timeout"] == "FLYTE_CHECKPOINT_DEMO_READ_TIMEOUT"
    )
    with pytest.raises(ConfigurationError, match=r"part_size='1 potato' \(argument\) is not a size"):
        DemoConfig(part_size="1 potato")  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.part_size = 1  # type: ignore[misc]


def test_every_field_must_be_a_setting():
    @dataclass(frozen=True)
    class Broken(StoreConfig):
        BACKEND: ClassVar[str] = "broken"
        plain: int = 3

    with pytest.raises(TypeError, match=r"Broken.plain is not declared with setting\(\)"):
        Broken.resolve(env={})
