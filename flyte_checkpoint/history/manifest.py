"""The manifest a save writes beside its object: what the object holds, without reading it.

The object at ``X`` keeps exactly the bytes it has always had (Flyte, ``tarfile`` and ``tar`` read
it as before); its sidecar is the folder ``X.fcp-history/`` (the ``.fcp-`` family, which
``flyte-checkpoint ls`` hides unless ``-a``):

- ``X.fcp-history/g{generation:08d}.json``: one manifest per generation (each save of ``X`` is
  the next generation), written only after the object it names was committed;
- ``X.fcp-history/g{generation:08d}.obj``: an older generation's bytes, kept by a save whose
  checkpoint keeps generations (a server-side copy of ``X`` made before the next commit);
- ``X.fcp-history/summary.json``: a copy of every manifest of ``X``, rewritten by each save after
  its manifest, so that a history reads one object per destination. The manifests stay the
  truth: a copy is used only while its manifest has the size the summary recorded and was not
  written after the summary (both from the listing).

The newest generation's manifest names ``X`` itself as its ``object``. A manifest that does not
parse, or whose ``size`` (and, where known, ``modified``/``version``) does not match the object
it names, is ignored (logged at DEBUG): the object is then listed as one without a manifest.

The ``digest`` is ``"crc32:<8 hex digits>"``: zlib's CRC-32 of the whole object, computed as
the bytes stream out. CRC-32 rather than SHA-256 because an incremental folder save has the
store copy most of the object on the server, where this process never sees the bytes: CRC-32
values combine (the copied ranges' values are in the base's index, and the store checks each
copy against them), so the whole object's digest costs nothing extra; it detects damage (bit
flips, truncation), which is what it is for, not tampering. ``None``: not known (a copy given
without its CRC-32).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Container, Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from ..uri import redact
from ..util.logs import logger

if TYPE_CHECKING:
    from ..storage.blobstore import BlobStore, ObjectInfo

#: The manifest format this library writes (a reader takes any, ignoring fields it does not know).
FORMAT = 1
#: What follows an object's URI to make its sidecar folder.
SIDECAR = ".fcp-history/"
#: The summary's name in a sidecar (:func:`summary_uri`).
SUMMARY = "summary.json"
#: States of a manifest: committed (the object is there), deleting (a clean-up is removing it).
COMMITTED, DELETING = "committed", "deleting"
_NAME = re.compile(r"g(\d{8,})\.(json|obj)\Z")


@dataclass(frozen=True)
class Manifest:
    """One generation of one checkpoint object.

    Attributes:
        format: the manifest format (:data:`FORMAT`).
        run: the run's name, when the save knew it (the local runner's, Flyte's), else None.
        attempt: the attempt number, when known, else None.
        generation: 0 for the first save to the object's destination, then one more per save.
        step: the training step given to ``save(..., step=)``, else None.
        metrics: the ``metrics=`` given to the save (name -> float; NaN allowed).
        size: the object's size in bytes.
        time: when the save committed (unix seconds): informational only, never used to order.
        digest: ``"crc32:<hex>"`` of the object's bytes, or None when unknown.
        version: the store's version token of the object after its commit (an ETag, a local
            file's inode and times), or None where the store gives none cheaply.
        modified: the object's modification time as the store's listing gives it (ISO 8601),
            so that a listing tells whether the object is still this one; None if unknown.
        made_from: the URI of the checkpoint this attempt loaded; None when nothing was loaded.
            (An incremental save's base is not recorded here.)
        made_from_digest: the digest of that checkpoint (``"crc32:<hex>"``) where the load knew
            it (a fallback load, from its manifest), else None.
        object: the URI of the bytes: the destination itself, or a kept generation's copy.
        dest: the destination the object was saved to (``X``, whose sidecar this is).
        state: :data:`COMMITTED`, or :data:`DELETING` once a clean-up began removing it.
    """

    generation: int
    object: str
    size: int
    format: int = FORMAT
    run: str | None = None
    attempt: int | None = None
    step: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    time: float = 0.0
    digest: str | None = None
    version: str | None = None
    modified: str | None = None
    made_from: str | None = None
    made_from_digest: str | None = None
    dest: str | None = None
    state: str = COMMITTED

    @property
    def uri(self) -> str:
        """Where this manifest is stored."""
        return manifest_uri(self.dest or self.object, self.generation)

    def to_json(self) -> str:
        """The manifest as JSON (NaN and infinities as the strings ``"NaN"``, ``"Infinity"``)."""
        data = asdict(self)
        data["metrics"] = {k: _encode_float(v) for k, v in self.metrics.items()}
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Manifest:
        """Parse a manifest; unknown fields are ignored.

        Raises:
            ValueError: not a manifest (not JSON, a required field missing or of the wrong type).
        """
        try:
            data = json.loads(text)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        known = {f.name for f in fields(cls)}
        kept = {k: v for k, v in data.items() if k in known}
        for name in ("generation", "object", "size"):
            if name not in kept:
                raise ValueError(f"no {name!r}")
        _check(kept, "generation", int)
        _check(kept, "size", int)
        _check(kept, "object", str)
        _check(kept, "format", int)
        for name in ("run", "digest", "version", "modified", "made_from", "made_from_digest", "dest"):
            _check(kept, name, str, optional=True)
        for name in ("attempt", "step"):
            _check(kept, name, int, optional=True)
        _check(kept, "state", str)
        if "time" in kept:
            if not isinstance(kept["time"], (int, float)) or isinstance(kept["time"], bool):
                raise ValueError("'time' is not a number")
            kept["time"] = float(kept["time"])
        metrics = kept.get("metrics", {})
        if not isinstance(metrics, dict):
            raise ValueError("'metrics' is not an object")
        kept["metrics"] = {str(k): _decode_float(v, k) for k, v in metrics.items()}
        if kept["generation"] < 0 or kept["size"] < 0:
            raise ValueError("a negative generation or size")
        return cls(**kept)

    def matches(self, info: ObjectInfo) -> bool:
        """Whether a listing's entry of :attr:`object` is still the object this manifest
        describes: its size, and its version token (an S3 or Azure ETag, a GCS generation)
        where both the manifest and the listing have one; only where the store gives no
        version, its modification time (S3's has one-second precision: an object replaced
        within the same second with as many bytes has another ETag, not another time)."""
        if info.size != self.size:
            return False
        version = getattr(info, "version", None)
        if self.version is not None and version is not None:
            return _token(version) == _token(self.version)
        if self.modified is not None and info.modified is not None:
            return info.modified.isoformat() == self.modified
        return True


def _token(version: str) -> str:
    """A version token as compared: an ETag with or without its quotes (Azure's listing gives
    none, its HEAD gives them)."""
    text = version.strip()
    if text.startswith("W/"):
        text = text[2:]
    return text.strip('"')


def _check(data: dict[str, Any], name: str, kind: type, *, optional: bool = False) -> None:
    if name not in data:
        return
    value = data[name]
    if value is None and optional:
        return
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{name!r} is not a {kind.__name__}")


def _encode_float(value: float) -> float | str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _decode_float(value: Any, name: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"metric {name!r} is not a number")
    if isinstance(value, (int, float)):
        return float(value)
    if value in ("NaN", "Infinity", "-Infinity"):
        return float(value)
    raise ValueError(f"metric {name!r} is not a number")


def check_metrics(metrics: dict[str, Any] | None) -> dict[str, float]:
    """``metrics`` as ``save(metrics=)`` records them: names to floats (NaN kept).

    Raises:
        TypeError: not a mapping of names to numbers.
    """
    if metrics is None:
        return {}
    if not isinstance(metrics, dict):
        raise TypeError(f"metrics= takes a dict of names to numbers, not {type(metrics).__name__}")
    out: dict[str, float] = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"a metric's name must be a non-empty str, not {name!r}")
        try:
            out[name] = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"metric {name!r} must be a number, not {type(value).__name__}") from None
        except OverflowError:  # an int too large for a float (10**400)
            raise TypeError(
                f"metric {name!r} is an int too large for a float ({len(str(abs(value)))} digits):"
                " give it as a float (inf if that is what it means)"
            ) from None
    return out


def check_step(step: Any) -> int | None:
    """``step`` as ``save(step=)`` records it.

    Raises:
        TypeError: not an int (or None).
    """
    if step is None:
        return None
    if isinstance(step, bool) or not hasattr(step, "__index__"):
        raise TypeError(f"step= takes an int, not {type(step).__name__}")
    return int(step.__index__())


#: Where an unknown attempt is placed in the order of checkpoints: after every known attempt
#: (docs/history.md), by history, fallback and retention alike (:func:`newness`).
UNKNOWN_ATTEMPT = 1 << 62
#: Where a destination's object without a manifest is placed within its attempt: first.
NEWEST_IN_ATTEMPT = 1 << 62


def newness(attempt: int | None, generation: int | None) -> tuple[int, int]:
    """The one order of checkpoints (higher is newer), used by ``fc.history``, a fallback load
    and retention: ``(attempt, generation)``; an unknown attempt (None) after every known one;
    a generation of None (a destination's object without a manifest) newest within its
    attempt. A kept generation whose manifest is lost is ordered by the generation its name
    holds. Names and times never order."""
    return (
        UNKNOWN_ATTEMPT if attempt is None else attempt,
        NEWEST_IN_ATTEMPT if generation is None else generation,
    )


def is_generation_copy(uri: str, manifest: Manifest | None = None, sidecars: Container[str] = ()) -> bool:
    """Whether the object at ``uri`` is a kept generation's copy of the destination whose
    sidecar holds it (the one check gc, history and fallback share): its name is
    ``X.fcp-history/gNNNNNNNN.obj``; it has no sidecar of its own (``sidecars``: the
    destinations a listing found a sidecar for; a user's save to that name has one); and
    ``manifest``, when given, names it as generation NNNNNNNN of ``X``."""
    parsed = parse_sidecar_name(uri)
    if parsed is None or parsed[2] != "obj" or uri in sidecars:
        return False
    dest, generation, _ = parsed
    if manifest is None:
        return True
    return manifest.object == uri and (manifest.dest or dest) == dest and manifest.generation == generation


def sidecar_owners(uris: Iterable[str]) -> set[str]:
    """The destinations that have a sidecar among ``uris`` (a listing's)."""
    return {p[0] for p in map(parse_sidecar_name, uris) if p is not None}


def sidecar(uri: str) -> str:
    """The sidecar folder of the object at ``uri`` (ending with ``/``)."""
    return uri.rstrip("/") + SIDECAR


def manifest_uri(dest: str, generation: int) -> str:
    """Where generation ``generation`` of the object at ``dest`` has its manifest."""
    return f"{sidecar(dest)}g{generation:08d}.json"


def generation_uri(dest: str, generation: int) -> str:
    """Where a kept older generation of the object at ``dest`` has its bytes."""
    return f"{sidecar(dest)}g{generation:08d}.obj"


def parse_sidecar_name(uri: str) -> tuple[str, int, str] | None:
    """``(dest, generation, "json" | "obj")`` of a URI inside a sidecar, else None."""
    at = uri.rfind(SIDECAR)
    if at <= 0:
        return None
    rest = uri[at + len(SIDECAR) :]
    found = _NAME.match(rest)
    if found is None:
        return None
    return uri[:at], int(found.group(1)), found.group(2)


def write_manifest(store: BlobStore, m: Manifest) -> None:
    """Store ``m`` at :attr:`Manifest.uri` (atomically, replacing one there)."""
    store.write_bytes(m.uri, m.to_json().encode())


def read_manifest(store: BlobStore, uri: str) -> Manifest | None:
    """The manifest at ``uri``; None (logged at DEBUG) when it is absent or does not parse.
    Other failures (a denied request, the network) are raised."""
    from ..errors import NotFoundError

    try:
        raw = store.read_bytes(uri)
    except NotFoundError:
        return None
    try:
        return Manifest.from_json(raw)
    except ValueError as exc:
        logger().debug("ignoring the manifest %s: %s", redact(uri), exc)
        return None


def read_manifests(store: BlobStore, uri: str, *, workers: int = 16) -> list[Manifest]:
    """Every manifest in the sidecar of the object at ``uri`` that parses, oldest generation
    first (those that do not parse are left out, logged at DEBUG). One listing, then one read
    per manifest (``workers`` at a time). Whether each still matches its object is not checked
    here (:func:`flyte_checkpoint.history.listing.history` does, from the same listing)."""
    names = [u for u in store.list(sidecar(uri)) if _is_manifest(u)]
    return read_many(store, names, workers=workers)


def read_many(store: BlobStore, uris: Iterable[str], *, workers: int = 16) -> list[Manifest]:
    """The manifests at ``uris`` that parse, sorted by (dest, generation), read ``workers`` at a time."""
    todo = list(uris)
    if len(todo) <= 1 or workers <= 1:
        found = [read_manifest(store, u) for u in todo]
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(workers, len(todo)), thread_name_prefix="fcp-manifests") as pool:
            found = list(pool.map(lambda u: read_manifest(store, u), todo))
    kept = [m for m in found if m is not None]
    kept.sort(key=lambda m: (m.dest or m.object, m.generation))
    return kept


def summary_uri(dest: str) -> str:
    """Where the summary of ``dest``'s manifests is: a copy of each, so that a history reads one
    object per destination instead of one per checkpoint (see :func:`read_with_summary`)."""
    return sidecar(dest) + SUMMARY


def write_summary(store: BlobStore, dest: str, manifests: Iterable[tuple[Manifest, int]]) -> None:
    """Store the summary of ``dest``: each manifest with the size of its JSON as stored."""
    rows = [{"json_size": size, "manifest": json.loads(m.to_json())} for m, size in manifests]
    text = json.dumps({"format": FORMAT, "entries": rows}, sort_keys=True, separators=(",", ":"))
    store.write_bytes(summary_uri(dest), text.encode())


def read_summary(store: BlobStore, uri: str) -> dict[int, tuple[Manifest, int]]:
    """A summary's manifests by generation, with the size of each one's JSON when it was made;
    empty (logged at DEBUG) when it is absent or does not parse."""
    from ..errors import NotFoundError

    try:
        raw = store.read_bytes(uri)
    except NotFoundError:
        return {}
    out: dict[int, tuple[Manifest, int]] = {}
    try:
        doc = json.loads(raw)
        for row in doc["entries"]:
            m = Manifest.from_json(json.dumps(row["manifest"]))
            size = row["json_size"]
            if not isinstance(size, int) or isinstance(size, bool):
                raise ValueError("'json_size' is not an int")
            out[m.generation] = (m, size)
    except (ValueError, KeyError, TypeError) as exc:
        logger().debug("ignoring the summary %s: %s", redact(uri), exc)
        return {}
    return out


def summarized(
    entry: tuple[Manifest, int] | None, listed: ObjectInfo | None, summary: ObjectInfo | None
) -> Manifest | None:
    """The summary's copy of a manifest, if it is still the manifest stored: its JSON has the
    size the summary recorded and was last written no later than the summary (both as listed).
    A rewritten manifest (a clean-up marking it, a kept generation's new object) fails one of
    the two and is read itself."""
    if entry is None or listed is None or summary is None:
        return None
    if listed.modified is None or summary.modified is None or listed.size != entry[1]:
        return None
    return entry[0] if listed.modified <= summary.modified else None


def read_with_summary(
    store: BlobStore,
    wanted: Iterable[str],
    infos: dict[str, ObjectInfo],
    *,
    workers: int = 16,
) -> list[Manifest]:
    """The manifests at ``wanted`` (URIs a listing found, with their ``infos``), as
    :func:`read_many` gives them, taking each from its destination's summary where the summary
    still holds it (:func:`summarized`): one read per destination plus one per manifest written
    since its summary, instead of one per manifest."""
    todo = list(wanted)
    dests: dict[str, list[tuple[str, int]]] = {}
    for uri in todo:
        parsed = parse_sidecar_name(uri)
        if parsed is not None:
            dests.setdefault(parsed[0], []).append((uri, parsed[1]))
    with_summary = [d for d in dests if summary_uri(d) in infos]
    summaries = dict(
        zip(
            with_summary,
            _map(lambda d: read_summary(store, summary_uri(d)), with_summary, workers),
            strict=True,
        )
    )
    found: list[Manifest] = []
    rest: list[str] = []
    for dest, rows in dests.items():
        summary = summaries.get(dest, {})
        for uri, generation in rows:
            m = summarized(summary.get(generation), infos.get(uri), infos.get(summary_uri(dest)))
            if m is not None and m.generation == generation and (m.dest or m.object) == dest:
                found.append(m)
            else:
                rest.append(uri)
    rest += [u for u in todo if parse_sidecar_name(u) is None]
    found += read_many(store, rest, workers=workers)
    found.sort(key=lambda m: (m.dest or m.object, m.generation))
    return found


def _map(fn: Any, items: list[Any], workers: int) -> list[Any]:
    if len(items) <= 1 or workers <= 1:
        return [fn(i) for i in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(workers, len(items)), thread_name_prefix="fcp-manifests") as pool:
        return list(pool.map(fn, items))


def _is_manifest(uri: str) -> bool:
    parsed = parse_sidecar_name(uri)
    return parsed is not None and parsed[2] == "json"


__all__ = [
    "COMMITTED",
    "DELETING",
    "FORMAT",
    "SIDECAR",
    "UNKNOWN_ATTEMPT",
    "Manifest",
    "check_metrics",
    "check_step",
    "generation_uri",
    "is_generation_copy",
    "newness",
    "sidecar_owners",
    "manifest_uri",
    "parse_sidecar_name",
    "read_many",
    "read_manifest",
    "read_manifests",
    "read_summary",
    "read_with_summary",
    "sidecar",
    "summarized",
    "summary_uri",
    "write_manifest",
    "write_summary",
]
