"""One version of one object: what :meth:`BlobStore.pin
<flyte_checkpoint.storage.blobstore.BlobStore.pin>` returns.

:class:`PinnedObject` is the interface a store that pins implements; :class:`CheckedObject` is
the default pin of a store that cannot (plain reads, and a check afterwards that the object is
still the one :func:`describe` found). Backend authors import them from
:mod:`flyte_checkpoint.storage.pinned`, which reads through them (see its docstring). They sit
here, below the store contract, so that ``BlobStore.pin``'s default uses them without the store
contract and the pinned reads importing each other.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, BinaryIO

from ..errors import ObjectReplacedError
from ..uri import redact

if TYPE_CHECKING:
    from .blobstore import BlobStore, ObjectInfo


def replaced(uri: str, detail: str = "") -> ObjectReplacedError:
    """The error for a read of ``uri`` whose object was replaced or removed meanwhile."""
    return ObjectReplacedError(
        f"{redact(uri)} changed while it was being read: another save replaced or removed it"
        f"{f' ({detail})' if detail else ''}. It is not damaged and nothing read was kept: it is"
        " read again, whole"
    )


class PinnedObject(abc.ABC):
    """One version of one object, as :meth:`BlobStore.pin` found it.

    Attributes:
        uri: the object's URI.
        size: its size in bytes, at that version.
        version: the store's token for that version (an ETag, a generation, a local file's
            inode and times), or ``None`` where the store gives none.
        exact: reads give that version's bytes or raise ``ObjectReplacedError`` (a store that
            pins); False: reads are of whatever is there, and :meth:`changed` tells afterwards.

    Used as a context manager, it is closed at the end (a held file descriptor released).
    """

    uri: str
    size: int
    version: str | None
    exact: bool = True

    @abc.abstractmethod
    def read_range(self, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` of this version (fewer at its end).

        Raises:
            ObjectReplacedError: the version is gone (a store that pins).
        """

    @abc.abstractmethod
    def open_read(self) -> BinaryIO:
        """A stream of this version from its start, as :meth:`BlobStore.open_read`.

        Raises:
            ObjectReplacedError: the version is gone (here or at a read; a store that pins).
        """

    @abc.abstractmethod
    def changed(self) -> bool:
        """Whether the object at :attr:`uri` is no longer this version (replaced or removed).
        Called after a read failed; may raise the store's errors."""

    def close(self) -> None:
        """Release what the pin holds. Idempotent."""

    def __enter__(self) -> PinnedObject:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CheckedObject(PinnedObject):
    """The pin of a store that cannot pin (:attr:`BlobStore.supports_pinned_reads` False): its
    reads are the store's own, and :meth:`changed` compares what :func:`describe` gives."""

    exact = False

    def __init__(self, store: BlobStore, uri: str, size: int, version: str | None) -> None:
        self.store, self.uri, self.size, self.version = store, uri, size, version

    @classmethod
    def of(cls, store: BlobStore, uri: str) -> CheckedObject | None:
        """The object at ``uri`` as ``store`` describes it now; None if it is absent."""
        found = describe(store, uri)
        return None if found is None else cls(store, uri, *found)

    def read_range(self, start: int, length: int) -> bytes:
        return self.store.read_range(self.uri, start, length)

    def open_read(self) -> BinaryIO:
        return self.store.open_read(self.uri)

    def changed(self) -> bool:
        return describe(self.store, self.uri) != (self.size, self.version)


def describe(store: BlobStore, uri: str) -> tuple[int, str | None] | None:
    """The size and the best version token a store without pins gives (the version of
    :meth:`~BlobStore.copy_source` where it copies, else a native listing's modification time);
    None if the object is absent."""
    if store.copy_limits is not None:
        try:
            source = store.copy_source(uri)
        except NotImplementedError:
            pass
        else:
            return None if source is None else (source.size, source.version)
    size = store.stat(uri)
    if size is None:
        return None
    if store.supports_list_details:
        entries = store.list_details(uri, recursive=False)
        listed: ObjectInfo | None = next((i for i in entries if i.uri == uri), None)
        if listed is not None and listed.modified is not None:
            return size, listed.modified.isoformat()
    return size, None


__all__ = ["CheckedObject", "PinnedObject", "describe", "replaced"]
