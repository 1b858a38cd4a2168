"""A backend's settings: declared once as dataclass fields, read from arguments and the environment.

A backend's configuration is a frozen dataclass derived from :class:`StoreConfig` (a cloud
backend's from :class:`CloudConfig`, which declares the settings every cloud shares), each field
made by :func:`setting`. :meth:`StoreConfig.resolve` fills every field, highest first, from:

1. the keyword arguments (``origin`` says where they came from: the store's own arguments, or a
   ``configure_store`` call);
2. ``FLYTE_CHECKPOINT_<BACKEND>_<SETTING>`` (none for an ``arg_only`` setting);
3. the setting's ``env`` aliases, in the order declared (a cloud SDK's own variables);
4. the backend's ``_cloud_rules`` (precedence rules of the cloud that a list of names cannot say);
5. the default; a callable default is called with the values already resolved.

Every value, whichever its source, goes through the one :func:`parse`, whose errors are
:class:`~flyte_checkpoint.errors.ConfigurationError` naming the source and the fix. A blank
variable counts as unset; so does an argument of ``None``.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple
from urllib.parse import urlsplit

from ...errors import ConfigurationError
from ...uri import redact
from .redaction import REDACTED

if TYPE_CHECKING:
    from typing_extensions import Self


class Kind(enum.Enum):
    """What a setting holds, and so how its text is parsed."""

    SIZE = "size"  # bytes: 8MiB, 16M, 262144; every unit is a power of 1024
    COUNT = "count"  # a whole number: 8
    SECONDS = "seconds"  # a duration, as float seconds: 10, 10s, 500ms, 2m
    FLAG = "flag"  # a boolean: 1/0, true/false, yes/no, on/off
    CHOICE = "choice"  # one of the setting's choices, case-insensitive, returned canonical
    TEXT = "text"  # a string, stripped
    URL = "url"  # http(s)://host[:port][/path]
    OBJECT = "object"  # a Python object (credentials, a session): arguments only, never parsed


SIZE, COUNT, SECONDS, FLAG, CHOICE, TEXT, URL, OBJECT = Kind

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

_UNITS = {"": 1, "b": 1, "k": KiB, "kb": KiB, "kib": KiB, "m": MiB, "mb": MiB, "mib": MiB}
_UNITS.update({"g": GiB, "gb": GiB, "gib": GiB})
_NUMBER = r"(\d[\d_]*(?:\.\d[\d_]*)?)"
_SIZE_RE = re.compile(_NUMBER + r"\s*([A-Za-z]*)")
_DURATION_RE = re.compile(_NUMBER + r"\s*(ms|s|m)?", re.IGNORECASE)
_DURATION_UNITS = {None: Decimal(1), "s": Decimal(1), "ms": Decimal("0.001"), "m": Decimal(60)}
_FLAGS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False}
_FLAGS["off"] = False
_VARIABLE = re.compile(r"[A-Z][A-Z0-9_]*")
_METADATA_KEY = "flyte_checkpoint.setting"
_UNSET: Any = type("_Unset", (), {"__repr__": lambda self: "<unset>"})()


@dataclass(frozen=True)
class Setting:
    """How one field of a config is read and checked (made by :func:`setting`)."""

    kind: Kind
    default: Any
    doc: str
    env: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    multiple_of: int | None = None
    secret: bool = False
    arg_only: bool = False
    why: str = ""


class SettingDoc(NamedTuple):
    """One row of a backend README's settings table."""

    name: str
    default: str  # the default as a user would write it ("8MiB", "60s", "true"; "" for none)
    env: tuple[str, ...]  # the variables read, first set wins (empty for an arg-only setting)
    doc: str
    why: str = ""

    def row(self) -> str:
        """The Markdown row: ``| setting | default | environment, first set wins | meaning |``."""
        env = ", ".join(f"`{name}`" for name in self.env) or "(argument only)"
        meaning = f"{self.doc} {self.why}".strip()
        default = f"`{self.default}`" if self.default else ""
        return f"| `{self.name}` | {default} | {env} | {meaning} |"


def markdown_table(rows: list[SettingDoc]) -> str:
    """The whole settings table of a README, header included, one line per setting."""
    head = "| setting | default | environment, first set wins | meaning |\n|---|---|---|---|"
    return "\n".join([head, *(row.row() for row in rows)])


