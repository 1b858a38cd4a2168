"""What ``load(fallback=True)`` walks: the previous checkpoint, then older ones, newest first.

The candidates come from one listing and the manifests (:func:`.listing.entries_from`): the
previous checkpoint ``X`` itself (whether or not it has a manifest, whether or not it is there),
then its kept generations, then, when ``X`` is an attempt's (``.../{n}/NAME``), the checkpoints
of the attempts before ``n`` at the same ``NAME`` and their generations, in (attempt,
generation) order. Entries whose manifest no longer matches its object (size, listed time)
were already left out by the listing; a payload restored is checked against its manifest's
digest here (a folder checkpoint is checked by the restore itself: every file's hash with an
index, every gzip member's CRC without one).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CorruptCheckpointError
from ..uri import redact
from .listing import Entry, _under, entries_from
from .recording import ALGORITHM, format_digest

if TYPE_CHECKING:
    from ..util.retry import RetryPolicy

_ATTEMPT = re.compile(r"\A(.*)/(\d{1,9})/([^/]+)\Z")


def candidates(src: str, retry: RetryPolicy) -> Iterator[tuple[str, Entry | None]]:
    """``(uri, entry)`` to try in order: ``src`` first (its entry, or None if it has none), then
    older checkpoints (see the module's doc).

    Raises:
        what the listing raises (a denied request, a missing bucket): never taken for "missing".
    """
    from ..storage.registry import store_for

    store = store_for(src)
    found = _ATTEMPT.match(src)
    if found is not None:
        prefix, attempt, name = found.group(1), int(found.group(2)), found.group(3)
        listed = retry.call(lambda: list(store.list_details(prefix + "/")), f"listing of {redact(prefix)}/")

        def wanted(uri: str) -> bool:
            head = _ATTEMPT.match(uri.split(".fcp-history/", 1)[0])
            return (
                head is not None
                and head.group(1) == prefix
                and head.group(3) == name
                and int(head.group(2)) <= attempt
            )
    else:
        listed = retry.call(lambda: list(store.list_details(src)), f"listing of {redact(src)}")

        def wanted(uri: str) -> bool:
            return _under(uri, src) and (uri == src or uri.startswith(src + ".fcp-history/"))

    infos = {i.uri: i for i in listed if not i.is_folder and wanted(i.uri)}
    entries = entries_from(store, infos)
    own = next((e for e in entries if e.uri == src), None)
    yield src, own
    for e in entries:
        if e.uri != src:
            yield e.uri, e


def check_payload(path: Path, entry: Entry | None) -> str | None:
    """Why the restored ``path`` is not the checkpoint ``entry`` describes, or None when it is
    (or nothing can tell): a payload's size and digest against the manifest's."""
    from ..format.restore import PAYLOAD

    if entry is None or entry.manifest is None or path.name != PAYLOAD or not path.is_file():
        return None
    digest = entry.digest
    if not digest or not digest.startswith(ALGORITHM + ":"):
        return None
    from ..storage.kit.checksums import crc32

    algorithm, value, size = crc32(), 0, 0
    with open(path, "rb") as f:
        while chunk := f.read(8 * 1024 * 1024):
            value = algorithm.compute(chunk, value)
            size += len(chunk)
    if size != entry.manifest.size:
        return f"damaged: {size} bytes, its manifest records {entry.manifest.size}"
    if format_digest(value) != digest:
        return f"damaged: its bytes' digest is {format_digest(value)}, its manifest records {digest}"
    return None


def skipped_all(src: str, skipped: list[tuple[str, str]]) -> CorruptCheckpointError | None:
    """The error when no candidate loaded: None if every one was missing (no checkpoint: the
    load returns None, as without fallback), else :class:`CorruptCheckpointError` naming each."""
    if not any(why.startswith("damaged") for _, why in skipped):
        return None
    listed = "; ".join(f"{redact(uri)}: {why}" for uri, why in skipped[:5])
    more = f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
    return CorruptCheckpointError(
        f"no checkpoint in the history of {redact(src)} loads (fallback=True tried {len(skipped)}:"
        f" {listed}{more}). Save a new checkpoint, or restore one by hand with 'flyte-checkpoint"
        " history' and 'flyte-checkpoint pull'"
    )


__all__ = ["candidates", "check_payload", "skipped_all"]
