"""Scheme -> store resolution, fed by the ``register_stores`` hook.

Where stores come from, in order of precedence when two claim one scheme:

1. runtime registrations (:func:`register_store`), newest first;
2. plugins found through entry points in the group ``flyte_checkpoint``;
3. the built-in ``file`` and ``memory`` stores.

Within one level the claim with the higher ``priority`` wins; equal priorities are
broken by backend name (alphabetical), with a warning that names both claimants.

Two plugins registering one backend *name*: the one whose plugin (entry point) name sorts
first is kept, with a warning naming both; a plugin's backend named like a built-in one
replaces the built-in; a runtime registration replaces any of the same name.

Entry points are loaded once, lazily, on the first resolution of a URI or the first
listing of backends (never at import), each on its own: a plugin that fails to import
is reported by name in a warning and in later "no backend" errors, and the rest load.
Set ``FLYTE_CHECKPOINT_DISABLE_PLUGIN_AUTOLOAD=1`` to load no entry points at all.

Stores are built on first use and then shared: one per backend, plus one per configured URI
prefix that a URI matched (:func:`configure_store`, :mod:`flyte_checkpoint.storage.profiles`).
"""

from __future__ import annotations

import importlib
import os
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .kit.settings import StoreConfig

import pluggy

# The module itself (pluggy reads its hooks); imported by its full name, since ``from . import``
# would make this module depend on the package's ``__init__``, which imports this one.
import flyte_checkpoint.storage.hookspecs as hookspecs

from ..errors import (
    BackendLoadError,
    BackendNotInstalledError,
    ConfigurationError,
    UnknownSchemeError,
)
from ..uri import redact, scheme_of
from ..util.forksafe import lock
from .blobstore import BlobStore
from .hookspecs import StoreSpec
from .profiles import Profiles, origin, prefix_of

DISABLE_AUTOLOAD_ENV = "FLYTE_CHECKPOINT_DISABLE_PLUGIN_AUTOLOAD"
ENTRY_POINT_GROUP = hookspecs.PROJECT

#: Schemes this project ships a plugin for: scheme -> (extra, backend label).
KNOWN_SCHEMES: dict[str, tuple[str, str]] = {
    "s3": ("s3", "S3"),
    "s3a": ("s3", "S3"),
    "gs": ("gcs", "Google Cloud Storage"),
    "gcs": ("gcs", "Google Cloud Storage"),
    "abfs": ("azure", "Azure Blob Storage"),
    "abfss": ("azure", "Azure Blob Storage"),
    "az": ("azure", "Azure Blob Storage"),
}

_RANK = {"runtime": 2, "plugin": 1, "builtin": 0}


def install_hint(scheme: str) -> str | None:
    """The ``pip install`` command that adds a backend for a known scheme, else ``None``: the
    core's extra, or the plugin's folder when this copy was installed from a checkout
    (:func:`flyte_checkpoint.util.install.install_command`)."""
    known = KNOWN_SCHEMES.get(scheme.lower())
    if not known:
        return None
    from ..util.install import install_command

    return install_command(known[0])


@dataclass(frozen=True)
class Backend:
    """An installed backend: its spec and where it came from."""

    spec: StoreSpec
    source: str  # "builtin", "plugin" or "runtime"
    plugin: str  # the plugin (entry point) name that registered it
    distribution: str | None = None
    version: str | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def schemes(self) -> tuple[str, ...]:
        return self.spec.schemes


@dataclass
class _PluginInfo:
    distribution: str | None = None
    version: str | None = None


@dataclass
class BrokenPlugin:
    """A plugin that could not be loaded or whose hook failed."""

    name: str
    error: BaseException
    distribution: str | None = None

    def __str__(self) -> str:
        return f"{self.name}: {type(self.error).__name__}: {self.error}"


