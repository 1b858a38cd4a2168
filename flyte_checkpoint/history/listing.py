"""``fc.history(uri_or_run)``: a run's checkpoints, newest first, from listings and manifests only.

One recursive listing of the location (a page per 1,000 objects on S3, GCS and Azure), then one
read per checkpoint of the one manifest that can describe it (``workers`` at a time): for a
destination ``X``, the highest generation's manifest not kept as an ``.obj`` names ``X`` itself;
each kept generation's manifest names its ``.obj``. Older manifests that named ``X`` (saves
whose object was replaced without being kept) are never read. No object is read, and no object
is stat'ed: sizes and modification times come from the listing.

Order: (attempt, generation) from the manifests, newest first; never names or times
(:func:`~flyte_checkpoint.history.manifest.newness`, which fallback and retention use too). An
object without a manifest that matches it (Flyte's own save, a save killed between its commit
and its manifest, a manifest whose size or version disagrees with the object) is listed too,
with ``manifest=None``: a destination's object is newer than every kept generation of it, so it
comes first within its attempt, and a kept generation whose manifest is lost or damaged is
placed by the generation its name holds (the sidecar is the library's); its attempt is the
number in its path (``.../{n}/NAME``), else it sorts after every known attempt.

An object named like a kept generation (``X.fcp-history/gNNNNNNNN.obj``) that is no copy of
``X`` (a user's save to that name: it has a sidecar of its own, or a manifest naming it that is
not its generation's) is neither listed nor offered to a fallback load
(:func:`~flyte_checkpoint.history.manifest.is_generation_copy`, the check gc makes too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..uri import normalize, redact
from ..util.logs import logger
from .manifest import (
    DELETING,
    SIDECAR,
    Manifest,
    generation_uri,
    is_generation_copy,
    manifest_uri,
    newness,
    parse_sidecar_name,
    read_with_summary,
    sidecar_owners,
)

if TYPE_CHECKING:
    from ..storage.blobstore import BlobStore, ObjectInfo


@dataclass(frozen=True)
class Entry:
    """One checkpoint in a history.

    Attributes:
        uri: the object's URI (a destination, or a kept generation's ``.obj``).
        dest: the destination it was saved to.
        attempt: the attempt number (None: unknown).
        generation: its generation at ``dest`` (None: no manifest).
        step, metrics: as the save gave them (None and {} without a manifest).
        size: bytes, from the listing.
        time: when it was committed (unix seconds; None without a manifest): informational.
        digest: the manifest's ``crc32:...`` of the object's bytes, if known.
        run: the run's name, if the save knew it.
        manifest: the manifest that describes it, or None (an object without one).
    """

    uri: str
    dest: str
    attempt: int | None
    generation: int | None
    step: int | None
    metrics: dict[str, float]
    size: int
    time: float | None
    digest: str | None = None
    run: str | None = None
    manifest: Manifest | None = field(default=None, repr=False, compare=False)

    @property
    def has_manifest(self) -> bool:
        return self.manifest is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN metrics as ``"NaN"``, URIs without credentials)."""

        def number(v: float) -> float | str:
            return v if math.isfinite(v) else str(v).replace("inf", "Infinity").replace("nan", "NaN")

        return {
            "attempt": self.attempt,
            "generation": self.generation,
            "step": self.step,
            "metrics": {k: number(v) for k, v in self.metrics.items()},
            "size": self.size,
            "time": self.time,
            "uri": redact(self.uri),
            "dest": redact(self.dest),
            "run": self.run,
            "digest": self.digest,
            "manifest": self.manifest is not None,
        }


def _sort_key(e: Entry) -> tuple[int, int]:
    if e.generation is None and e.uri != e.dest:
        parsed = parse_sidecar_name(e.uri)  # a kept generation whose manifest is lost: its name's
        return newness(e.attempt, parsed[1] if parsed is not None else None)
    return newness(e.attempt, e.generation)


def history(
    uri_or_run: str,
    *,
    root: str | None = None,
    store: BlobStore | None = None,
    workers: int = 16,
    include_deleting: bool = False,
) -> list[Entry]:
    """The checkpoints at ``uri_or_run``, newest first (see the module's doc).

    ``uri_or_run``: a checkpoint's URI (its kept generations are listed with it), a folder (every
    checkpoint under it: a run's attempts), or the name of a local runner's run (``@fc.task``
    with ``run_name``), found under ``root`` (default: ``$FLYTE_CHECKPOINT_ROOT``, else the
    runner's temporary folder).

    Raises:
        InvalidURIError: the URI is blank or malformed.
        ContainerNotFoundError, CheckpointPermissionError, StoreError: the listing failed (a
            manifest that cannot be read for a reason other than absence raises too).
    """
    from ..storage.registry import store_for
    from ..util.retry import RetryPolicy

    base = _location(uri_or_run, root)
    store = store if store is not None else store_for(base)
    retry = RetryPolicy.from_env()
    prefix = base.rstrip("/")
    listed = retry.call(lambda: list(store.list_details(prefix)), f"listing of {redact(prefix)}")
    infos = {i.uri: i for i in listed if not i.is_folder and _under(i.uri, prefix)}
    return entries_from(store, infos, workers=workers, include_deleting=include_deleting)


