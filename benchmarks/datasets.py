"""Generated data sets: model-like float32 shards, JSON lines, many small files.

Sizes scale with ``scale`` (1.0 = the published sizes: 1 GiB, 512 MiB, 20,000 files).
Data is cached under the given root and reused when it already has the right size.
"""

from __future__ import annotations

import array
import json
import os
import random
import shutil
from pathlib import Path

MiB = 1024 * 1024


def _gauss_block(nbytes: int, seed: int) -> bytes:
    rng = random.Random(seed)
    values = array.array("f", (rng.gauss(0.0, 0.02) for _ in range(nbytes // 4)))
    return values.tobytes()


def model_like(root: Path, scale: float) -> Path:
    """Float32 weights in 4-8 shards (normal values: about 1.08x under gzip)."""
    total = max(4 * MiB, int(1024 * MiB * scale))
    out = root / f"model-{total}"
    if out.exists():
        return out
    tmp = out.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tile = _gauss_block(8 * MiB, seed=1)  # repeats 8 MiB apart: far beyond deflate's 32 KiB window
    shards = 6
    per = total // shards
    for i in range(shards):
        with open(tmp / f"model-{i:05d}-of-{shards:05d}.safetensors", "wb") as f:
            left = per
            k = 0
            while left > 0:
                piece = tile[(k * 4096) % len(tile) :] + tile[: (k * 4096) % len(tile)]
                piece = piece[: min(left, len(piece))]
                f.write(piece)
                left -= len(piece)
                k += 1
    (tmp / "config.json").write_text(json.dumps({"layers": 24, "hidden": 2048, "dtype": "float32"}))
    tmp.rename(out)
    return out


_WORDS = [
    "loss",
    "accuracy",
    "epoch",
    "step",
    "learning",
    "rate",
    "warmup",
    "batch",
    "gradient",
    "norm",
    "clip",
    "tokens",
    "sequence",
    "model",
    "layer",
    "attention",
    "head",
    "dropout",
    "optimizer",
    "adam",
    "momentum",
    "decay",
    "schedule",
    "cosine",
    "linear",
    "checkpoint",
    "resume",
    "shard",
    "rank",
    "world",
    "size",
    "node",
    "gpu",
    "memory",
    "allocated",
    "reserved",
    "throughput",
]


def json_lines(root: Path, scale: float) -> Path:
    """JSON-lines logs and metrics (about 5-6x under gzip)."""
    total = max(2 * MiB, int(512 * MiB * scale))
    out = root / f"jsonl-{total}"
    if out.exists():
        return out
    tmp = out.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    rng = random.Random(2)
    files = 8
    per = total // files
    for i in range(files):
        with open(tmp / f"metrics-{i}.jsonl", "w") as f:
            written = 0
            n = 0
            while written < per:
                rec = {
                    "step": n,
                    "rank": rng.randrange(64),
                    "loss": round(rng.random() * 4, 6),
                    "lr": round(rng.random() * 1e-3, 9),
                    "tokens": rng.randrange(1 << 20),
                    "event": " ".join(rng.choice(_WORDS) for _ in range(rng.randrange(4, 14))),
                    "host": f"node-{rng.randrange(128):03d}.cluster.local",
                }
                line = json.dumps(rec) + "\n"
                f.write(line)
                written += len(line)
                n += 1
    tmp.rename(out)
    return out


def small_files(root: Path, scale: float) -> Path:
    """Many 4 KiB files in 50 folders (half random, half text)."""
    count = max(100, int(20_000 * scale))
    out = root / f"small-{count}"
    if out.exists():
        return out
    tmp = out.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    rng = random.Random(3)
    folders = 50
    for i in range(count):
        d = tmp / f"part-{i % folders:02d}"
        if i < folders:
            d.mkdir(parents=True)
        if i % 2:
            data = os.urandom(4096)
        else:
            data = (" ".join(rng.choice(_WORDS) for _ in range(700)).encode() + b" " * 4096)[:4096]
        (d / f"item-{i:06d}.bin").write_bytes(data)
    tmp.rename(out)
    return out


DATASETS = {"model": model_like, "jsonl": json_lines, "small": small_files}
