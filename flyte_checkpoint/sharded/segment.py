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
import stat
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
    needs of it. An empty folder writes no member (and so no padding: ``pad()`` sees nothing).

    Raises what :func:`~flyte_checkpoint.format.archive.pack_directory` raises.
    """
    from ..format import tarstream as ts
    from ..format.archive import pack_directory
    from ..format.pipeline import ParallelGzipWriter

    index = _SegmentIndex()
    names: list[tuple[str, bytes]] = []
    gz = ParallelGzipWriter(sink, index=index)
    try:
        pack_directory(folder, gz, index=index, end=False, names=names, leave_out=leave_out)  # type: ignore[arg-type]
    except BaseException:
        gz.abort()
        raise
    if gz.bytes_in:
        gz.close()
    else:
        gz.abort()  # an empty folder: no member at all (a segment of nothing needs no part)
    for member in padding(pad() if pad is not None else 0):
        sink.write(member)
        index.add_member(len(member), 0, 0, zlib.crc32(member))
    return {
        "ok": True,
        "members": [list(m.row()) for m in index.members],
        "files": [[*f[:5], f[5] if isinstance(f[5], str) else f[5]()] for f in index._files],
        "names": [[name.rstrip("/"), flag == ts.DIRTYPE] for name, flag in names],
    }


#: Bytes a gzip member adds to the data it stores at most, besides 5 a 65,535-byte deflate
#: block: its header (10), trailer (8) and one empty stored block (5). A member is never larger
#: than the same data stored (:func:`~flyte_checkpoint.format.pipeline.compress_block`).
MEMBER_OVERHEAD = 23


def gzip_bound(tar_bytes: int, entries: int) -> int:
    """The most bytes the segment writer's gzip members of ``tar_bytes`` bytes of tar stream
    (of ``entries`` members) take: the data stored (5 bytes a 65,535-byte block), and each
    member's :data:`MEMBER_OVERHEAD`, for as many members as the writer can make of it (one a
    quarter block at most, and two cuts and a write around each file)."""
    from ..format.pipeline import BLOCK_SIZE

    members = 8 * -(-tar_bytes // BLOCK_SIZE) + 3 * entries + 4
    return tar_bytes + 5 * (tar_bytes // 0xFFFF + 1) + MEMBER_OVERHEAD * members


def segment_bound(folder: str | os.PathLike[str]) -> int:
    """An upper bound of the bytes :func:`pack_segment` writes for ``folder`` (before padding),
    from one walk of it (no file is read): each entry's tar header as the packer writes it,
    each file's data in 512-byte blocks, and :func:`gzip_bound` of that. A link is counted as
    the packer stores it: a link inside the tree as a link, one that leaves it as the file's
    or folder's content; this library's working files are left out (as the packer does). A
    folder that grows after this walk can outgrow the bound (the save then fails, naming it)."""
    from ..format import tarstream as ts
    from ..util.workfiles import is_working_file

    root = os.path.realpath(os.fspath(folder))
    inside = root.rstrip("/") + "/"
    seen: dict[tuple[int, int], str] = {}
    walking: set[str] = set()
    total = entries = 0

    def head(name: str, size: int = 0, link: str = "") -> int:
        return len(ts.header(name, mode=0o644, size=size, mtime=0, typeflag=ts.REGTYPE, linkname=link))

    def walk(path: str, arcname: str) -> None:
        nonlocal total, entries
        real = os.path.realpath(path)
        if real in walking:
            return  # a loop: the packer refuses it
        walking.add(real)
        try:
            with os.scandir(path) as it:
                found = [e for e in it if not is_working_file(e.name)]
        except OSError:
            found = []  # the packer meets it and says what is wrong
        for entry in found:
            name = f"{arcname}/{entry.name}" if arcname else entry.name
            entries += 1
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                total += head(name)
                continue
            if stat.S_ISLNK(st.st_mode):
                try:
                    target = os.readlink(entry.path)
                    real_target = os.path.realpath(entry.path)
                except OSError:
                    total += head(name)
                    continue
                if real_target == root or real_target.startswith(inside) or not os.path.exists(real_target):
                    # stored as a link: as written, or made relative to its folder (the longer)
                    made = os.path.relpath(real_target, os.path.realpath(os.path.dirname(entry.path)))
                    total += head(name, link=max(target, made, key=lambda t: len(os.fsencode(t))))
                    continue
                try:
                    st = os.stat(entry.path)
                except OSError:
                    total += head(name)
                    continue
            if stat.S_ISDIR(st.st_mode):
                total += head(name + "/")
                walk(entry.path, name)
            elif (st.st_dev, st.st_ino) in seen:  # a hard link to a file already counted: a header
                total += head(name, link=seen[st.st_dev, st.st_ino])
            else:
                if st.st_nlink > 1:
                    seen[st.st_dev, st.st_ino] = name
                total += head(name, size=st.st_size) + st.st_size + ts.padding(st.st_size)
        walking.discard(real)

    walk(os.fspath(folder), "")
    return gzip_bound(total, entries)


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


def union_counts(reports: list[Report]) -> tuple[int, int]:
    """(members, reach) of the union's tar stream, as a load counts them: every rank's headers
    (a folder two ranks share is two members), and the furthest byte a member's header and data
    reach (its data's end, before the padding that completes the last block)."""
    from ..format import tarstream as ts

    members = reach = base = 0
    for report in reports:
        stream = sum(row[1] for row in report["members"])
        members += len(report["names"])
        if report["names"]:
            end = stream
            if report["files"]:
                _, offset, size, *_ = report["files"][-1]
                if offset + size + ts.padding(size) == stream:  # the segment's last member is a file
                    end -= ts.padding(size)
            reach = base + end
        base += stream
    return members, reach


def check_limits(reports: list[Report], uri: str) -> None:
    """Raise :class:`UnsupportedDataError` when the union of the ranks' folders holds more
    members, or more bytes of tar stream, than a load here accepts (each rank's folder was
    checked alone as it was packed; a plain save of the union is refused the same way).

    Raises:
        ValueError: a limit's environment variable holds something other than a number.
    """
    from ..errors import UnsupportedDataError
    from ..util.limits import MAX_MEMBERS_ENV, MAX_UNPACKED_ENV, LoadLimits

    limits = LoadLimits.from_env()
    members, reach = union_counts(reports)
    ranks = len(reports)
    if members > limits.max_members:
        raise UnsupportedDataError(
            f"the union of the {ranks} ranks' folders holds {members:,} members (files, folders and"
            f" links; a folder that several ranks save counts once for each), more than a load accepts"
            f" ({MAX_MEMBERS_ENV}={limits.max_members:,}): nothing was committed and the previous"
            f" checkpoint at {uri} is unchanged. Save fewer entries, or raise {MAX_MEMBERS_ENV} here"
            " and wherever the checkpoint is loaded"
        )
    if limits.max_bytes is not None and reach > limits.max_bytes:
        raise UnsupportedDataError(
            f"the union of the {ranks} ranks' folders unpacks to {reach:,} bytes (file data, and 512"
            f" bytes for each header), more than a load accepts ({MAX_UNPACKED_ENV}="
            f"{limits.max_bytes:,}): nothing was committed and the previous checkpoint at {uri} is"
            f" unchanged. Save less, or raise {MAX_UNPACKED_ENV} here and wherever the checkpoint is"
            " loaded"
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