def _location(uri_or_run: str, root: str | None) -> str:
    text = str(uri_or_run).strip()
    if root is not None or ("://" not in text and not text.startswith((".", "/", "~")) and "/" not in text):
        from ..lifecycle.runs import base_of
        from ..uri import join

        if root is not None or not _exists_locally(text):
            return join(base_of(root), text)
    return normalize(text, param="uri_or_run")


def _exists_locally(text: str) -> bool:
    import os

    return os.path.exists(text)


def _under(uri: str, prefix: str) -> bool:
    return uri == prefix or uri.startswith(prefix + "/") or uri.startswith(prefix + SIDECAR)


def entries_from(
    store: BlobStore, infos: dict[str, ObjectInfo], *, workers: int = 16, include_deleting: bool = False
) -> list[Entry]:
    """The history of the objects a listing found (``uri -> info``), newest first. Checkpoints
    whose manifest is marked ``deleting`` (a clean-up is removing them) are left out unless
    ``include_deleting`` (a clean-up that finishes the job wants them)."""
    from ..util.workfiles import is_working_file

    kept: dict[str, set[int]] = {}  # dest -> generations kept as .obj
    manifests: dict[str, set[int]] = {}  # dest -> generations with a manifest
    objects: list[str] = []
    owners = sidecar_owners(infos)  # a .obj with a sidecar of its own is a user's destination
    for uri in infos:
        parsed = parse_sidecar_name(uri)
        if parsed is not None:
            if parsed[2] == "obj" and not is_generation_copy(uri, None, owners):
                continue  # a user's save named like a generation: no checkpoint of parsed[0]
            if SIDECAR in parsed[0]:
                continue  # the sidecar of such a save (inside another's sidecar): not listed
            dest, generation, kind = parsed
            (kept if kind == "obj" else manifests).setdefault(dest, set()).add(generation)
            continue
        name = uri.rstrip("/").rsplit("/", 1)[-1]
        if SIDECAR[:-1] in uri or name.startswith(".") or is_working_file(name):
            continue  # another sidecar's stray file, a marker, a lock, a temporary file
        if ".fcp-shard/" in uri or not infos[uri].size:
            continue  # a sharded save's pieces; an empty object is "no checkpoint"
        objects.append(uri)
    dests = set(objects) | set(manifests)
    to_read: list[str] = []
    for dest in dests:
        gens = manifests.get(dest, set())
        for g in gens & kept.get(dest, set()):
            to_read.append(manifest_uri(dest, g))
        current = max((g for g in gens if g not in kept.get(dest, set())), default=None)
        if current is not None and dest in infos:
            to_read.append(manifest_uri(dest, current))
    found = read_with_summary(store, to_read, infos, workers=workers)
    described: set[str] = set()
    out: list[Entry] = []
    for m in found:
        dest = m.dest or m.object
        info = infos.get(m.object)
        if m.state == DELETING and not include_deleting:
            described.add(m.object)  # a clean-up is removing it: never offered, with or without one
            continue
        if (
            info is None
            or not m.matches(info)
            or (m.object != dest and not is_generation_copy(m.object, m, owners))
        ):
            logger().debug("ignoring the manifest %s: it does not match %s", redact(m.uri), redact(m.object))
            continue
        described.add(m.object)
        out.append(_entry(m, dest, info.size or 0))
    from .recording import identity

    for uri in objects:
        if uri not in described:
            out.append(Entry(uri, uri, identity(uri)[1], None, None, {}, infos[uri].size or 0, None))
    for dest, gens in kept.items():  # a kept generation whose manifest is lost or damaged
        for g in gens:
            uri = generation_uri(dest, g)
            if uri not in described and infos[uri].size:
                out.append(Entry(uri, dest, identity(dest)[1], None, None, {}, infos[uri].size or 0, None))
    out.sort(key=_sort_key, reverse=True)
    return out


def _entry(m: Manifest, dest: str, size: int) -> Entry:
    attempt = m.attempt
    if attempt is None:
        from .recording import identity

        attempt = identity(dest)[1]
    return Entry(
        m.object, dest, attempt, m.generation, m.step, dict(m.metrics), size, m.time, m.digest, m.run, m
    )


__all__ = ["Entry", "entries_from", "history"]
