"""``save_sharded`` and ``load_sharded``: every rank of a job saves its own folder into one object."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError, ShardedSaveError, UnsupportedDataError
from ..uri import normalize, redact
from ..util.logs import logger

if TYPE_CHECKING:
    from ..checkpoint import Checkpoint
    from .writes import Segment

TIMEOUT_ENV = "FLYTE_CHECKPOINT_SHARD_TIMEOUT"
DEFAULT_TIMEOUT = 600.0


def shard_timeout(timeout: float | None = None) -> float:
    """``timeout``, else ``$FLYTE_CHECKPOINT_SHARD_TIMEOUT`` (``90``, ``90s``, ``2m``), else 600 s.

    Raises:
        ConfigurationError: the argument or the variable is not a finite duration of 0 or more
            (the message names which).
    """
    import math

    from ..storage.kit.settings import SECONDS, describe, parse

    if timeout is not None:
        raw: Any = timeout
        shown = describe("argument", "timeout", timeout)
        if isinstance(timeout, float) and math.isnan(timeout):
            raise ConfigurationError(f"{shown} is not a duration: give seconds, such as 600")
        value = float(parse(SECONDS, timeout, name="timeout", source="argument", example="600s"))
    else:
        raw = os.environ.get(TIMEOUT_ENV, "").strip()
        if not raw:
            return DEFAULT_TIMEOUT
        shown = describe(TIMEOUT_ENV, "shard_timeout", raw)
        value = float(parse(SECONDS, raw, name="shard_timeout", source=TIMEOUT_ENV, example="600s"))
    if not math.isfinite(value):
        raise ConfigurationError(f"{shown} is not a finite duration: give seconds, such as 600")
    return value


def _torch_group() -> tuple[int, int] | None:
    dist = sys.modules.get("torch.distributed")  # never imported here: a job that uses it has
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_rank(), dist.get_world_size()


def find_rank(rank: int | None = None, world_size: int | None = None) -> tuple[int, int, bool]:
    """(rank, world size, through torch.distributed): the arguments, else the initialized
    default process group, else ``RANK`` and ``WORLD_SIZE``, else a job of one.

    Raises:
        ConfigurationError: only one of the arguments, one that is not an ``int`` (``True``
            and ``2.0`` are not), or a rank outside the world.
    """
    torch = False
    if (rank is None) != (world_size is None):
        raise ConfigurationError("give both rank= and world_size= to save_sharded, or neither")
    if rank is not None and world_size is not None:
        rank = _whole("rank", rank, "save_sharded")
        world_size = _whole("world_size", world_size, "save_sharded")
    if rank is None or world_size is None:
        found = _torch_group()
        if found is not None:
            (rank, world_size), torch = found, True
        else:
            try:
                rank = int(os.environ.get("RANK", "0"))
                world_size = int(os.environ.get("WORLD_SIZE", "1"))
            except ValueError:
                raise ConfigurationError(
                    f"RANK={os.environ.get('RANK')!r} and WORLD_SIZE={os.environ.get('WORLD_SIZE')!r}"
                    " must be whole numbers (a launcher such as torchrun sets them)"
                ) from None
    if not 0 <= rank < world_size:
        raise ConfigurationError(
            f"rank {rank} is outside a world of {world_size}: ranks run from 0 to WORLD_SIZE - 1"
        )
    return rank, world_size, torch


def _whole(label: str, value: object, call: str) -> int:
    """``value`` as an ``int``: an int, or an integer type (numpy's) through ``__index__``;
    ``True``, ``2.0`` and ``"2"`` are refused (ConfigurationError)."""
    import operator

    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ConfigurationError(
            f"{call}({label}={value!r}): give a whole number (an int, not {type(value).__name__})"
        ) from None


def _destination(checkpoint: Checkpoint | str) -> str:
    if isinstance(checkpoint, str):
        return normalize(checkpoint, param="checkpoint")
    return checkpoint.remote_destination


def save_sharded(
    checkpoint: Checkpoint | str,
    folder: str | os.PathLike[str],
    *,
    timeout: float | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    job: str | None = None,
    step: int | None = None,
    metrics: dict[str, float] | None = None,
) -> None:
    """Save ``folder`` as this rank's part of one checkpoint; call it on every rank.

    The object at ``checkpoint``'s destination (a :class:`~flyte_checkpoint.Checkpoint` or a
    URI) becomes one gzip tar of the union of the ranks' folders, with one index (each rank
    compresses and uploads its own segment at once). It appears only once every rank has
    written its segment, by one commit of rank 0; every rank returns then, or raises. The
    ranks come from ``rank``/``world_size``, else ``torch.distributed`` (initialized), else
    ``RANK``/``WORLD_SIZE``.

    Once committed, rank 0 writes the checkpoint's manifest (docs/history.md) with ``step`` and
    ``metrics`` (its digest is left unknown: the segments are written by the ranks).

    A rank takes part only in the save of its own call: the same job (``job``, else
    ``$FLYTE_CHECKPOINT_JOB``, else what the launcher set: torchrun's run id, Slurm's job id,
    Flyte's run and action, ``MASTER_ADDR``/``MASTER_PORT``), the same save (``step``, else
    the n-th call of this process for this destination and rank) and the same world size.

    Raises:
        ShardedSaveError: a rank failed (its error is named), did not arrive within ``timeout``
            (default ``$FLYTE_CHECKPOINT_SHARD_TIMEOUT``, 600 s; through ``torch.distributed``,
            the process group's own timeout, or a collective that failed because a rank died),
            two ranks wrote one name, the ranks disagree on the world size or are at different
            saves, or another job's save is in progress at the destination (rank 0 refuses
            it, naming it, and its ranks raise too); nothing was committed and the previous
            checkpoint is unchanged. Also when two processes reported as this rank and the
            other's part was committed: this call's files are not in the checkpoint.
        UnsupportedDataError: the union of the ranks' folders holds more members or bytes than
            a load accepts (``FLYTE_CHECKPOINT_MAX_MEMBERS``, ``FLYTE_CHECKPOINT_MAX_UNPACKED_BYTES``
            as rank 0 has them), as a plain save of the union is refused: raised on every rank;
            nothing was committed and the previous checkpoint is unchanged.
        ConfigurationError: a bad rank, world size, timeout, job or step.
    """
    from ..history.manifest import check_metrics
    from ..storage.registry import store_for
    from ..storage.stores.local import leave_out_for
    from ..uri import is_local
    from .coordinate import StoreCoordinator, TorchCoordinator, new_token
    from .identity import Caller, job_identity, lease_seconds, next_save
    from .segment import check_limits, check_union, pack_segment, tail
    from .writes import coordination_prefix, writes_for

    recorded = check_metrics(metrics)
    save_step = step  # ``step`` below is the coordinator's progress report
    rank, world, torch = find_rank(rank, world_size)
    limit = shard_timeout(timeout)
    dest = _destination(checkpoint)
    name = job_identity(job)
    caller = Caller(rank, world, name, next_save(dest, rank, name, step))
    src = os.fspath(folder)
    if not os.path.isdir(src):
        raise ConfigurationError(f"save_sharded saves a folder; {src} is not one")
    store = store_for(dest)
    writes = writes_for(store, dest)
    check_world = getattr(writes, "check_world", None)
    if check_world is not None:
        check_world(world)  # a world the store's part numbers cannot share: every rank, no request

    def own(session: dict[str, Any]) -> dict[str, Any]:
        from .coordinate import step
        from .segment import segment_bound

        segment = None
        try:
            mismatch = caller.mismatch(session)
            if mismatch is not None:
                return {"ok": False, "error": mismatch}
            step(rank, "packing")
            prepare = getattr(writes, "prepare", None)
            if prepare is not None:  # the segment's parts, planned from a bound of its size: before any byte
                prepare(rank, world, segment_bound(src))
            segment = _segment(writes, session, rank, world, caller.joiner)
            leave_out = leave_out_for(dest) if is_local(dest) else None  # a destination in the folder
            report = pack_segment(src, segment, segment.padding_needed, leave_out)  # type: ignore[arg-type]
            step(rank, "segment")
            report["piece"] = segment.finish()
            return report
        except Exception as exc:
            if segment is not None:
                segment.abort()
            logger().error("rank %d: its segment of %s failed: %s", rank, redact(dest), exc)
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}

    def decide(reports: list[dict[str, Any]], problems: list[str]) -> dict[str, Any]:
        from .coordinate import step

        try:
            failed = [
                f"rank {r}: {rep['error']}" for r, rep in enumerate(reports) if not rep["ok"] and rep["error"]
            ]
            if failed or problems:
                shown = "; ".join(problems + failed)
                raise ShardedSaveError(f"the sharded save to {redact(dest)} failed ({shown})")
            check_union(reports)
            check_limits(reports, redact(dest))
            step(0, "committing")
            try:
                writes.commit(session, [rep["piece"] for rep in reports], tail(reports))
            except FileNotFoundError as exc:  # NotFoundError too: a piece, or the upload, is gone
                raise ShardedSaveError(
                    f"a segment of the sharded save to {redact(dest)} was gone when rank 0 committed"
                    f" ({type(exc).__name__}: {exc}): another sharded save to that URI removed it (two"
                    " jobs, or two rank 0s, saving to one URI at once). Give each job its own URI, and"
                    " save again"
                ) from exc
            _sweep(writes, session, dest)
            _record(store, dest, save_step, recorded)
        except Exception as exc:
            try:
                writes.abort(session)
            except Exception as cleanup:
                logger().warning("could not remove the pieces of %s: %s", redact(dest), cleanup)
            if isinstance(exc, UnsupportedDataError):  # every rank raises it, as a plain save does
                return {"ok": False, "error": str(exc), "refused": "UnsupportedDataError"}
            return {"ok": False, "error": str(exc) if isinstance(exc, ShardedSaveError) else repr(exc)}
        return {"ok": True}

    if torch:
        coordinator: Any = TorchCoordinator(caller)
    else:
        coordinator = StoreCoordinator(store, dest, coordination_prefix(dest), caller, limit, lease_seconds())
    session: dict[str, Any] = {}

    def begin() -> dict[str, Any]:
        token = new_token()
        session["token"] = token
        try:
            session.update(writes.begin(token))
        except Exception as exc:
            session["failed"] = f"{type(exc).__name__}: {exc}"
        return session

    outcome = coordinator.lead(begin, _guard(own), decide) if rank == 0 else coordinator.follow(_guard(own))
    if not outcome["ok"]:
        error = outcome["error"]
        if outcome.get("refused") == "UnsupportedDataError":
            raise UnsupportedDataError(error if rank == 0 else f"rank 0 refused the union: {error}")
        raise ShardedSaveError(
            f"{error}. Nothing was committed: the previous checkpoint at {redact(dest)} is unchanged"
            if "previous checkpoint" not in error
            else error
        )
    logger().info("rank %d of %d: sharded save to %s committed", rank, world, redact(dest))


def _sweep(writes: Any, session: dict[str, Any], dest: str) -> None:
    """Rank 0, after the commit: remove what earlier saves left (never raises: the commit stands,
    and the next save sweeps again)."""
    try:
        writes.sweep(session)
    except Exception as exc:
        logger().warning(
            "the sharded save to %s was committed, but what earlier saves left could not be removed"
            " (%s: %s): the next save tries again",
            redact(dest),
            type(exc).__name__,
            exc,
        )


def _record(store: Any, dest: str, step: int | None, metrics: dict[str, float]) -> None:
    """Rank 0, after the commit: the manifest of the object committed (never raises)."""
    from ..history.recording import SaveRecord, identity, record_save

    run, attempt = identity(dest)
    record_save(store, SaveRecord(dest, step=step, metrics=metrics, run=run, attempt=attempt))


def _segment(writes: Any, session: dict[str, Any], rank: int, world: int, joiner: str) -> Segment:
    """``writes.segment(...)``; a store written before segments took ``joiner`` gets the call it
    knows (two processes reporting as one rank may then write one segment: docs/sharded.md)."""
    import inspect

    try:
        takes_joiner = "joiner" in inspect.signature(writes.segment).parameters
    except (TypeError, ValueError):  # no signature to read: assume the current one
        takes_joiner = True
    if takes_joiner:
        return writes.segment(session, rank, world, joiner=joiner)
    return writes.segment(session, rank, world)


def _guard(own):
    """A session that rank 0 could not open fails every rank's segment at once."""

    def run(session: dict[str, Any]) -> dict[str, Any]:
        if "failed" in session:
            return {"ok": False, "error": f"rank 0 could not begin the save: {session['failed']}"}
        return own(session)

    return run


