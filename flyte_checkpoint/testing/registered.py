"""A store under test put in the registry for one ``Checkpoint`` load or save on its scheme."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..storage.blobstore import BlobStore
from ..uri import scheme_of
from ..util.retry import RetryPolicy
from .faultproxy import HANG_GUARD

#: The core's retry policy in these tests: the default's shape, with short pauses.
QUICK_RETRY = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05, total_timeout=HANG_GUARD)


def load_through(store: BlobStore, src: str, dest: str) -> Any:
    """``Checkpoint(dest, src).load_sync()`` with ``store`` registered for ``src``'s scheme."""
    from ..checkpoint import Checkpoint

    with _registered(store, src), Checkpoint(dest, src, retry=QUICK_RETRY) as cp:
        return cp.load_sync()


def save_through(store: BlobStore, dest: str, state: bytes) -> None:
    """``Checkpoint(dest).save_sync(state)`` with ``store`` registered for ``dest``'s scheme."""
    from ..checkpoint import Checkpoint

    with _registered(store, dest), Checkpoint(dest, retry=QUICK_RETRY) as cp:
        cp.save_sync(state)


@contextlib.contextmanager
def _registered(store: BlobStore, uri: str) -> Iterator[None]:
    from ..storage.registry import register_store, unregister_store

    name = "flyte-checkpoint-fault-suite"
    register_store(name, (scheme_of(uri),), lambda **_: store, priority=1000)
    try:
        yield
    finally:
        unregister_store(name)


__all__ = ["QUICK_RETRY", "load_through", "save_through"]