def setting(
    kind: Kind,
    default: Any,
    *,
    doc: str,
    env: tuple[str, ...] | list[str] = (),
    choices: tuple[str, ...] | list[str] = (),
    minimum: float | None = None,
    maximum: float | None = None,
    multiple_of: int | None = None,
    secret: bool = False,
    arg_only: bool = False,
    why: str = "",
) -> Any:
    """A config field read from arguments and the environment (use as a dataclass field's value).

    ``default`` may be a callable taking the values resolved so far (a dict by setting name);
    its docstring, if any, is the default shown in the settings table. ``env`` lists other
    variables read after ``FLYTE_CHECKPOINT_<BACKEND>_<NAME>``, first set wins. ``secret`` values
    are shown as ``<redacted>`` in ``repr`` and in error messages and returned by
    ``secrets()``. An ``arg_only`` setting (every :data:`OBJECT` one) reads no variable.
    ``why`` says why the default or a constraint is what it is; it is added to constraint errors.

    Raises:
        ValueError: a contradictory declaration (a choice setting without choices, an
            arg-only setting with variables).
    """
    arg_only = arg_only or kind is OBJECT
    if kind is CHOICE and not choices:
        raise ValueError("a CHOICE setting needs choices")
    if arg_only and env:
        raise ValueError("an arg_only setting reads no variables")
    spec = Setting(
        kind, default, doc, tuple(env), tuple(choices), minimum, maximum, multiple_of, secret, arg_only, why
    )
    return dataclasses.field(default=_UNSET, metadata={_METADATA_KEY: spec})


def parse(
    kind: Kind,
    raw: Any,
    *,
    name: str,
    source: str,
    choices: tuple[str, ...] | list[str] = (),
    minimum: float | None = None,
    maximum: float | None = None,
    multiple_of: int | None = None,
    secret: bool = False,
    example: Any = None,
    why: str = "",
) -> Any:
    """``raw`` (a string from a variable, or a value or string from an argument) as ``kind``.

    Sizes are bytes (``int``): a number with an optional unit among B, K, KB, KiB, M, MB, MiB,
    G, GB, GiB, all powers of 1024, case-insensitive, ``_`` allowed, a fraction allowed if it
    makes whole bytes. Durations are float seconds: ``10``, ``10s``, ``500ms``, ``2m``. Flags are
    ``1/0 true/false yes/no on/off``. Choices are matched case-insensitively and returned as
    spelled in ``choices``. Numbers are never negative and then checked against ``minimum``,
    ``maximum`` and ``multiple_of``.

    ``source`` is where ``raw`` came from: a variable's name, ``"argument"``, or an origin such as
    ``"configure_store('s3://b/')"``; the error message names it. ``example`` is a valid value
    shown in the message (default: the first choice, or a typical value of the kind).

    Raises:
        ConfigurationError: ``raw`` is not a value of ``kind``, or breaks a constraint.
    """
    shown = describe(source, name, REDACTED if secret else raw)
    fix = _example(kind, example, choices)
    if kind is OBJECT:
        return raw
    if kind is SIZE:
        value: Any = _parse_size(raw)
        if value is None:
            raise ConfigurationError(
                f"{shown} is not a size: give bytes or a number with KiB, MiB or GiB ({fix})"
            )
    elif kind is COUNT:
        value = _parse_count(raw)
        if value is None:
            raise ConfigurationError(f"{shown} is not a whole number: give digits ({fix})")
    elif kind is SECONDS:
        value = _parse_seconds(raw)
        if value is None:
            raise ConfigurationError(
                f"{shown} is not a duration: give seconds (10 or 10s), milliseconds (500ms)"
                f" or minutes (2m) ({fix})"
            )
    elif kind is FLAG:
        value = _parse_flag(raw)
        if value is None:
            raise ConfigurationError(f"{shown} is not a flag: give true or false (or 1/0, yes/no, on/off)")
    elif kind is CHOICE:
        value = _parse_choice(raw, choices)
        if value is None:
            raise ConfigurationError(f"{shown} is not one of {', '.join(choices)}: give one of them")
    elif kind is URL:
        value = _parse_url(raw)
        if value is None:
            raise ConfigurationError(f"{shown} is not a URL: give http(s)://HOST[:PORT] ({fix})")
    else:
        if not isinstance(raw, str):
            raise ConfigurationError(f"{shown} is not text: give a string")
        value = raw.strip()
    _check_bounds(kind, value, shown, minimum, maximum, multiple_of, why)
    return value


