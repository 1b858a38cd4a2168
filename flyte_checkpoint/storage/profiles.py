"""Configuration in code: the settings given to ``configure_store``, per backend and per URI prefix.

A *profile* is a set of keyword settings for one backend. ``configure_store("s3", ...)`` sets the
backend's per-process profile; ``configure_store("s3://onprem/", ...)`` sets a profile for the URIs
that start with that prefix. For a URI, the longest matching prefix wins, and its settings are laid
over the per-process ones (a prefix setting beats a per-process one of the same name; the rest are
inherited). What the store's factory receives is that merged dictionary, unparsed: the backend's
config class parses it, and so the values stay what the caller wrote.

There is no per-prefix environment form: a variable's name cannot carry a URI.
This module only holds and matches profiles; the registry validates them and builds the stores.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..uri import normalize, redact
from .kit.locations import parse_location


class Profiles:
    """Every backend's per-process and per-prefix settings.

    Writers are serialised by the registry's lock; readers take none. A write never changes a
    table in place: it replaces it with a new one, so a reader sees the tables before or after
    the write, never one being changed (the final save on SIGTERM looks its store up while the
    thread the signal stopped may hold the registry's lock).
    """

    def __init__(self) -> None:
        self._process: dict[str, dict[str, Any]] = {}
        self._prefixes: dict[str, dict[str, dict[str, Any]]] = {}  # backend -> prefix -> settings

    def set(self, backend: str, prefix: str, settings: Mapping[str, Any]) -> None:
        """Make ``settings`` the profile of ``backend`` (``prefix=""``) or of one of its prefixes;
        empty ``settings`` remove that profile."""
        if prefix:
            table = {p: s for p, s in self._prefixes.get(backend, {}).items() if p != prefix}
            if settings:
                table[prefix] = dict(settings)
            self._prefixes = {**self._prefixes, backend: table}
        elif settings:
            self._process = {**self._process, backend: dict(settings)}
        else:
            self._process = {b: s for b, s in self._process.items() if b != backend}

    def merged(self, backend: str, prefix: str, settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The settings a store for ``prefix`` (``""``: the backend's default store) receives, with
        ``settings`` standing in for that prefix's profile when given."""
        if settings is None:
            settings = self._prefixes.get(backend, {}).get(prefix, {}) if prefix else {}
        return {**self._process.get(backend, {}), **settings}

    def match(self, backend: str, uri: str) -> tuple[str, dict[str, Any]]:
        """``(prefix, settings)`` for ``uri``: the longest configured prefix it starts with (``""``
        when none does) and the settings its store is built with (``{}``: none configured)."""
        prefixes = self._prefixes.get(backend)
        best = ""
        if prefixes:
            spelled = normalize(uri)
            best = max((p for p in prefixes if spelled.startswith(p)), key=len, default="")
        return best, self.merged(backend, best)

    def configured(self, backend: str) -> bool:
        """True when the backend has any profile."""
        return backend in self._process or bool(self._prefixes.get(backend))


def prefix_of(target: str, *, backend: str, schemes: tuple[str, ...]) -> str:
    """``target`` as a profile's prefix: normalized (scheme lower-case), and ending in ``/`` when it
    names only a bucket (so that ``s3://data`` does not also match ``s3://data-archive/``).

    Raises:
        InvalidURIError: a prefix without a bucket (``s3://``), with credentials, or of a scheme
            the backend does not serve.
    """
    prefix = normalize(target, param="configure_store's target")
    scheme = prefix.partition("://")[0]
    form = f"{scheme}://BUCKET/ or {scheme}://BUCKET/PREFIX (a URI prefix for configure_store)"
    location = parse_location(prefix, schemes=schemes, want_key=False, cloud=backend, form=form)
    return prefix if location.key or prefix.endswith("/") else prefix + "/"


def origin(target: str) -> str:
    """How error messages name a ``configure_store`` call: ``configure_store('s3://b/')``."""
    return f"configure_store({redact(target)!r})"


__all__ = ["Profiles", "origin", "prefix_of"]
