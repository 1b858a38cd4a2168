"""Checkpoint history: a manifest beside every object a save commits, the listing of a run's
checkpoints from listings and manifests alone, generations kept within an attempt, and what a
fallback load walks. It sits below :mod:`flyte_checkpoint.checkpoint` (which calls into it) and
above :mod:`flyte_checkpoint.lifecycle`. See docs/history.md.

``fc.history(uri_or_run)`` is this package called: the package and the function share the name
``flyte_checkpoint.history`` (importing a submodule sets the package as the attribute), so the
package itself is callable, as :func:`flyte_checkpoint.history.listing.history`.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .listing import Entry


class _CallableModule(types.ModuleType):
    def __call__(self, uri_or_run: str, *, root: str | None = None, **kwargs: Any) -> list[Entry]:
        """A checkpoint's or a run's checkpoints, newest first, from listings and manifests
        alone (no object is read): :func:`flyte_checkpoint.history.listing.history`."""
        from .listing import history

        return history(uri_or_run, root=root, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
