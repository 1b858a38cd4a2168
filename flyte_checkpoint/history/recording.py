"""What a save records: the digest of the bytes it streams out, the manifest it writes after its
commit, and the older generation it keeps (a server-side copy) before committing.

:class:`SaveRecord` travels with one save. The upload wraps its writer in :class:`DigestingWriter`
(or sets :attr:`SaveRecord.digest` itself for bytes and files); once the store committed,
:func:`record_save` writes the manifest. A failure there is logged, never raised: the object is
committed and is a checkpoint without a manifest, which every reader accepts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import NotFoundError
from ..storage.kit.checksums import crc32
from ..uri import redact
from ..util.logs import logger
from .manifest import (
    COMMITTED,
    Manifest,
    _token,
    generation_uri,
    manifest_uri,
    parse_sidecar_name,
    read_manifest,
    sidecar,
    write_manifest,
    write_summary,
)

if TYPE_CHECKING:
    from ..storage.blobstore import BlobStore, BlobWriter, CopyCheck, CopySource, ObjectInfo

#: The digest's algorithm, as its prefix (see :mod:`.manifest`).
ALGORITHM = "crc32"


def format_digest(value: int) -> str:
    return f"{ALGORITHM}:{value:08x}"


def digest_of_bytes(data: bytes | bytearray | memoryview) -> str:
    """The manifest digest of ``data``."""
    return format_digest(crc32().compute(data))


def digest_of_stream(read: Callable[[int], bytes], chunk: int = 8 * 1024 * 1024) -> tuple[str, int]:
    """The manifest digest of everything ``read(n)`` gives until it gives ``b""``, and its length."""
    algorithm, value, n = crc32(), 0, 0
    while data := read(chunk):
        value = algorithm.compute(data, value)
        n += len(data)
    return format_digest(value), n


class Digest:
    """A running CRC-32 of an object assembled from written bytes and copied ranges."""

    def __init__(self) -> None:
        self._crc = crc32()
        self.value = 0
        self.size = 0
        self.known = True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        n = len(data)
        if n:
            self.value = self._crc.compute(data, self.value)
            self.size += n

    def copied(self, length: int, expect: CopyCheck | None) -> None:
        if not length:
            return
        if expect is None:
            self.known = False
        else:
            self.value = self._crc.combine(self.value, expect.crc32(), length)
        self.size += length

    def result(self) -> str | None:
        return format_digest(self.value) if self.known else None


class DigestingWriter:
    """A :class:`~flyte_checkpoint.storage.blobstore.BlobWriter` seen through: every write and
    copy also goes into a :class:`Digest`, which a clean commit hands to ``record.digest``;
    everything else is the writer's own."""

    def __init__(self, inner: BlobWriter, record: SaveRecord) -> None:
        self._inner = inner
        self._record = record
        self._digest = record.start_try()

    def write(self, data: bytes | bytearray | memoryview) -> int:
        n = self._inner.write(data)
        self._digest.write(data)
        return n

    def copy(self, source: CopySource, start: int, length: int, expect: CopyCheck | None = None) -> None:
        self._inner.copy(source, start, length, expect)
        self._digest.copied(length, expect)

    def close(self) -> None:
        self._inner.close()
        self._record.digest, self._record.size = self._digest.result(), self._digest.size

    def __enter__(self) -> DigestingWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self._inner.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def digest_of_source(source: Any) -> str:
    """The manifest digest of a :class:`~flyte_checkpoint.util.sources.SourceFile` (read by
    offset: the descriptor's position and the store's reads are left alone)."""
    algorithm, value, at = crc32(), 0, 0
    while at < source.size:
        data = source.pread(min(8 * 1024 * 1024, source.size - at), at)
        value = algorithm.compute(data, value)
        at += len(data)
    return format_digest(value)


def identity(dest: str) -> tuple[str | None, int | None]:
    """(run, attempt) of a save to ``dest``: the local runner's attempt when ``dest`` is its
    checkpoint, else the attempt number a Flyte-style path holds (``.../{n}/<name>``), else None."""
    import re

    from ..lifecycle.runs import current_attempt

    ctx = current_attempt.get()
    if ctx is not None and ctx.checkpoint_paths.checkpoint_path:
        from ..uri import normalize

        try:
            same = normalize(ctx.checkpoint_paths.checkpoint_path) == dest
        except Exception:
            same = False
        if same:
            return (ctx.run_name or None), ctx.attempt_number
    found = re.search(r"/(\d{1,9})/[^/]+/?\Z", dest)
    return None, (int(found.group(1)) if found else None)


