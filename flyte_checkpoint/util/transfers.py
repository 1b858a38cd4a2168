"""What one save did, in figures, and the one line that says it (the INFO log line and the CLI).

A folder saved incrementally stores an object most of whose bytes the store copied from an
earlier object: the object's size, the bytes sent and the files copied and sent are different
figures, and each line names each of them, so that a 134 MB object stored by sending 2 MB is
not reported as a 2 MB save (nor as 134 MB sent).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SaveFigures:
    """The figures of one save.

    Attributes:
        size: the bytes of the object stored.
        sent: the bytes sent to the store (the others were copied by the store from ``base``).
        files_sent: for an incremental folder save, the files whose data was sent; else ``None``.
        files_copied: for an incremental folder save, the files copied from ``base``; else ``None``.
        base: the object an incremental save copied from (redacted); else ``None``.
    """

    size: int
    sent: int
    files_sent: int | None = None
    files_copied: int | None = None
    base: str | None = None

    @property
    def incremental(self) -> bool:
        return self.base is not None


def describe(figures: SaveFigures, seconds: float) -> str:
    """``1000 bytes in 0.01s (0.1 MB/s)``; for an incremental save, then
    ``; sent 2344789 bytes and 3 files, copied 131872939 bytes and 12 files from BASE``.

    The rate is of the object's bytes, as the size before it.
    """
    rate = figures.size / seconds / 1e6 if seconds > 0 else 0.0
    line = f"{figures.size} bytes in {seconds:.2f}s ({rate:.1f} MB/s)"
    if figures.incremental:
        line += (
            f"; sent {figures.sent} bytes and {figures.files_sent} {_files(figures.files_sent)},"
            f" copied {figures.size - figures.sent} bytes and {figures.files_copied}"
            f" {_files(figures.files_copied)} from {figures.base}"
        )
    return line


def _files(n: int | None) -> str:
    return "file" if n == 1 else "files"


__all__ = ["SaveFigures", "describe"]