def own_files(index: Any, rank: int) -> list[str]:
    """The files rank ``rank`` saved, from a sharded object's index (none for other objects).

    A file belongs to the segment that holds its header, which ends where its data starts
    (an empty file's data "starts" where the next rank's segment may begin)."""
    shards = index.shards
    if rank >= len(shards) or not shards[rank]:
        return []
    members = index.members
    first = sum(shards[:rank])
    low = members[first].uoff
    last = members[first + shards[rank] - 1]
    high = last.uoff + last.ulen
    return sorted(name for name, e in index.files.items() if low < members[e.first].uoff + e.offset <= high)


def load_sharded(checkpoint: Checkpoint, *, own: bool = False, rank: int | None = None) -> Path | None:
    """Restore the previous checkpoint on this rank: the whole tree (``own=False``, as
    :meth:`~flyte_checkpoint.Checkpoint.load_sync`), or only the files this rank saved
    (``own=True``, by ranged reads through the object's index, each file's content hash verified).
    Returns the workspace folder, or None when there is no checkpoint.

    Raises:
        ShardedSaveError: ``own=True`` and the object is not a sharded save (no shards in its
            index): load the whole tree instead.
        ConfigurationError: ``own=True`` and ``rank`` is not a whole number of 0 or more, or is
            past the world that saved the object (the message names that world).
        and what :meth:`~flyte_checkpoint.Checkpoint.load_sync` raises.
    """
    if not own:
        return checkpoint.load_sync()
    src = checkpoint.remote_source
    if src is None:
        return None
    from ..format.index import read_index
    from ..storage.pinned import read_pinned
    from ..storage.registry import store_for

    rank = find_rank()[0] if rank is None else _whole("rank", rank, "load_sharded")
    if rank < 0:
        raise ConfigurationError(
            f"load_sharded(rank={rank!r}): give a whole number of 0 or more (ranks run from 0 to"
            " WORLD_SIZE - 1), or leave rank= out to take this process's"
        )
    store = store_for(src)

    def load_own() -> Path | None:
        # the files are chosen from the index of the version that is read: one pin for both
        with read_pinned(store, src) as view:
            if view is None or not view.size:
                return None
            index = read_index(view, src, view.size)
            if index is None or not index.shards:
                raise ShardedSaveError(
                    f"{redact(src)} is not a sharded checkpoint (its index lists no ranks): load the"
                    " whole tree with load_sharded(checkpoint) or load_sync()"
                )
            if rank >= len(index.shards):
                raise ConfigurationError(
                    f"rank {rank} is outside the world of {len(index.shards)} ranks that saved"
                    f" {redact(src)} (ranks 0 to {len(index.shards) - 1}): a rank restores only what"
                    " it saved. Load the whole tree with load_sharded(checkpoint), or give a rank of"
                    " that world"
                )
            mine = own_files(index, rank)
            if not mine:
                return checkpoint.path
            return checkpoint._load_members(mine, view)  # ranged reads of those files' members only

    return checkpoint._retry.call(load_own, f"load of {redact(src)}")