@dataclass
class SaveRecord:
    """What one save records in its manifest; :attr:`digest` is set by the upload's last try.

    ``keeps_generations``: keep the object being replaced as an older generation first."""

    dest: str
    step: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    run: str | None = None
    attempt: int | None = None
    made_from: str | None = None
    made_from_digest: str | None = None
    keeps_generations: bool = False
    digest: str | None = None
    #: The bytes the digest covers (None: the upload did not stream them through a digest).
    size: int | None = None
    #: The generation kept before the commit (for the log and tests), if any.
    kept: int | None = None
    #: The store's version token of the object this save committed, where its commit gave it
    #: (:func:`~flyte_checkpoint.storage.blobstore.noting_commits`): a listing that finds another
    #: version found another saver's object, which this save's manifest must not describe.
    version: str | None = None
    #: Where the warnings of :func:`keep_generation` and :func:`record_save` go instead of the
    #: log, when set: the final save on SIGTERM records in a worker thread while the thread the
    #: signal stopped may hold a logging handler's lock, so its handler logs them once the
    #: worker is done (``(format, args)`` pairs, as ``logger().warning`` takes them).
    warnings: list[tuple[str, tuple[Any, ...]]] | None = None

    def warn(self, message: str, *args: Any) -> None:
        """Log a WARNING, or keep it in :attr:`warnings` when that is set."""
        if self.warnings is not None:
            self.warnings.append((message, args))
        else:
            logger().warning(message, *args)

    def start_try(self) -> Digest:
        """A fresh digest for one try of the upload (a retry starts over)."""
        self.digest = self.size = None
        return Digest()


def _observe(
    store: BlobStore, uri: str, infos: dict[str, ObjectInfo] | None = None
) -> tuple[ObjectInfo | None, list[str]]:
    """One recursive listing of ``uri``'s prefix: the object's entry (None if absent) and the
    URIs in its sidecar (their entries into ``infos``, if given)."""
    found: ObjectInfo | None = None
    side: list[str] = []
    prefix = sidecar(uri)
    for info in store.list_details(uri):
        if info.uri == uri:
            found = info
        elif info.uri.startswith(prefix):
            side.append(info.uri)
            if infos is not None:
                infos[info.uri] = info
    return found, side


def _next_generation(uri: str, side: list[str]) -> int:
    numbers = [p[1] for p in map(parse_sidecar_name, side) if p is not None and p[0] == uri]
    return max(numbers) + 1 if numbers else 0


def _version(store: BlobStore, uri: str) -> str | None:
    """The store's version token of the object, where one request gives it (stores that copy)."""
    if store.copy_limits is None:
        return None
    try:
        source = store.copy_source(uri)
    except NotImplementedError:
        return None
    return None if source is None else source.version


def _modified(info: ObjectInfo | None) -> str | None:
    return None if info is None or info.modified is None else info.modified.isoformat()


def current_manifest(store: BlobStore, uri: str, info: ObjectInfo, side: list[str]) -> Manifest | None:
    """The manifest that describes the object at ``uri`` now (the highest generation whose
    manifest names it and matches the listing's ``info``), else None."""
    gens = sorted(
        (p[1] for p in map(parse_sidecar_name, side) if p is not None and p[0] == uri and p[2] == "json"),
        reverse=True,
    )
    for g in gens:
        m = read_manifest(store, manifest_uri(uri, g))
        if m is None or m.object != uri:
            continue
        if m.matches(info):
            return m
        logger().debug("the manifest %s no longer matches %s", redact(m.uri), redact(uri))
        return None  # the newest manifest naming the object is the only one that may describe it
    return None


