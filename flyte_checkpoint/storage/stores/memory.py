"""The ``memory`` store: process-local objects, shared by every store instance."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import BinaryIO

from ...errors import NotFoundError
from ...uri import redact
from ...util.forksafe import lock
from ..blobstore import (
    BlobStore,
    BlobWriter,
    CopyCheck,
    CopyLimits,
    CopySource,
    ObjectInfo,
    copy_source_changed,
    details_from_listing,
)
from ..pinned import PinnedObject

_objects: dict[str, bytes] = {}
_modified: dict[str, datetime] = {}
_versions: dict[str, int] = {}  # each commit of an object gets the next number (a copy source's version)
_next_version = [0]
_lock = lock()  # a forked child finds it free, whoever held it


class _MemoryWriter(BlobWriter):
    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        self._buf = io.BytesIO()

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        self._buf.write(data)

    def _copy(self, source: CopySource, start: int, length: int, expect: CopyCheck | None) -> None:
        with _lock.get():
            data = _objects.get(source.uri)
            if data is None or str(_versions.get(source.uri)) != source.version:
                raise copy_source_changed(source)
        view = memoryview(data)
        self._buf.write(view[start : start + length])
        if expect is not None:  # the bytes as they are in memory, compared where they lie
            self.copy_damage.add(source, expect.damaged(start, lambda at, n: view[at : at + n]))

    def _commit(self) -> None:
        self.copy_damage.raise_found(self.uri)
        with _lock.get():
            _objects[self.uri] = self._buf.getvalue()
            _modified[self.uri] = datetime.now(timezone.utc)
            _next_version[0] += 1
            _versions[self.uri] = _next_version[0]
            self.committed_version = str(_next_version[0])  # as its listing gives it
        self._buf = io.BytesIO()

    def _abort(self) -> None:
        self._buf = io.BytesIO()


class _MemoryPinned(PinnedObject):
    """A version of a memory object: the bytes object itself, which a commit replaces, never changes."""

    def __init__(self, uri: str, data: bytes, version: int) -> None:
        self.uri, self.size, self.version = uri, len(data), str(version)
        self._data = data

    def read_range(self, start: int, length: int) -> bytes:
        return self._data[start : start + length]

    def open_read(self) -> BinaryIO:
        return io.BytesIO(self._data)

    def changed(self) -> bool:
        with _lock.get():
            return str(_versions.get(self.uri)) != self.version


class MemoryStore(BlobStore):
    """Objects live in a dict for the life of the process (``memory://any/key``)."""

    supports_ranges = True
    supports_list_details = True
    supports_pinned_reads = True
    creates_atomically = True  # under the store's lock
    copy_limits = CopyLimits()  # a copy takes the bytes in memory: no minimum, no maximum
    # part_size stays None: a writer holds the whole object until its commit.

    def open_read(self, uri: str) -> BinaryIO:
        return io.BytesIO(self._get(uri))

    def open_write(self, uri: str) -> BlobWriter:
        return _MemoryWriter(uri)

    def write_bytes_if_absent(self, uri: str, data: bytes) -> bool:
        """Create the object under the store's lock, unless one is there."""
        with _lock.get():
            if uri in _objects:
                return False
            _objects[uri] = bytes(data)
            _modified[uri] = datetime.now(timezone.utc)
            _next_version[0] += 1
            _versions[uri] = _next_version[0]
        return True

    def stat(self, uri: str) -> int | None:
        with _lock.get():
            data = _objects.get(uri)
        return None if data is None else len(data)

    def copy_source(self, uri: str) -> CopySource | None:
        with _lock.get():
            data = _objects.get(uri)
            return None if data is None else CopySource(uri, len(data), str(_versions[uri]))

    def pin(self, uri: str) -> PinnedObject | None:
        with _lock.get():
            data = _objects.get(uri)
            return None if data is None else _MemoryPinned(uri, data, _versions[uri])

    def delete(self, uri: str) -> None:
        with _lock.get():
            _objects.pop(uri, None)
            _modified.pop(uri, None)
            _versions.pop(uri, None)

    def list(self, prefix: str) -> Iterator[str]:
        with _lock.get():
            keys = sorted(k for k in _objects if k.startswith(prefix))
        yield from keys

    def list_details(self, prefix: str, *, recursive: bool = True) -> Iterator[ObjectInfo]:
        with _lock.get():
            found = {
                k: (len(v), _modified.get(k), _versions.get(k))
                for k, v in _objects.items()
                if k.startswith(prefix)
            }

        def describe(uri: str) -> ObjectInfo:
            size, modified, version = found[uri]  # each commit's version: what a manifest compares
            return ObjectInfo(uri, size, modified, version=None if version is None else str(version))

        return details_from_listing(prefix, sorted(found), describe, recursive=recursive)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        return self._get(uri)[start : start + length]

    def _get(self, uri: str) -> bytes:
        with _lock.get():
            data = _objects.get(uri)
        if data is None:
            raise NotFoundError(f"no checkpoint object at {redact(uri)}")
        return data
