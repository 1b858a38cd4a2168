"""Reads of one version of an object: what a load that makes several requests reads through.

A load reads an object in several requests (a full load: its trailer, then the stream; a
partial load: its trailer, its index, then the members it needs; ``inspect``: the stream,
then the index). A save that commits between two of them must not make the load mix two
objects, nor call the object damaged: :meth:`BlobStore.pin
<flyte_checkpoint.storage.blobstore.BlobStore.pin>` gives a :class:`PinnedObject`, the object
as it is now, and every read through it is of that version:

- a store that can pin (``supports_pinned_reads``) reads that version only: S3 and Azure send
  ``If-Match: <ETag>``, GCS asks for the generation, the file store reads the file it opened
  (a commit renames another file over the path), the memory store keeps the bytes object; a
  read of a version that is gone raises :class:`~flyte_checkpoint.errors.ObjectReplacedError`;
- any other store gets :class:`CheckedObject`: plain reads, and :meth:`PinnedObject.changed`
  tells afterwards whether the object is still the one described (its size and whatever
  version the store gives).

:func:`read_pinned` is how the core reads: it hands the format code a :class:`PinnedView` (a
read-only store of that one version, so the code reads it as it reads any store) and turns a
failure of the read into ``ObjectReplacedError`` when the object changed meanwhile, whatever
the failure looked like (a damaged index, a member that does not match, a short stream): an
object replaced while it was read is never reported as damaged, and the load's retry reads the
new object whole. A read that succeeds was checked against the version it started with (the
index's hashes, the gzip CRCs, the stream's length), so it holds that version's files.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import BinaryIO

from ..errors import (
    CorruptCheckpointError,
    NotFoundError,
    ObjectReplacedError,
    TransientError,
    UnsafeArchiveError,
)
from ..uri import redact
from .blobstore import BlobStore, BlobWriter
from .versions import CheckedObject, PinnedObject, describe, replaced


class PinnedView(BlobStore):
    """A read-only store of one object at one version: the format code reads it (``stat``,
    ``read_range``, ``open_read``) as it reads any store, and gets that version's bytes."""

    supports_list = False

    def __init__(self, store: BlobStore, pinned: PinnedObject) -> None:
        self.inner = store
        self.pinned = pinned
        self.supports_ranges = store.supports_ranges  # type: ignore[misc]

    @property
    def uri(self) -> str:
        return self.pinned.uri

    @property
    def size(self) -> int:
        return self.pinned.size

    def _check(self, uri: str) -> None:
        if uri != self.pinned.uri:
            raise ValueError(f"a pinned view of {redact(self.pinned.uri)} was asked for {redact(uri)}")

    def open_read(self, uri: str) -> BinaryIO:
        self._check(uri)
        return self.pinned.open_read()

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        self._check(uri)
        return self.pinned.read_range(start, length)

    def stat(self, uri: str) -> int | None:
        self._check(uri)
        return self.pinned.size

    def open_write(self, uri: str) -> BlobWriter:
        raise TypeError(f"a pinned view of {redact(self.pinned.uri)} is read-only")

    def delete(self, uri: str) -> None:
        raise TypeError(f"a pinned view of {redact(self.pinned.uri)} is read-only")

    def list(self, prefix: str) -> Iterator[str]:
        raise TypeError(f"a pinned view of {redact(self.pinned.uri)} does not list")

    def pin(self, uri: str) -> PinnedObject | None:
        self._check(uri)
        return self.pinned

    def changed(self) -> bool:
        """Whether the object is no longer the version read (False when the check itself fails:
        then what is reported is the read's own failure)."""
        try:
            return self.pinned.changed()
        except Exception:
            return False

    def __repr__(self) -> str:
        return f"<PinnedView of {redact(self.pinned.uri)} in {self.inner!r}>"


#: The failures a read of two versions can look like (a mix fails a check, a stream has the
#: other length, an index names what the other version lacks): turned into ObjectReplacedError
#: when the object changed. Others (a full disk, a denied request, a cancellation) stay.
MIXED_READ_FAILURES = (CorruptCheckpointError, UnsafeArchiveError, NotFoundError, TransientError)


@contextlib.contextmanager
def read_pinned(store: BlobStore, uri: str) -> Iterator[PinnedView | None]:
    """The object at ``uri`` pinned for the block (None when it is absent): read it through the
    view, and a failure of the block that a replacement can explain raises
    :class:`~flyte_checkpoint.errors.ObjectReplacedError` if the object did change (see the
    module docstring).

    Raises:
        ObjectReplacedError: the object was replaced or removed while the block read it.
        what ``store.pin`` raises (a missing bucket, a denied request...).
    """
    pinned = store.pin(uri)
    if pinned is None:
        yield None
        return
    with pinned:
        view = PinnedView(store, pinned)
        try:
            yield view
        except ObjectReplacedError:
            raise
        except MIXED_READ_FAILURES as exc:
            if view.changed():
                raise replaced(uri, f"what was read failed its checks, {type(exc).__name__}") from exc
            raise


__all__ = [
    "MIXED_READ_FAILURES",
    "CheckedObject",
    "PinnedObject",
    "PinnedView",
    "describe",
    "read_pinned",
    "replaced",
]