class Registry:
    """The table of backends. Most code uses the process-wide one (:func:`get_registry`)."""

    def __init__(self, *, autoload: bool | None = None) -> None:
        if autoload is None:
            autoload = not _env_true(DISABLE_AUTOLOAD_ENV)
        self._autoload = autoload
        self._lock = lock(reentrant=True)  # a forked child finds it free, whoever held it
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        from .stores import builtin_plugin

        self._pm.register(builtin_plugin, name="builtin")
        self._plugin_info: dict[str, _PluginInfo] = {}
        self._entry_points_loaded = False
        self._broken: dict[str, BrokenPlugin] = {}
        self._runtime: list[StoreSpec] = []
        self._backends: list[Backend] | None = None
        self._profiles = Profiles()
        self._stores: dict[tuple[str, str], BlobStore] = {}  # (backend, matched prefix or "")
        # Replaced by a new configuration, and closed by close() if still alive: held weakly,
        # so that a store no one uses any more is freed (a save in flight holds its own).
        self._retired: list[weakref.ref[BlobStore]] = []

    # -- plugins ---------------------------------------------------------------

    def load_entry_points(self) -> None:
        """Load every plugin named in the entry-point group, once; broken ones are recorded."""
        with self._lock.get():
            if self._entry_points_loaded or not self._autoload:
                return
            self._entry_points_loaded = True
            from importlib.metadata import entry_points

            for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
                dist = getattr(ep, "dist", None)
                info = _PluginInfo(
                    distribution=getattr(dist, "name", None), version=getattr(dist, "version", None)
                )
                if self._pm.has_plugin(ep.name) or ep.name in self._broken:
                    continue
                try:
                    plugin = ep.load()
                    self._pm.register(plugin, name=ep.name)
                except Exception as exc:  # one broken plugin must not hide the others
                    self._mark_broken(ep.name, exc, info.distribution)
                    continue
                self._plugin_info[ep.name] = info
            self._backends = None

    def register_plugin(self, plugin: Any, name: str) -> None:
        """Register a plugin object (a module or instance with ``@hookimpl`` functions)."""
        with self._lock.get():
            self._pm.register(plugin, name=name)
            self._plugin_info.setdefault(name, _PluginInfo())
            self._invalidate()

    def unregister_plugin(self, name: str) -> None:
        """Remove a plugin registered by :meth:`register_plugin` or an entry point."""
        with self._lock.get():
            plugin = self._pm.get_plugin(name)
            if plugin is not None:
                self._pm.unregister(plugin, name=name)
            self._invalidate()

    def register(self, spec: StoreSpec) -> None:
        """Register a store at runtime; it takes precedence over plugins and built-ins."""
        with self._lock.get():
            self._runtime = [s for s in self._runtime if s.name != spec.name]
            self._runtime.append(spec)
            self._invalidate()

    def unregister(self, name: str) -> None:
        """Remove a runtime registration by backend name (no error if absent)."""
        with self._lock.get():
            self._runtime = [s for s in self._runtime if s.name != name]
            self._invalidate()

    @property
    def broken_plugins(self) -> list[BrokenPlugin]:
        """Plugins that failed to load, in name order."""
        self.load_entry_points()
        return [self._broken[k] for k in sorted(self._broken)]

    # -- lookup ----------------------------------------------------------------

    def backends(self) -> list[Backend]:
        """Every registered backend, winners first for each scheme."""
        built = self._backends  # built only after the entry points were loaded
        if built is not None:
            return list(built)  # without the lock: see store_for
        with self._lock.get():
            self.load_entry_points()
            if self._backends is None:
                self._backends = self._collect()
            return list(self._backends)

    def backend_for(self, uri: str) -> Backend:
        """The backend that serves the URI's scheme.

        Raises:
            BackendNotInstalledError: a scheme this project has a plugin for, not installed.
            UnknownSchemeError: any other scheme no backend serves.
        """
        scheme = scheme_of(uri)
        for backend in self.backends():
            if scheme in backend.schemes:
                return backend
        raise self._no_backend_error(scheme, uri)

    def store_for(self, uri: str) -> BlobStore:
        """The store instance (built on first use, then shared) for the URI.

        One store serves each backend's URIs, except those under a prefix configured with
        :meth:`configure`: each matched prefix has its own store (the longest prefix wins).
        While the ``flyte_checkpoint`` logger is set to ``DEBUG``, the store
        comes wrapped in a :class:`~flyte_checkpoint.storage.storelog.LoggedStore` that logs each call
        (see :mod:`flyte_checkpoint.storage.storelog`).
        """
        from .storelog import wrap

        backend = self.backend_for(uri)
        # A store already built is found without the lock: the final save on SIGTERM looks its
        # store up while the thread the signal stopped (which never goes on while the handler
        # runs) may hold it. Writers replace what readers see, never change it in place.
        prefix, _ = self._profiles.match(backend.name, uri)
        store = self._stores.get((backend.name, prefix))
        if store is None:
            with self._lock.get():
                prefix, settings = self._profiles.match(backend.name, uri)
                store = self._stores.get((backend.name, prefix))
                if store is None:
                    store = self._build(backend, settings)
                    self._stores = {**self._stores, (backend.name, prefix): store}
        return wrap(store)

    def configure(self, target: str, settings: dict[str, Any]) -> None:
        """Set the settings of a backend's stores: see :func:`configure_store`."""
        with self._lock.get():
            backend, prefix = self._target(target)
            spec = backend.spec
            if settings:
                if spec.config is None:
                    raise ConfigurationError(
                        f"the {spec.name!r} backend takes no settings in code ({origin(target)}):"
                        " its StoreSpec names no config class. Configure it as its documentation"
                        " says, or ask its authors to declare StoreSpec.config."
                    )
                config = self._load(backend, spec.config, "config class")
                merged = self._profiles.merged(spec.name, prefix, settings)
                config.resolve(origin=origin(target), **merged)  # raises ConfigurationError
            self._profiles.set(spec.name, prefix, settings)
            # Stores built with the old settings are not closed here: they may be in use.
            self._retired = [ref for ref in self._retired if ref() is not None] + [
                weakref.ref(store) for key, store in self._stores.items() if key[0] == spec.name
            ]
            self._stores = {key: store for key, store in self._stores.items() if key[0] != spec.name}

    def close(self) -> None:
        """Close every store built so far (they are rebuilt on next use)."""
        with self._lock.get():
            retired = [store for ref in self._retired if (store := ref()) is not None]
            stores = [*self._stores.values(), *retired]
            self._stores, self._retired = {}, []
        for store in stores:
            store.close()

    # -- internals -------------------------------------------------------------

    def _invalidate(self) -> None:
        self._backends = None
        self._stores = {}

    def _mark_broken(self, name: str, exc: BaseException, distribution: str | None) -> None:
        self._broken[name] = BrokenPlugin(name, exc, distribution)
        warnings.warn(
            f"flyte-checkpoint plugin {name!r}"
            + (f" (from {distribution})" if distribution else "")
            + f" failed to load and is skipped: {type(exc).__name__}: {exc}",
            RuntimeWarning,
            stacklevel=3,
        )

    def _collect(self) -> list[Backend]:
        claims: list[Backend] = []
        seen: dict[str, Backend] = {}
        impls = self._pm.hook.register_stores.get_hookimpls()
        # plugins before built-ins, then by plugin name: the first claim of a name is kept
        for impl in sorted(impls, key=lambda i: (i.plugin_name == "builtin", i.plugin_name)):
            plugin = impl.plugin_name
            source = "builtin" if plugin == "builtin" else "plugin"
            info = self._plugin_info.get(plugin, _PluginInfo())
            found: list[StoreSpec] = []
            try:
                impl.function(**({"register": found.append} if impl.argnames else {}))
            except Exception as exc:
                self._mark_broken(plugin, exc, info.distribution)
                continue
            for spec in found:
                backend = Backend(spec, source, plugin, info.distribution, info.version)
                self._add_claim(claims, seen, backend)
        for spec in self._runtime:
            seen.pop(spec.name, None)
            claims = [c for c in claims if c.name != spec.name]
            self._add_claim(claims, seen, Backend(spec, "runtime", "runtime"))
        order = {id(s): i for i, s in enumerate(self._runtime)}
        claims.sort(key=lambda b: (-_RANK[b.source], -b.spec.priority, -order.get(id(b.spec), 0), b.name))
        self._warn_ties(claims)
        return claims

    def _add_claim(self, claims: list[Backend], seen: dict[str, Backend], backend: Backend) -> None:
        other = seen.get(backend.name)
        if other is not None and backend.source == "builtin":
            warnings.warn(
                f"the plugin {other.plugin!r} registers a backend named {backend.name!r}, like the"
                f" built-in one: the plugin's replaces the built-in (a plugin's backend named like a"
                " built-in always does)",
                RuntimeWarning,
                stacklevel=4,
            )
            return
        if other is not None:
            warnings.warn(
                f"two plugins register a backend named {backend.name!r}: {other.plugin!r}"
                f" and {backend.plugin!r}; the one from {backend.plugin!r} is ignored"
                " (the first plugin by name is kept)",
                RuntimeWarning,
                stacklevel=4,
            )
            return
        seen[backend.name] = backend
        claims.append(backend)

    @staticmethod
    def _warn_ties(claims: list[Backend]) -> None:
        winners: dict[str, Backend] = {}
        for b in claims:
            for scheme in b.schemes:
                w = winners.setdefault(scheme, b)
                if w is not b and (_RANK[w.source], w.spec.priority) == (_RANK[b.source], b.spec.priority):
                    warnings.warn(
                        f"backends {w.name!r} (plugin {w.plugin!r}) and {b.name!r} (plugin "
                        f"{b.plugin!r}) both serve '{scheme}://' with priority {b.spec.priority};"
                        f" {w.name!r} is used (first by name). Raise one's priority to choose.",
                        RuntimeWarning,
                        stacklevel=5,
                    )

    def _target(self, target: str) -> tuple[Backend, str]:
        """The backend a ``configure_store`` target names, and its prefix (``""``: per process)."""
        if not isinstance(target, str):
            raise ConfigurationError(
                "configure_store's target must be a backend name or a URI prefix,"
                f" not {type(target).__name__}"
            )
        if "://" in target:
            backend = self.backend_for(target)
            return backend, prefix_of(target, backend=backend.name, schemes=backend.schemes)
        name = target.strip()
        backends = self.backends()
        for backend in backends:
            if backend.name == name:
                return backend, ""
        serving = next((b for b in backends if name.lower() in b.schemes), None)
        hint = f" ('{name}://' URIs are served by the {serving.name!r} backend)" if serving else ""
        raise ConfigurationError(
            f"configure_store({name!r}): no backend is named {name!r}{hint}. Give a backend name"
            f" ({', '.join(b.name for b in backends)}) or a URI prefix such as 's3://bucket/'."
        )

    def _load(self, backend: Backend, target: Any, what: str) -> Any:
        """``target`` itself, or the object its ``"module:attribute"`` path names."""
        if not isinstance(target, str):
            return target
        try:
            module, _, attr = target.partition(":")
            obj: Any = importlib.import_module(module)
            for part in attr.split(".") if attr else ():
                obj = getattr(obj, part)
            return obj
        except ImportError as exc:
            raise self._import_failed(backend, exc) from exc
        except AttributeError as exc:
            raise BackendLoadError(
                f"the {backend.name!r} backend{_origin(backend)} names a {what} {target!r} that does"
                f" not exist: {exc}. Check that its package is installed whole."
            ) from exc

    def _import_failed(self, backend: Backend, exc: ImportError) -> BackendLoadError:
        schemes = backend.spec.schemes
        hint = next((install_hint(s) for s in schemes if install_hint(s)), None)
        return BackendLoadError(
            f"the {backend.name!r} backend{_origin(backend)} could not be imported: {exc}."
            + (f" Reinstall it with: {hint}" if hint else " Check that its package is installed whole.")
        )

    def _build(self, backend: Backend, settings: dict[str, Any]) -> BlobStore:
        spec = backend.spec
        try:
            factory = self._load(backend, spec.factory, "factory")
            # No settings, no arguments: a factory written before configure_store keeps working.
            store = factory(**settings) if settings else factory()
        except (ConfigurationError, BackendLoadError):
            raise  # its message already names the setting, where it came from and the fix
        except ImportError as exc:
            raise self._import_failed(backend, exc) from exc
        except Exception as exc:
            raise BackendLoadError(
                f"the {spec.name!r} backend{_origin(backend)} could not be set up:"
                f" {type(exc).__name__}: {exc}. Check the backend's configuration (see its README)."
            ) from exc
        if not isinstance(store, BlobStore):
            raise BackendLoadError(
                f"the {spec.name!r} backend's factory returned {type(store).__name__}, not a BlobStore"
            )
        return store

    def _no_backend_error(self, scheme: str, uri: str) -> UnknownSchemeError:
        installed = ", ".join(
            f"{b.name} ({', '.join(s + '://' for s in b.schemes)})" for b in self.backends()
        )
        broken = "; ".join(str(b) for b in self.broken_plugins)
        broken_note = f" Plugins that failed to load: {broken}." if broken else ""
        if not self._autoload and _env_true(DISABLE_AUTOLOAD_ENV):  # it may well be installed
            broken_note += (
                f" {DISABLE_AUTOLOAD_ENV} is set, so no installed plugin was loaded: unset it if the"
                " backend is installed."
            )
        hint = install_hint(scheme)
        if hint:
            label = KNOWN_SCHEMES[scheme][1]
            return BackendNotInstalledError(
                f"no backend for '{scheme}://' URIs such as {redact(uri)}: the {label} backend"
                f" is not installed. Install it with: {hint}"
                f" (installed backends: {installed}).{broken_note}"
            )
        return UnknownSchemeError(
            f"no backend serves the '{scheme}' scheme of {redact(uri)}. Installed backends:"
            f" {installed}. Install a plugin that serves '{scheme}://', or register one with"
            f" flyte_checkpoint.register_store().{broken_note}"
        )


