"""Restore one file of a folder checkpoint: by ranged reads where the object has an index
(:mod:`.index`), by streaming the archive up to that file where it has none."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, BinaryIO

from ..errors import NotFoundError, UnsafeArchiveError
from .index import read_file, read_index

if TYPE_CHECKING:
    from ..storage.blobstore import BlobStore


def member_name(name: str) -> str:
    """``name`` as the tar names it (``./`` and repeated slashes dropped); refuses names that
    leave the tree."""
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or name.startswith("/") or ".." in parts:
        raise UnsafeArchiveError(
            f"{name!r} is not a path inside a checkpoint: give a relative path such as 'a/b.bin'"
        )
    return "/".join(parts)


def restore_file(store: BlobStore, uri: str, size: int, name: str, out: BinaryIO) -> bool:
    """Write the data of the regular file ``name`` of the folder checkpoint at ``uri`` to
    ``out``; returns True when the index was used, False when the archive was streamed (to
    its end, so that every gzip member's CRC is checked before the file is kept).

    Raises:
        NotFoundError: the checkpoint holds no regular file ``name`` (or is not a folder).
        CorruptCheckpointError: the index, a member or the file's hash is damaged.
    """
    name = member_name(name)
    index = read_index(store, uri, size)
    if index is not None:
        if name not in index.files:
            raise _absent(uri, name)
        read_file(store, uri, index, name, out)
        return True
    _stream(store, uri, name, out)
    return False


def _absent(uri: str, name: str) -> NotFoundError:
    from ..uri import redact

    return NotFoundError(
        f"{redact(uri)} holds no file {name!r} (links and folders are not restored one by one):"
        " check the name, or load() the whole checkpoint"
    )


def _stream(store: BlobStore, uri: str, name: str, out: BinaryIO) -> None:
    from . import tarstream as ts
    from .archive import ExactReader, read_members
    from .compression import GZIP_MAGIC, decompressor

    with store.open_read(uri) as raw:
        head = raw.read(2)
        if head != GZIP_MAGIC:
            raise _absent(uri, name)

        class _Joined:
            def __init__(self) -> None:
                self.first = head

            def read(self, n: int = -1) -> bytes:
                if self.first:
                    data, self.first = self.first, b""
                    return data
                return raw.read(n)

        inflated = decompressor(_Joined())  # type: ignore[arg-type]
        reader = ExactReader(inflated)  # type: ignore[arg-type]
        for member in read_members(reader):
            if member.header.typeflag in (ts.REGTYPE, ts.AREGTYPE) and member_name(member.name) == name:
                left = member.size
                while left:
                    chunk = reader.read_some(min(left, 4 << 20))
                    out.write(chunk)
                    left -= len(chunk)
                # the rest of the stream, so every member's CRC is checked: nothing unverified is kept
                while inflated.read(4 << 20):
                    pass
                from .index import check_tail

                check_tail(inflated.tail, uri)  # and whatever follows the tar
                return
            reader.skip(member.size)
    raise _absent(uri, name)


def restore_file_to(store: BlobStore, uri: str, size: int, name: str, path: str) -> bool:
    """:func:`restore_file` into the file ``path`` (replaced atomically, folders made)."""
    import tempfile

    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".restore-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            indexed = restore_file(store, uri, size, name, f)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return indexed


__all__ = ["member_name", "restore_file", "restore_file_to"]
