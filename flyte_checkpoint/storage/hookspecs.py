"""The hooks a backend plugin implements (pluggy project ``flyte_checkpoint``).

A plugin is a module (or object) with functions marked ``@hookimpl``, named by an
entry point in the group ``flyte_checkpoint``::

    [project.entry-points.flyte_checkpoint]
    mystore = "my_package.plugin"

The built-in ``file`` and ``memory`` stores come through the same hook.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from .registry import StoreSpec

PROJECT = "flyte_checkpoint"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_stores(register: Callable[[StoreSpec], None]) -> None:
    """Name the stores this plugin provides, without importing their SDKs.

    Call ``register(StoreSpec(...))`` once per store: its backend name, the URI
    schemes it serves, its factory (a callable, or a ``"module:attribute"`` path
    imported only when a URI of one of those schemes is first used) and a one-line
    description. Every plugin's implementation is called; none stops the others.

    :param register: takes one :class:`flyte_checkpoint.storage.registry.StoreSpec`.
    """
