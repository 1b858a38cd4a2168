"""Test helpers: tar streams written by hand (so hostile members can be made) and tree snapshots."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from pathlib import Path


def member_rows(index, version: int | None = None) -> list[tuple]:
    """The index's members as :func:`~flyte_checkpoint.format.index.pack_payload` takes them for
    an index of ``version`` (default the one written): with each member's ``ccrc`` from version 4."""
    from flyte_checkpoint.format import index as ix

    if (version or ix.VERSION) >= ix.CHECKED_FROM:
        return [m.row() for m in index.members]
    return [(m.clen, m.ulen, m.crc) for m in index.members]


def older_index(raw: bytes, version: int) -> bytes:
    """The indexed folder object ``raw`` as an older library wrote it: its index re-encoded as
    ``version``: 1 or 2, every file and gap hashed with SHA-256 from the tar stream itself; 3,
    BLAKE3 as now, without the CRC-32 of each member's stored bytes."""
    from flyte_checkpoint.format import index as ix
    from flyte_checkpoint.storage.stores.memory import MemoryStore

    store = MemoryStore()
    store.write_bytes("memory://older-index/obj", raw)
    index = ix.read_index(store, "memory://older-index/obj")
    assert index is not None and index.algorithm == "blake3"
    tar = gzip.decompress(raw[: index.data_end])
    members = member_rows(index, version)
    files = []
    for e in index.files.values():
        start = index.members[e.first].uoff + e.offset
        digest = e.digest if version >= 3 else hashlib.sha256(tar[start : start + e.size]).hexdigest()
        files.append((e.name, e.first, e.last, e.offset, e.size, e.mtime, e.mode, digest))
    gaps = [
        (end, n, bytes.fromhex(h) if version >= 3 else hashlib.sha256(tar[end - n : end]).digest())
        for end, (n, h) in index.gaps.items()
    ]
    payload = ix.pack_payload(members, files, gaps, list(index.shards) if index.shards else None)
    return raw[: index.data_end] + ix.encode_tail(payload, index.data_end, version=version)


def tar_bytes(members: list[tuple[tarfile.TarInfo, bytes | None]], *, gz: bool = True) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    raw = buf.getvalue()
    return gzip.compress(raw) if gz else raw


def file_member(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def link_member(name: str, target: str, *, hard: bool = False) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
    info.linkname = target
    return info, None


def special_member(name: str, kind: bytes) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    return info, None


def dir_member(name: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    return info, None


def stdlib_tree(obj: Path, out: Path) -> dict[str, object]:
    """The tree Python's ``tarfile`` extracts from the gzip tar ``obj`` into ``out`` (after
    ``gzip.decompress`` read it whole), any warning of either an error."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tarfile.open(obj, "r:gz") as tf:
            tf.extractall(out, filter="tar")
        gzip.decompress(obj.read_bytes())
    return tree(out)


def tree(root: Path) -> dict[str, object]:
    """Every entry under root: file bytes, ("dir",) or ("link", target)."""
    out: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir",)
            else:
                out[rel] = p.read_bytes()
    return out


#: Each entry under a tree: kind, and for files a SHA-256 of the bytes and the mode.
Snapshot = dict[str, tuple[object, ...]]


def snapshot(root: Path) -> Snapshot:
    """Every entry under ``root``: kind, and for files a SHA-256 of the bytes and the mode."""
    out: Snapshot = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            out[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            out[rel] = ("dir",)
        else:
            out[rel] = ("file", hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mode & 0o777)
    return out
