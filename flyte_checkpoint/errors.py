"""The project's errors: one small hierarchy, each also the matching built-in.

Catch :class:`CheckpointError` for anything this library raises, or the built-in
(``FileNotFoundError``, ``PermissionError``, ``ConnectionError``, ``ValueError``...)
when the caller does not care where it came from.
"""

from __future__ import annotations

import os

_PATH_MAX = 4096  # Linux's, with its terminating NUL; the limits are used only to explain an error
_NAME_MAX = 255


class CheckpointError(Exception):
    """Base of every error raised by flyte-checkpoint."""


class StoreError(CheckpointError, OSError):
    """A storage backend failed in a way that is neither missing, denied nor transient."""


class PathTooLongError(StoreError):
    """A local path is longer than the system allows (on Linux 4,096 bytes, or 255 for one name)."""

    @classmethod
    def for_path(cls, path: str, advice: str, *, failed: str | None = None) -> PathTooLongError:
        """The error naming ``path`` (shortened when very long) and saying what to do.
        ``failed`` is the path the system refused, when it was not ``path`` itself (a
        temporary file beside it, made by this library): named when ``path`` fits."""
        shown = path if len(path) <= 240 else f"{path[:120]}...{path[-100:]}"
        why = _over_limit(path)
        if why is None and failed is not None and failed != path:
            beside = _shown(os.path.basename(failed))
            why = f"the path of a working file beside it, {beside!r}: {cls.why(failed)}"
        return cls(f"the path {shown} is too long for this system ({why or cls.why(path)}): {advice}")

    @staticmethod
    def why(path: str) -> str:
        """Why the system refuses ``path`` as too long: which of its names is over the limit of
        a name on its file system (NAME_MAX), else the whole path's length against PATH_MAX."""
        found = _over_limit(path)
        if found is not None:
            return found
        name_max, path_max = _limits(path)
        return (
            f"its file system refused it as too long, though none of its names has more than"
            f" {name_max} bytes and it has {len(os.fsencode(path))}, under the {path_max - 1} a path"
            " may have"
        )


def _shown(text: str, width: int = 60) -> str:
    return text if len(text) <= width else f"{text[: width - 20]}...{text[-17:]}"


def _over_limit(path: str) -> str | None:
    """Which limit ``path`` is over: one of its names over NAME_MAX, else the whole over
    PATH_MAX (those of its file system); None when it is under both."""
    name_max, path_max = _limits(path)
    longest = max(path.split(os.sep), key=lambda p: len(os.fsencode(p)), default="")
    size = len(os.fsencode(longest))
    if size > name_max:
        return (
            f"its name {_shown(longest)!r} has {size} bytes, more than the {name_max} a name may"
            " have on its file system"
        )
    size = len(os.fsencode(path))
    if size >= path_max:
        return f"it has {size} bytes, and a path may have at most {path_max - 1}"
    return None


def _limits(path: str) -> tuple[int, int]:
    """The longest name and path (NAME_MAX, PATH_MAX with its NUL) of the file system that
    holds ``path`` (the nearest folder above it that exists), else Linux's."""
    folder = os.path.dirname(os.path.abspath(path))
    while hasattr(os, "pathconf") and folder:
        try:
            return os.pathconf(folder, "PC_NAME_MAX"), os.pathconf(folder, "PC_PATH_MAX")
        except (OSError, ValueError):
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
    return _NAME_MAX, _PATH_MAX


class WorkspaceError(StoreError):
    """The local folder a checkpoint is restored into cannot hold it: the disk is full or
    would go below the reserve, or a file is over a size limit; or a file cannot go where it
    was asked to (``load_file(name, dest)``: a folder is there, or a file is where a folder
    must be)."""


class NotFoundError(CheckpointError, FileNotFoundError):
    """The object does not exist (only this one, on the source URI, loads as "no checkpoint")."""


class ContainerNotFoundError(NotFoundError):
    """The bucket, container or folder that should hold the object does not exist.

    Unlike a missing object this is a configuration error: ``load()`` raises it.
    """


class CheckpointPermissionError(CheckpointError, PermissionError):
    """The store refused access: credentials are missing, wrong or lack a permission."""


class TransientError(CheckpointError, ConnectionError):
    """A failure worth retrying: throttling, a 5xx answer, a reset or timed-out connection."""


class CopySourceChangedError(TransientError):
    """The object a save copies byte ranges from (an incremental save's previous checkpoint)
    was replaced while the save ran: nothing was committed. Retried: the next try plans its
    copies against the object that is there now."""


class ObjectReplacedError(TransientError):
    """The object a load (or ``inspect``, ``pull``) was reading was replaced or removed meanwhile:
    another save committed between its reads. Nothing it read was kept, and the object is not
    damaged. Retried: the next try reads the object there now, whole."""