def describe(source: str, name: str, raw: Any) -> str:
    """How an error message shows a value and where it came from.

    ``FLYTE_CHECKPOINT_S3_PART_SIZE='8 megs'`` for a variable, ``part_size='8 megs' (argument)``
    for an argument, ``configure_store('s3://b/', part_size='8 megs')`` for a configuration call.
    """
    if _VARIABLE.fullmatch(source):
        return f"{source}={raw!r}"
    if source.startswith("configure_store(") and source.endswith(")"):
        return f"{source[:-1]}, {name}={raw!r})"
    return f"{name}={raw!r} ({source})"


def format_value(kind: Kind, value: Any) -> str:
    """``value`` as a user would write it: sizes in the largest whole binary unit, durations in
    seconds or milliseconds, flags as true/false; ``""`` for ``None``."""
    if value is None:
        return ""
    if kind is SIZE and isinstance(value, int):
        for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
            if value and value % size == 0:
                return f"{value // size}{unit}"
        return str(value)
    if kind is SECONDS and isinstance(value, (int, float)):
        ms = Decimal(str(value)) * 1000
        if ms % 1000 == 0:
            return f"{int(ms) // 1000}s"
        return f"{int(ms)}ms" if ms % 1 == 0 else f"{value}s"
    if kind is FLAG:
        return "true" if value else "false"
    return str(value)