def keep_generation(store: BlobStore, record: SaveRecord) -> None:
    """Before a commit to ``record.dest``: copy the object there now (server-side) to its
    generation's ``.obj`` and rewrite that generation's manifest to name the copy. An object
    without a matching manifest (Flyte's own save, a save killed before its manifest) is not
    kept. Failures are logged (WARNING) and the save goes on: the new checkpoint matters more."""
    dest = record.dest
    try:
        info, side = _observe(store, dest)
        if info is None or not info.size:
            return
        m = current_manifest(store, dest, info, side)
        if m is None:
            logger().debug("%s has no manifest: not kept as a generation", redact(dest))
            return
        target = generation_uri(dest, m.generation)
        copied = store.copy_object(dest, target)
        if copied is None:
            return
        if copied != m.size:
            store.delete(target)
            record.warn(
                "%s changed while it was being kept as generation %d: not kept", redact(dest), m.generation
            )
            return
        kept_info = next((i for i in store.list_details(target, recursive=False) if i.uri == target), None)
        kept = replace(
            m,
            object=target,
            version=(None if kept_info is None else kept_info.version) or _version(store, target),
            modified=_modified(kept_info),
            dest=dest,
        )
        write_manifest(store, kept)
        record.kept = m.generation
    except NotFoundError:
        return
    except Exception as exc:
        record.warn(
            "could not keep the checkpoint at %s as an older generation before replacing it (%s: %s);"
            " the save goes on and replaces it",
            redact(dest),
            type(exc).__name__,
            exc,
        )


def record_save(store: BlobStore, record: SaveRecord) -> Manifest | None:
    """After a commit to ``record.dest``: write the manifest of the object now there. Returns it,
    or None when it could not be written (logged at WARNING: the checkpoint stays, without one)."""
    dest = record.dest
    try:
        listed: dict[str, ObjectInfo] = {}
        info, side = _observe(store, dest, listed)
        if info is None:
            return None  # replaced meanwhile by a delete: nothing to describe
        if not _is_ours(record, info):
            logger().debug("%s was replaced by another save before its manifest: none written", redact(dest))
            return None
        generation = _next_generation(dest, side)
        digest = record.digest
        if record.size is not None and info.size != record.size:
            digest = None  # another writer replaced it meanwhile: its digest is not known
        m = Manifest(
            generation=generation,
            object=dest,
            size=info.size or 0,
            run=record.run,
            attempt=record.attempt,
            step=record.step,
            metrics=dict(record.metrics),
            time=time.time(),
            digest=digest,
            version=info.version or _version(store, dest),  # the listing's: what matches compares
            modified=_modified(info),
            made_from=record.made_from,
            made_from_digest=record.made_from_digest,
            dest=dest,
            state=COMMITTED,
        )
        claimed = _claim(store, m, record, listed)
        if claimed is None:
            return None
        m = claimed
    except Exception as exc:
        record.warn(
            "the checkpoint at %s was saved, but its manifest could not be written (%s: %s): it is"
            " listed by fc.history without step or metrics",
            redact(dest),
            type(exc).__name__,
            exc,
        )
        return None
    try:
        _drop_stale(store, dest, m, listed)
        _update_summary(store, dest, m, listed)
    except Exception as exc:  # the manifests are the truth: a history reads them instead
        logger().debug("could not update the summary of %s: %s", redact(dest), exc)
    return m


#: How many generations one save tries to claim before it gives up (each refusal means another
#: saver of the destination took that generation between this save's listing and its create).
CLAIM_TRIES = 64


def _is_ours(record: SaveRecord, info: ObjectInfo) -> bool:
    """Whether the object listed (``info``) can be the one this save committed: the same
    version, where both the commit and the listing give one. Where either gives none it is
    taken as this save's (a manifest of another size then records no digest: see
    :func:`record_save`)."""
    if record.version is not None and info.version is not None:
        return _token(info.version) == _token(record.version)
    return True


