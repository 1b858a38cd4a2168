"""Downloading an object into a local file that appears only once the object is whole."""

from __future__ import annotations

import io
import os
import secrets
from pathlib import Path
from typing import BinaryIO

from ...util.workfiles import TMP, download_temp
from ..blobstore import COPY_CHUNK

#: The mark of a download's temporary file (the local store's temporary files carry it too).
TMP_MARK = TMP


def download_to_file(
    stream: BinaryIO | io.RawIOBase | io.BufferedIOBase, path: str | os.PathLike[str]
) -> int:
    """Copy ``stream`` to its end into ``path``; returns the bytes written.

    The bytes go to a temporary file beside ``path`` (created with the usual permissions, as
    ``open`` would), which replaces ``path`` only after the last read has returned: a reader
    that verifies raises at its end, so ``path`` never holds a short or damaged object. On any
    failure the temporary file is removed and ``path`` is left as it was. ``stream`` is read,
    not closed.

    Raises:
        whatever ``stream.read``/``readinto`` raises, and OSError from the local file system.
    """
    target = Path(path)
    tmp = target.with_name(download_temp(target.name, secrets.token_hex(6)))
    buf = bytearray(COPY_CHUNK)
    view = memoryview(buf)
    total = 0
    try:
        with open(tmp, "xb") as dst:
            readinto = getattr(stream, "readinto", None)
            while True:
                if readinto is not None:
                    n = readinto(view)
                    chunk = view[:n] if n else b""
                else:
                    chunk = stream.read(COPY_CHUNK) or b""
                    n = len(chunk)
                if not n:
                    break
                dst.write(chunk)
                total += n
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return total


__all__ = ["TMP_MARK", "download_to_file"]
