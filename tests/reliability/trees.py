"""Checkpoint trees for the reliability tests: make one, describe one, load one back."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import flyte_checkpoint as fc

#: Each entry under a tree: kind, and for files a SHA-256 of the bytes and the mode.
Snapshot = dict[str, tuple[object, ...]]


def make_tree(root: Path, version: int) -> Snapshot:
    """A checkpoint directory of about 5 MiB in 8 files, different for every version."""
    sizes = {
        "model.bin": 2 * 1024 * 1024,
        "optim/adam.bin": 1536 * 1024,
        "optim/extra.bin": 512 * 1024,
        "shards/0.bin": 384 * 1024,
        "shards/1.bin": 384 * 1024,
        "shards/2.bin": 256 * 1024,
        "meta.json": 0,
    }
    for rel, size in sizes.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size) if size else f'{{"version": {version}}}'.encode())
    (root / "empty").write_bytes(b"")
    (root / "latest").symlink_to("model.bin")
    return snapshot(root)


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


def loaded(uri: str, scratch: Path) -> Snapshot | None:
    """What ``Checkpoint`` restores from ``uri`` (``None``: no checkpoint)."""
    with fc.Checkpoint(str(scratch / "never-written"), uri) as cp:
        path = cp.load_sync()
        if path is None:
            return None
        assert path == cp.path, f"a directory checkpoint loaded as a payload: {path}"
        return snapshot(path)
