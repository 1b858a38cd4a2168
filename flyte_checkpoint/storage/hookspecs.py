"""The hooks a backend plugin implements (pluggy project ``flyte_checkpoint``).

A plugin is a module (or object) with functions marked ``@hookimpl``, named by an
entry point in the group ``flyte_checkpoint``::

    [project.entry-points.flyte_checkpoint]
    mystore = "my_package.plugin"

The built-in ``file`` and ``memory`` stores come through the same hook.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pluggy

from ..errors import BackendConflictError

if TYPE_CHECKING:
    from .blobstore import BlobStore
    from .kit.settings import StoreConfig

PROJECT = "flyte_checkpoint"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@dataclass(frozen=True)
class StoreSpec:
    """What a plugin says about one store it provides.

    Attributes:
        name: the backend's name (unique among installed backends), e.g. ``"s3"``.
        schemes: the URI schemes it serves, lower case, e.g. ``("s3", "s3a")``.
        factory: builds the store: a callable, or a ``"package.module:attribute"`` path to one,
            imported on first use. It is called with the keyword settings given to
            :func:`configure_store` for the URI (the per-process ones, overlaid by the longest
            matching prefix's), as the caller wrote them; with no arguments when none are.
        description: one line shown when backends are listed.
        priority: breaks ties when two backends of one level claim a scheme (higher wins).
        config: the backend's :class:`~flyte_checkpoint.storage.kit.StoreConfig` subclass, or a
            ``"package.module:Class"`` path to it: :func:`configure_store` checks settings with it.
            ``None``: the backend takes no settings in code.
    """

    name: str
    schemes: tuple[str, ...]
    factory: str | Callable[..., BlobStore]
    description: str = ""
    priority: int = 0
    config: str | type[StoreConfig] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.schemes, str):
            object.__setattr__(self, "schemes", (self.schemes,))
        object.__setattr__(self, "schemes", tuple(s.lower().rstrip(":/") for s in self.schemes))
        if not self.name or not self.schemes:
            raise BackendConflictError("a StoreSpec needs a name and at least one scheme")


@hookspec
def register_stores(register: Callable[[StoreSpec], None]) -> None:
    """Name the stores this plugin provides, without importing their SDKs.

    Call ``register(StoreSpec(...))`` once per store: its backend name, the URI
    schemes it serves, its factory (a callable, or a ``"module:attribute"`` path
    imported only when a URI of one of those schemes is first used) and a one-line
    description. Every plugin's implementation is called; none stops the others.

    :param register: takes one :class:`flyte_checkpoint.storage.StoreSpec`.
    """
