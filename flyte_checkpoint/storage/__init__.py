"""Where checkpoints are stored: the store contract, the backend registry and the built-in stores.

Backend authors import from here (:class:`BlobStore`, :class:`BlobWriter`, :class:`ObjectInfo`,
:class:`StoreSpec`, :data:`hookimpl`, :func:`configure_store`) and from
:mod:`flyte_checkpoint.storage.kit`, the pieces every cloud backend shares. Nothing here imports
the checkpoint format (:mod:`flyte_checkpoint.format`).
"""

from __future__ import annotations

from .blobstore import BlobStore, BlobWriter, ObjectInfo
from .hookspecs import hookimpl
from .registry import (
    StoreSpec,
    configure_store,
    get_registry,
    register_store,
    store_for,
    unregister_store,
)

__all__ = [
    "BlobStore",
    "BlobWriter",
    "ObjectInfo",
    "StoreSpec",
    "configure_store",
    "get_registry",
    "hookimpl",
    "register_store",
    "store_for",
    "unregister_store",
]