class StoreConfig:
    """Base of every backend's ``@dataclass(frozen=True)`` configuration; it declares no fields.

    A subclass sets :attr:`BACKEND` and declares its settings with :func:`setting`. Build one
    with :meth:`resolve`; calling the class (``S3Config(part_size="16MiB")``) is the same as
    ``resolve`` with those arguments and ``os.environ``. ``repr`` shows secrets as ``<redacted>``.
    """

    #: The backend's name: its variables are ``FLYTE_CHECKPOINT_<BACKEND>_<SETTING>``.
    BACKEND: ClassVar[str]
    #: Where each field's value came from: ``"argument"``, an origin such as
    #: ``"configure_store('s3://b/')"``, a variable's name, what ``_cloud_rules`` wrote, or ``"default"``.
    sources: Mapping[str, str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # In the class's own namespace before @dataclass runs, so the decorator keeps it.
        cls.__repr__ = StoreConfig.__repr__  # type: ignore[method-assign]

    def __post_init__(self) -> None:
        if getattr(self, "sources", None) is not None:
            return  # built by resolve()
        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        built = type(self).resolve(**{k: v for k, v in given.items() if v is not _UNSET})
        for name in given:
            object.__setattr__(self, name, getattr(built, name))
        object.__setattr__(self, "sources", built.sources)

    @classmethod
    def resolve(
        cls, *, env: Mapping[str, str] | None = None, origin: str = "argument", **settings: Any
    ) -> Self:
        """The configuration from ``settings`` (given by ``origin``), ``env`` (default
        ``os.environ``), the cloud's rules and the defaults, in that order of precedence.

        Raises:
            ConfigurationError: an unknown setting name, a value that does not parse or breaks a
                constraint (naming where it came from and what to give), or a combination
                ``_check`` refuses.
        """
        specs = cls._settings()
        environ = os.environ if env is None else env
        unknown = sorted(set(settings) - set(specs))
        if unknown:
            raise ConfigurationError(_unknown_message(cls, unknown, specs, origin))
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for name, spec in specs.items():
            if settings.get(name) is not None:
                values[name], sources[name] = settings[name], origin
                continue
            for variable in cls._variables(name, spec):
                raw = environ.get(variable)
                if raw is not None and raw.strip():
                    values[name], sources[name] = raw, variable
                    break
        cls._cloud_rules(values, environ, sources)
        for name in values:
            values[name] = cls._parse(name, specs[name], values[name], sources.get(name, "_cloud_rules"))
            sources.setdefault(name, "_cloud_rules")
        for name, spec in specs.items():  # plain defaults first, so computed ones see them all
            if name not in values and not callable(spec.default):
                values[name], sources[name] = cls._default(name, spec, spec.default), "default"
        for name, spec in specs.items():
            if name not in values:
                values[name], sources[name] = cls._default(name, spec, spec.default(dict(values))), "default"
        config = object.__new__(cls)
        for name in specs:
            object.__setattr__(config, name, values[name])
        object.__setattr__(config, "sources", dict(sources))
        config._check()
        return config

    @classmethod
    def settings_table(cls) -> list[SettingDoc]:
        """One row per setting, in declaration order: what a backend README's table lists."""
        rows = []
        for name, spec in cls._settings().items():
            if callable(spec.default):
                default = (spec.default.__doc__ or "computed").strip()
            else:
                default = format_value(spec.kind, cls._default(name, spec, spec.default))
            rows.append(SettingDoc(name, default, cls._variables(name, spec), spec.doc, spec.why))
        return rows

    @classmethod
    def variable(cls, name: str) -> str | None:
        """``FLYTE_CHECKPOINT_<BACKEND>_<NAME>``, the setting's own variable (``None`` if arg-only)."""
        spec = cls._settings()[name]
        return None if spec.arg_only else f"FLYTE_CHECKPOINT_{cls.BACKEND.upper()}_{name.upper()}"

    def secrets(self) -> tuple[str, ...]:
        """The values of the set secret settings, to scrub from messages (``kit.redaction``)."""
        found = (getattr(self, n) for n, spec in self._settings().items() if spec.secret)
        return tuple(v for v in found if isinstance(v, str) and v)

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={self._shown(n, spec)}" for n, spec in self._settings().items())
        return f"{type(self).__name__}({shown})"

    def _shown(self, name: str, spec: Setting) -> str:
        value = getattr(self, name)
        if spec.secret and value is not None:
            return REDACTED
        if spec.kind is URL and isinstance(value, str):
            return repr(redact(value))  # an endpoint URL may carry user:password
        return repr(value)

    @classmethod
    def _cloud_rules(cls, values: dict[str, Any], env: Mapping[str, str], sources: dict[str, str]) -> None:
        """Hook: fill settings that ``values`` lacks by the cloud's own precedence rules.

        ``values`` holds the raw values found so far in arguments and variables; a rule sets
        ``values[name]`` (parsed afterwards like any other) and ``sources[name]`` (what an error
        message names: a variable, or a short phrase such as ``"profile 'dev'"``).
        """

    def _check(self) -> None:
        """Hook: refuse combinations of values (raise ConfigurationError naming the settings)."""

    @classmethod
    def _settings(cls) -> dict[str, Setting]:
        specs = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            spec = f.metadata.get(_METADATA_KEY)
            if spec is None:
                raise TypeError(f"{cls.__name__}.{f.name} is not declared with setting()")
            specs[f.name] = spec
        return specs

    @classmethod
    def _variables(cls, name: str, spec: Setting) -> tuple[str, ...]:
        if spec.arg_only:
            return ()
        return (f"FLYTE_CHECKPOINT_{cls.BACKEND.upper()}_{name.upper()}", *spec.env)

    @classmethod
    def _parse(cls, name: str, spec: Setting, raw: Any, source: str) -> Any:
        return parse(
            spec.kind,
            raw,
            name=name,
            source=source,
            choices=spec.choices,
            minimum=spec.minimum,
            maximum=spec.maximum,
            multiple_of=spec.multiple_of,
            secret=spec.secret,
            example=None if callable(spec.default) else spec.default,
            why=spec.why,
        )

    @classmethod
    def _default(cls, name: str, spec: Setting, value: Any) -> Any:
        return None if value is None else cls._parse(name, spec, value, "default")


def _max_connections(values: dict[str, Any]) -> int:
    """2 * (max_concurrency + read_concurrency)"""
    return 2 * (values["max_concurrency"] + values["read_concurrency"])


@dataclass(frozen=True, repr=False)
class CloudConfig(StoreConfig):
    """The settings every cloud backend shares, with their generic defaults.

    A cloud's config derives from this and redeclares a shared field only to change its default
    or its constraints (``checksum`` always: each cloud has its own algorithms).
    """

    BACKEND: ClassVar[str] = "cloud"

    endpoint_url: str | None = setting(
        URL, None, doc="The service's URL, for an emulator or a compatible server; default: the cloud's."
    )
    anonymous: bool = setting(FLAG, False, doc="Send no credentials (public buckets, emulators).")
    part_size: int = setting(
        SIZE, 8 * MiB, doc="Bytes a writer holds before it sends them as one part or block.", minimum=1
    )
    max_concurrency: int = setting(COUNT, 8, doc="Parts one writer sends at the same time.", minimum=1)
    read_range_size: int = setting(SIZE, 8 * MiB, doc="Bytes of one ranged read.", minimum=1)
    read_concurrency: int = setting(COUNT, 8, doc="Ranges one reader fetches at the same time.", minimum=1)
    checksum: str = setting(
        CHOICE,
        "CRC32",
        doc="The full-object checksum sent with each write and stored with the object; NONE sends none.",
        choices=("CRC32", "CRC32C", "CRC64NVME", "MD5", "NONE"),
    )
    verify_checksums: bool = setting(
        FLAG, True, doc="Reads check the stored full-object checksum when they can compute it."
    )
    connect_timeout: float = setting(SECONDS, 10.0, doc="Longest wait to open a connection.", minimum=0.001)
    read_timeout: float = setting(
        SECONDS, 60.0, doc="Longest a socket read may wait for bytes before it fails.", minimum=0.001
    )
    request_attempts: int = setting(
        COUNT,
        3,
        doc="Tries of one HTTP request inside the SDK, the first included.",
        minimum=1,
        why="The core's retry policy is the layer that decides; this only bounds the SDK's.",
    )
    max_connections: int = setting(
        COUNT, _max_connections, doc="Connections the store keeps open to the service.", minimum=1
    )


def _unknown_message(
    cls: type[StoreConfig], unknown: list[str], specs: Mapping[str, Setting], origin: str
) -> str:
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, list(specs), n=1)
        parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return (
        f"the {cls.BACKEND} backend has no setting {', '.join(parts)} ({origin}):"
        f" its settings are {', '.join(specs)}"
    )


