"""Each file's hash checked on a streamed load of an indexed object (docs/FORMAT.md).

A streamed load meets the index last: it follows the tar. So the object's trailer is read
first (:func:`for_object`, one ranged read of its tail), which names the index version and so
the hash its entries record; the extractor then hands each regular file's data, as it writes
it, to a hashing thread (:class:`.hashing.Hasher`; small files are hashed at once), with the
file's place in the tar stream.
Once the stream has ended and its tail has been checked (:func:`.index.check_tail`),
:meth:`FileHashes.verify` compares every file extracted with its index entry (place, size,
hash) and checks that the tar held data wherever the index places a file. A mismatch is a
:class:`~flyte_checkpoint.errors.CorruptCheckpointError`; the caller discards what was
restored. Objects without an index (Flyte's, older ones) are not hashed.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from . import digests
from .hashing import Hasher
from .inflate import damaged, placement_check

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..storage.blobstore import BlobStore
    from .index import Index


#: Files up to this size are hashed on the extractor's thread as they are written: hashing
#: 4 KiB costs about 2 us here, less than handing the piece to the hashing thread, whose loop
#: over many small pieces also contends for the GIL with the extractor.
INLINE_MAX = 64 * 1024


class FileHashes:
    """The hashes of the regular files one extraction writes, taken off its thread."""

    def __init__(self, algorithm: str, tail: bytes | None = None) -> None:
        self.algorithm = algorithm
        #: The object's trailer, as read (for :func:`.index.read_index`), if known.
        self.tail = tail
        #: The object's index, if it was read before the load (for :func:`.index.check_tail`).
        self.index: Index | None = None
        self._hasher: Hasher | None = None  # started with the first file
        self._files: list[tuple[str, int, int, Any]] = []  # name, offset in the tar, size, hash

    def start(self, name: str, offset: int, size: int) -> Callable[[bytes | memoryview], None]:
        """A regular file ``name`` whose ``size`` bytes start at ``offset`` of the tar stream:
        the function to call with each piece of its data, in order (pieces nobody changes
        afterwards). A file of up to :data:`INLINE_MAX` bytes is hashed at once, on the caller's
        thread; a larger one on the hashing thread."""
        digest = digests.new(self.algorithm)
        self._files.append((name, offset, size, digest))
        if size <= INLINE_MAX:
            return digest.update
        if self._hasher is None:
            self._hasher = Hasher(self.algorithm)
        return partial(self._hasher.update, digest)

    def abort(self) -> None:
        """Stop hashing (the extraction failed, or the object has no index to check against);
        a second call does nothing."""
        if self._hasher is not None:
            self._hasher.abort()

    def verify(self, index: Index, uri: str) -> int:
        """Check every file extracted against ``index`` (whose hash must be :attr:`algorithm`);
        returns the number of files checked.

        Raises:
            CorruptCheckpointError: a file is not where the index places it, or its content
                does not hash to what the index records, or the index places a file where
                the tar held none.
        """
        if self._hasher is not None:
            self._hasher.close()
        label = digests.LABEL[self.algorithm]
        placed = placement_check(index, uri)
        spans = set()
        for name, offset, size, digest in self._files:
            placed(name, offset, size)
            if digest.hexdigest() != index.files[name].digest:
                raise damaged(uri, f"{name[:200]!r} does not match the {label} its index records")
            spans.add((offset, size))
        for e in index.files.values():  # a hard link's names share their first name's span
            if (index.members[e.first].uoff + e.offset, e.size) not in spans:
                raise damaged(uri, f"the tar holds no file where its index places {e.name[:200]!r}")
        return len(self._files)


def for_object(store: BlobStore, uri: str, size: int) -> FileHashes | None:
    """The hashes to take while loading the object at ``uri`` of ``size`` bytes, if its
    trailer names an index (one ranged read, on a store that has them); None otherwise."""
    from .index import read_trailer

    if not getattr(store, "supports_ranges", False):
        return None
    found = read_trailer(store, uri, size)
    return None if found is None else FileHashes(digests.BY_VERSION[found[0]], found[1])


__all__ = ["FileHashes", "for_object"]
