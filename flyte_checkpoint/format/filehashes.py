"""Each file's hash checked on a streamed load of an indexed object (docs/FORMAT.md).

A streamed load meets the index last: it follows the tar. So the object's trailer is read
first (:func:`for_object`, one ranged read of its tail), which names the index version and so
the hash its entries record; the extractor then hands each regular file's data, as it writes
it, to a hashing thread (:class:`.hashing.Hasher`; small files are hashed at once), with the
file's place in the tar stream. When the load read the index before the stream (to choose how
to inflate), files of 64 KiB of tar and more on average are instead hashed where the index
places them, on the thread that inflates the stream (:class:`PlacedHashes`).
Once the stream has ended and its tail has been checked (:func:`.index.check_tail`),
:meth:`FileHashes.verify` compares every file extracted with its index entry (place, size,
hash) and checks that the tar held data wherever the index places a file. A mismatch is a
:class:`~flyte_checkpoint.errors.CorruptCheckpointError`; the caller discards what was
restored. Objects without an index (Flyte's, older ones) are not hashed.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, BinaryIO

from ..errors import CorruptCheckpointError
from . import digests
from .hashing import Hasher
from .inflate import LoadStats, TarVerifier, damaged, placement_check

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
            self._hasher = Hasher()
        return partial(self._hasher.update, digest)

    def placed(self, uri: str) -> PlacedHashes | None:
        """The check by place (:class:`PlacedHashes`), if the object's index was read before
        the load, records :attr:`algorithm` and holds at least :data:`.inflate.FILE_BYTES_MIN`
        bytes of tar per file; None otherwise (each file hashed as written). With many small
        files the check's work per file, on a second thread, contends with the extractor's
        for the GIL, where hashing 4 KiB at once costs it about 2 us."""
        from .inflate import FILE_BYTES_MIN

        index = self.index
        if index is None or index.algorithm != self.algorithm:
            return None
        if sum(m.ulen for m in index.members) < FILE_BYTES_MIN * max(len(index.files), 1):
            return None
        return PlacedHashes(index, uri)

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
        _all_written(index, spans, uri)
        return len(self._files)


class PlacedHashes:
    """The check of a streamed load whose index was read before the stream (by the ranged reads
    that chose how to load): the tar stream's bytes are hashed where the index places each
    file, on the thread that inflates them (:meth:`wrap`), as a parallel load does
    (:class:`~.inflate.TarVerifier`), while the data is still in cache, rather than handed from
    the extractor to a hashing thread piece by piece (on the model set, 1 GiB in 6 files on 2
    cores, the hashing thread made the load slower still; docs/changelog.md ("The index")
    gives this way's figures against a load that checks CRC-32s only). The extractor reports
    each file it writes (:meth:`on_file`): it must be where the index places a file, so that
    what it wrote is what was hashed. :meth:`finish` then checks that every file the index lists was written.

    The caller must check that the stream ended in the same index (:func:`.index.check_tail`
    with it as ``known``) before :meth:`finish`: a file that does not match the index read
    before, or is not where it places one, may belong to another object that replaced it since.
    So those errors wait for the stream's end: a damaged object then raises them, and a
    replaced one is loaded again."""

    def __init__(self, index: Index, uri: str) -> None:
        self.index = index
        self._uri = uri
        self._verifier = TarVerifier(index, uri, LoadStats())
        self._verifier.defer = True
        self._placed = placement_check(index, uri)
        self._spans: set[tuple[int, int]] = set()

    def wrap(self, stream: BinaryIO) -> _Hashed:
        """``stream`` (the tar stream, read from its start), its bytes hashed as they are read."""
        return _Hashed(stream, self._verifier)

    def on_file(self, name: str, offset: int, size: int) -> None:
        try:
            self._placed(name, offset, size)
        except CorruptCheckpointError as exc:  # kept for finish, as a file that does not match
            self._verifier.error = self._verifier.error or exc
        self._spans.add((offset, size))

    def finish(self) -> int:
        """Raise unless every file the index lists was hashed and written; the number hashed."""
        if self._verifier.error is not None:
            raise self._verifier.error
        self._verifier.finish()
        _all_written(self.index, self._spans, self._uri)
        return self._verifier.verified


class _Hashed:
    """A readable of ``stream`` whose bytes a :class:`~.inflate.TarVerifier` sees as read."""

    def __init__(self, stream: BinaryIO, verifier: TarVerifier) -> None:
        self._read = stream.read
        self._verifier = verifier
        self._at = 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        data = self._read(n)
        self._verifier.feed(self._at, data)
        self._at += len(data)
        return data


def _all_written(index: Index, spans: set[tuple[int, int]], uri: str) -> None:
    """Raise unless the tar held a file (its data's offset and size in ``spans``) wherever
    ``index`` places one."""
    for e in index.files.values():  # a hard link's names share their first name's span
        if (index.members[e.first].uoff + e.offset, e.size) not in spans:
            raise damaged(uri, f"the tar holds no file where its index places {e.name[:200]!r}")


def for_object(store: BlobStore, uri: str, size: int) -> FileHashes | None:
    """The hashes to take while loading the object at ``uri`` of ``size`` bytes, if its
    trailer names an index (one ranged read, on a store that has them); None otherwise."""
    from .index import read_trailer

    if not getattr(store, "supports_ranges", False):
        return None
    found = read_trailer(store, uri, size)
    return None if found is None else FileHashes(digests.BY_VERSION[found[0]], found[1])


__all__ = ["FileHashes", "PlacedHashes", "for_object"]
