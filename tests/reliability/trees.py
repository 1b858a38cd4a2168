"""Checkpoint trees for the reliability tests: make one, describe one, load one back."""

from __future__ import annotations

import os
from pathlib import Path

import flyte_checkpoint as fc
from tests.helpers import Snapshot, snapshot


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


def loaded(uri: str, scratch: Path) -> Snapshot | None:
    """What ``Checkpoint`` restores from ``uri`` (``None``: no checkpoint)."""
    with fc.Checkpoint(str(scratch / "never-written"), uri) as cp:
        path = cp.load_sync()
        if path is None:
            return None
        assert path == cp.path, f"a directory checkpoint loaded as a payload: {path}"
        return snapshot(path)