def _origin(backend: Backend) -> str:
    dist = f", distribution {backend.distribution}" if backend.distribution else ""
    return f" (plugin {backend.plugin!r}{dist})"


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


_default: Registry | None = None
_default_lock = lock()


def get_registry() -> Registry:
    """The process-wide registry, made on first use."""
    global _default
    if _default is None:
        with _default_lock.get():
            if _default is None:
                _default = Registry()
    return _default


def store_for(uri: str) -> BlobStore:
    """The store for a URI, from the process-wide registry."""
    return get_registry().store_for(uri)


def register_store(
    name: str,
    schemes: str | tuple[str, ...] | list[str],
    factory: str | Callable[..., BlobStore],
    description: str = "",
    *,
    priority: int = 0,
    config: str | type[StoreConfig] | None = None,
) -> StoreSpec:
    """Register a store in the process-wide registry at runtime (tests, in-process backends).

    It takes precedence over plugins and built-ins for its schemes; undo with
    :func:`unregister_store`. ``factory`` and ``config`` are as in :class:`StoreSpec`.
    """
    spec = StoreSpec(
        name,
        tuple([schemes] if isinstance(schemes, str) else schemes),
        factory,
        description,
        priority,
        config,
    )
    get_registry().register(spec)
    return spec


def unregister_store(name: str) -> None:
    """Undo :func:`register_store`."""
    get_registry().unregister(name)


def configure_store(target: str, /, **settings: Any) -> None:
    """Configure a backend in code: for the whole process, or for the URIs under one prefix.

    ``target`` is a backend name (``"s3"``: every URI of the backend) or a URI prefix
    (``"s3://onprem-bucket/"``: the URIs that start with it; the longest matching prefix wins, and
    a prefix naming only a bucket gets its ``/``). A prefix's settings are laid over the
    backend's per-process ones; both beat the environment. Calling again replaces the target's
    settings; calling with none removes them. Stores already built for the backend are dropped
    (not closed: they may be in use), so the next use builds them with the new settings::

        configure_store("s3://onprem/", endpoint_url="https://minio.corp:9000",
                        access_key_id=..., secret_access_key=...)   # AWS for every other bucket

    Raises:
        ConfigurationError: an unknown backend name, a backend that takes no settings in code,
            or a setting its config refuses (the message names it and the fix).
        InvalidURIError: a prefix without a bucket, or with credentials.
        UnknownSchemeError: no backend serves the prefix's scheme.
    """
    get_registry().configure(target, settings)
