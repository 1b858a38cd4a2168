"""What the suites write and how they write and read it: bytes, chunked writes, whole reads."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from ..storage.blobstore import BlobStore

#: Bytes handed to a writer per ``write`` call, and asked of a reader per ``read``: not a
#: divisor of any usual part or range size, so writes and reads straddle their boundaries.
WRITE_CHUNK = 64 * 1024 + 17


def data(size: int, seed: int = 0) -> bytes:
    """``size`` deterministic, incompressible-looking bytes; another ``seed``, other bytes."""
    out = bytearray()
    block = hashlib.sha256(str(seed).encode()).digest()
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block * 64
    return bytes(out[:size])


def write_in_chunks(store: BlobStore, uri: str, payload: bytes, chunk: int = WRITE_CHUNK) -> None:
    """Save ``payload`` at ``uri`` through one writer, ``chunk`` bytes per write."""
    with store.open_write(uri) as w:
        for i in range(0, len(payload), chunk):
            w.write(payload[i : i + chunk])


def write_from_one_buffer(store: BlobStore, uri: str, payload: bytes, chunk: int = WRITE_CHUNK) -> None:
    """Save ``payload`` at ``uri`` as the core does: each ``write`` gets a view of one buffer that
    is filled again once the call returns (a writer that keeps the view, not a copy, stores the
    buffer's later bytes)."""
    buffer = bytearray(chunk)
    view = memoryview(buffer)
    with store.open_write(uri) as w:
        for i in range(0, len(payload), chunk):
            n = min(chunk, len(payload) - i)
            buffer[:n] = payload[i : i + n]
            w.write(view[:n])
            buffer[:n] = bytes(n)  # the caller reuses its buffer at once


def read_to_end(store: BlobStore, uri: str, chunk: int = WRITE_CHUNK) -> bytes:
    """The object read through ``open_read``, ``read(chunk)`` at a time, until the stream ends."""
    out = bytearray()
    with store.open_read(uri) as r:
        while piece := r.read(chunk):
            out += piece
    return bytes(out)


def outcome(call: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """``(result, None)`` or ``(None, the exception)``."""
    try:
        return call(), None
    except Exception as exc:
        return None, exc


def described(got: Any, error: BaseException | None) -> str:
    """``"returned None"`` or ``"raised StoreError: ..."``, for a message."""
    if error is None:
        return (
            f"returned {got!r}" if not isinstance(got, (bytes, bytearray)) else f"returned {len(got)} bytes"
        )
    return f"raised {type(error).__name__}: {error}"


__all__ = [
    "WRITE_CHUNK",
    "data",
    "described",
    "outcome",
    "read_to_end",
    "write_from_one_buffer",
    "write_in_chunks",
]