def _claim(
    store: BlobStore, m: Manifest, record: SaveRecord, listed: dict[str, ObjectInfo]
) -> Manifest | None:
    """Create ``m``'s manifest under a generation no other saver of its destination has: a
    conditional create (:meth:`~flyte_checkpoint.storage.blobstore.BlobStore.write_bytes_if_absent`)
    of ``m``'s generation, else of the next one after every generation listed then. The
    manifest claimed, or None when this save's object is no longer at the destination (another
    saver committed over it: its manifest, which describes what is there, is the newest).

    Once claimed, the destination is listed again: a saver that committed after this save's
    listing either claims a higher generation (it lists after this claim) or has replaced the
    object, and then this manifest, which describes bytes no longer stored, is withdrawn. So
    the highest generation that names the destination describes the object there (on a store
    whose :attr:`~flyte_checkpoint.storage.blobstore.BlobStore.creates_atomically` is True)."""
    dest = m.object
    for _ in range(CLAIM_TRIES):
        if store.write_bytes_if_absent(m.uri, m.to_json().encode()):
            break
        listed.clear()  # another saver took this generation: look again
        info, side = _observe(store, dest, listed)
        if info is None or not m.matches(info) or not _is_ours(record, info):
            logger().debug("%s was replaced by another save before its manifest", redact(dest))
            return None
        m = replace(m, generation=max(m.generation + 1, _next_generation(dest, side)))
    else:
        from ..errors import StoreError

        raise StoreError(
            f"{CLAIM_TRIES} generations in a row were taken by other savers of {redact(dest)}: give"
            " concurrent savers different destinations"
        )
    now = next((i for i in store.list_details(dest, recursive=False) if i.uri == dest), None)
    if now is None or not m.matches(now):
        store.delete(m.uri)  # another save committed over this one meanwhile: its manifest wins
        logger().debug("%s was replaced by another save after its manifest: withdrawn", redact(dest))
        return None
    return m


#: The most stale manifests one save removes (a later save removes the rest).
STALE_CAP = 100


def _stale(dest: str, m: Manifest, listed: dict[str, ObjectInfo]) -> list[str]:
    """Manifests of ``dest`` that describe bytes no longer stored: an older generation whose
    object was the destination itself, replaced by a later save without being kept (no
    ``.obj``). ``m`` (just written) is not among them."""
    out = []
    for u in listed:
        p = parse_sidecar_name(u)
        stale = p is not None and p[0] == dest and p[2] == "json" and p[1] < m.generation
        if stale and generation_uri(dest, p[1]) not in listed:  # type: ignore[index]
            out.append(u)
    return out


def _drop_stale(store: BlobStore, dest: str, m: Manifest, listed: dict[str, ObjectInfo]) -> None:
    """Remove :func:`_stale` manifests (at most :data:`STALE_CAP`), so a sidecar holds one
    manifest per stored object and does not grow with every save."""
    for uri in _stale(dest, m, listed)[:STALE_CAP]:
        store.delete(uri)
        listed.pop(uri, None)


def _update_summary(store: BlobStore, dest: str, m: Manifest, listed: dict[str, ObjectInfo]) -> None:
    """Rewrite ``dest``'s summary with ``m`` added: the previous summary's copies that still
    hold (:func:`~.manifest.summarized`), the manifests written since read themselves, and
    manifests no longer listed dropped."""
    from .manifest import read_many, read_summary, summarized, summary_uri

    jsons = {
        p[1]: u
        for u in listed
        if (p := parse_sidecar_name(u)) is not None
        and p[0] == dest
        and p[2] == "json"
        and p[1] != m.generation
        and (p[1] > m.generation or generation_uri(dest, p[1]) in listed)
    }
    summary_info = listed.get(summary_uri(dest))
    previous = read_summary(store, summary_uri(dest)) if summary_info is not None else {}
    rows: dict[int, tuple[Manifest, int]] = {}
    stale: list[str] = []
    for g, uri in jsons.items():
        copy = summarized(previous.get(g), listed[uri], summary_info)
        if copy is not None:
            rows[g] = (copy, listed[uri].size or 0)
        else:
            stale.append(uri)
    for fresh in read_many(store, stale):
        size = listed[fresh.uri].size if fresh.uri in listed else None
        if size is not None:
            rows[fresh.generation] = (fresh, size)
    rows[m.generation] = (m, len(m.to_json().encode()))
    write_summary(store, dest, [rows[g] for g in sorted(rows)])


__all__ = [
    "ALGORITHM",
    "Digest",
    "DigestingWriter",
    "SaveRecord",
    "current_manifest",
    "digest_of_bytes",
    "digest_of_stream",
    "format_digest",
    "keep_generation",
    "record_save",
]