class OperationCancelledError(CheckpointError, InterruptedError):
    """A save or load was cancelled (its task cancelled, or ``close()`` during a load).

    A cancelled save commits nothing unless its commit had already begun. The awaiting task
    itself sees ``asyncio.CancelledError``; this is what the worker, or a ``load_sync`` whose
    checkpoint another thread closed, raises.
    """


class SaveTimeoutError(CheckpointError, TimeoutError):
    """Background saves did not end in time: ``wait(timeout)`` or a handle's ``result(timeout)``
    (they go on), or ``close()`` after ``FLYTE_CHECKPOINT_CLOSE_TIMEOUT`` (they were cancelled)."""


class CorruptCheckpointError(CheckpointError, ValueError):
    """The stored object is truncated or damaged (bad gzip checksum, broken tar stream)."""


class CopyDamagedError(CorruptCheckpointError):
    """Bytes a save copied from another object on the server (an incremental save's previous
    checkpoint) are not what that object's index records: it was damaged after it was saved
    (bit rot, a bad copy). Nothing was committed. ``damaged`` holds ``(source, start, length)``
    of each damaged range found (``source`` a :class:`~flyte_checkpoint.storage.blobstore.CopySource`).
    A folder save catches it, warns, and saves again sending those files instead: a task never
    sees it; a caller of :meth:`~flyte_checkpoint.storage.blobstore.BlobWriter.copy` may."""

    damaged: tuple = ()


class UnsafeArchiveError(CheckpointError, ValueError):
    """A tarball member would write outside the workspace or is not a plain file, folder or link."""


class SourceChangedError(CheckpointError, OSError):
    """A file changed while ``save()`` read it (as GNU tar's "file changed as we read it");
    nothing was committed."""


class InvalidURIError(CheckpointError, ValueError):
    """A URI that cannot name a checkpoint (blank, or a form this library does not read)."""


class ConfigurationError(CheckpointError, ValueError):
    """A setting is invalid (a size, duration, flag or choice that does not parse, or a value out
    of range), whether it came from an argument or an environment variable; the message names
    where it came from and what to give instead."""


class UnsupportedDataError(CheckpointError, TypeError):
    """``save()`` was given something it cannot store: not bytes, a file or a directory, a
    folder holding a FIFO, a device, or a link that leads nowhere outside it or loops, or a
    folder with more members or bytes than a load accepts (``FLYTE_CHECKPOINT_MAX_*``)."""


class UnknownSchemeError(CheckpointError, ValueError):
    """No installed backend handles the URI's scheme."""


class BackendNotInstalledError(UnknownSchemeError, ImportError):
    """The scheme is one this project has a plugin for, but that plugin is not installed."""


class BackendLoadError(CheckpointError, ImportError):
    """A backend plugin is installed but failed to import or to build its store."""


class NoTaskContextError(CheckpointError, RuntimeError):
    """``fc.ctx().checkpoint`` was used outside a task: there is no attempt, so no checkpoint."""


class NoCheckpointDestinationError(NoTaskContextError, ValueError):
    """``fc.ctx().checkpoint`` in a task attempt given no checkpoint destination (a Flyte task
    run without checkpoint paths): there is nothing to save to."""


class BackendConflictError(CheckpointError, RuntimeError):
    """A backend registration is invalid (for example, a name registered twice)."""


class RunInUseError(CheckpointError, RuntimeError):
    """A named local run (``@fc.task(run_name=...)``) is already running in another process."""


class ShardedSaveError(CheckpointError, RuntimeError):
    """A sharded save (:mod:`flyte_checkpoint.sharded`) did not commit: a rank failed, did not
    arrive in time, or two ranks wrote the same name. The previous checkpoint is unchanged."""


__all__ = [
    "BackendConflictError",
    "BackendLoadError",
    "BackendNotInstalledError",
    "CheckpointError",
    "CheckpointPermissionError",
    "ConfigurationError",
    "ContainerNotFoundError",
    "CopyDamagedError",
    "CopySourceChangedError",
    "CorruptCheckpointError",
    "InvalidURIError",
    "NoCheckpointDestinationError",
    "NoTaskContextError",
    "NotFoundError",
    "ObjectReplacedError",
    "OperationCancelledError",
    "PathTooLongError",
    "RunInUseError",
    "SaveTimeoutError",
    "ShardedSaveError",
    "SourceChangedError",
    "StoreError",
    "TransientError",
    "UnknownSchemeError",
    "UnsafeArchiveError",
    "UnsupportedDataError",
    "WorkspaceError",
]
