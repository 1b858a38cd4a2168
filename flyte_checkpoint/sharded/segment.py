"""A rank's segment of a sharded checkpoint, and the tail that makes the segments one object.

A segment is gzip members of the tar stream of one rank's folder, with no end-of-archive
blocks: segments written back to back are one tar stream. The committing rank appends the
tail: one gzip member holding the end-of-archive blocks, then the index of the union (the
rank's members and files, shifted by the segments before them) and the trailer
(docs/FORMAT.md, "Sharded saves"). A segment that must reach a store's minimum part size is
padded with empty gzip members carrying an extra field (subfield ``FP``), which every gzip
reader decodes to nothing.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from typing import Any, BinaryIO

from ..errors import ShardedSaveError
from ..format.index import IndexBuilder, padding
from ..util.paths import LeaveOut

Report = dict[str, Any]


class _SegmentIndex(IndexBuilder):
    """Records members and files; the index itself is written once, by the committing rank."""

    def encode(self) -> bytes:
        return b""


def pack_segment(
    folder: str | os.PathLike[str],
    sink: BinaryIO,
    pad: Callable[[], int] | None = None,
    leave_out: LeaveOut | None = None,
) -> Report:
    """Write ``folder``'s tar stream (no end-of-archive; ``leave_out`` left out) to ``sink`` as
    gzip members, then ``pad()`` bytes of padding members; returns what the committing rank
    needs of it.

    Raises what :func:`~flyte_checkpoint.format.archive.pack_directory` raises.
    """
    from ..format import tarstream as ts
    from ..format.archive import pack_directory
    from ..format.pipeline import ParallelGzipWriter

    index = _SegmentIndex()
    names: list[tuple[str, bytes]] = []
    with ParallelGzipWriter(sink, index=index) as gz:
        pack_directory(folder, gz, index=index, end=False, names=names, leave_out=leave_out)  # type: ignore[arg-type]
    for member in padding(pad() if pad is not None else 0):
        sink.write(member)
        index.add_member(len(member), 0, 0, zlib.crc32(member))
    return {
        "ok": True,
        "members": [list(m.row()) for m in index.members],
        "files": [[*f[:5], f[5] if isinstance(f[5], str) else f[5]()] for f in index._files],
        "names": [[name.rstrip("/"), flag == ts.DIRTYPE] for name, flag in names],
    }


def check_union(reports: list[Report]) -> None:
    """Raise :class:`ShardedSaveError` if two ranks wrote one name (folders may be shared)."""
    seen: dict[str, tuple[int, bool]] = {}
    for rank, report in enumerate(reports):
        for name, is_dir in report["names"]:
            first = seen.setdefault(name, (rank, is_dir))
            if first[0] != rank and not (first[1] and is_dir):
                raise ShardedSaveError(
                    f"rank {first[0]} and rank {rank} both wrote {name!r}: a sharded checkpoint is the"
                    " union of the ranks' folders, so each name (other than a shared folder) must come"
                    " from one rank. Give each rank's files distinct names"
                )


def tail(reports: list[Report]) -> bytes:
    """The end of the object after every segment: the end-of-archive member, the index of
    the union and the trailer."""
    from ..format import tarstream as ts
    from ..format.compression import compress_member

    builder = IndexBuilder()
    base = 0
    for report in reports:
        for clen, ulen, crc, ccrc in report["members"]:
            builder.add_member(clen, ulen, crc, ccrc)
        for name, offset, size, mtime, mode, digest in report["files"]:
            builder.add_file(name, base + offset, size, mtime, mode, digest)
        base += sum(row[1] for row in report["members"])
    end = ts.end_of_archive()
    member = compress_member(end)
    builder.add_member(len(member), len(end), zlib.crc32(end), zlib.crc32(member))
    builder.shards = [len(report["members"]) for report in reports]
    return member + builder.encode()