def _example(kind: Kind, example: Any, choices: tuple[str, ...] | list[str]) -> str:
    if example is not None and not callable(example):
        try:
            return format_value(kind, example) if not isinstance(example, str) else example
        except Exception:  # pragma: no cover - an example only decorates a message
            pass
    if choices:
        return choices[0]
    return {SIZE: "8MiB", COUNT: "8", SECONDS: "10s", URL: "https://storage.example.com"}.get(kind, "")


def _number(text: str) -> Decimal | None:
    if "__" in text or text.endswith("_"):
        return None
    try:
        return Decimal(text.replace("_", ""))
    except InvalidOperation:
        return None


def _parse_size(raw: Any) -> int | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw if raw >= 0 else -1
    if not isinstance(raw, str):
        return None
    m = _SIZE_RE.fullmatch(raw.strip())
    if m is None or m.group(2).lower() not in _UNITS:
        return None
    number = _number(m.group(1))
    if number is None:
        return None
    total = number * _UNITS[m.group(2).lower()]
    return int(total) if total == total.to_integral_value() else None


def _parse_count(raw: Any) -> int | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw if raw >= 0 else -1
    if not isinstance(raw, str) or not re.fullmatch(r"\d[\d_]*", raw.strip()):
        return None
    number = _number(raw.strip())
    return None if number is None else int(number)


def _parse_seconds(raw: Any) -> float | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, (int, float)):
        return float(raw) if raw >= 0 else -1.0
    if not isinstance(raw, str):
        return None
    m = _DURATION_RE.fullmatch(raw.strip())
    if m is None:
        return None
    number = _number(m.group(1))
    unit = m.group(2).lower() if m.group(2) else None
    return None if number is None else float(number * _DURATION_UNITS[unit])


def _parse_flag(raw: Any) -> bool | None:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int) and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str):
        return _FLAGS.get(raw.strip().lower())
    return None


def _parse_choice(raw: Any, choices: tuple[str, ...] | list[str]) -> str | None:
    if not isinstance(raw, str):
        return None
    wanted = raw.strip().lower()
    return next((c for c in choices if c.lower() == wanted), None)


def _parse_url(raw: Any) -> str | None:
    if not isinstance(raw, str):
        return None
    text = raw.strip()
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    return text


def _check_bounds(
    kind: Kind,
    value: Any,
    shown: str,
    minimum: float | None,
    maximum: float | None,
    multiple_of: int | None,
    why: str,
) -> None:
    if kind not in (SIZE, COUNT, SECONDS):
        return
    reason = f" ({why})" if why else ""
    if value < 0:
        raise ConfigurationError(f"{shown} is negative: give a value of at least 0")
    if minimum is not None and value < minimum:
        least = format_value(kind, minimum)
        raise ConfigurationError(f"{shown} is below the minimum: give at least {least}{reason}")
    if maximum is not None and value > maximum:
        most = format_value(kind, maximum)
        raise ConfigurationError(f"{shown} is above the maximum: give at most {most}{reason}")
    if multiple_of and value % multiple_of:
        step = format_value(kind, multiple_of)
        raise ConfigurationError(f"{shown} is not a multiple of {step}: give a multiple of {step}{reason}")


__all__ = [
    "CHOICE",
    "COUNT",
    "FLAG",
    "OBJECT",
    "SECONDS",
    "SIZE",
    "TEXT",
    "URL",
    "CloudConfig",
    "GiB",
    "KiB",
    "Kind",
    "MiB",
    "Setting",
    "SettingDoc",
    "StoreConfig",
    "describe",
    "format_value",
    "markdown_table",
    "parse",
    "setting",
]
