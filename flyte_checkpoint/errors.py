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
    def for_path(cls, path: str, advice: str) -> PathTooLongError:
        """The error naming ``path`` (shortened when very long) and saying what to do."""
        size = len(os.fsencode(path))
        longest = max((len(os.fsencode(p)) for p in path.split("/")), default=0)
        shown = path if len(path) <= 240 else f"{path[:120]}...{path[-100:]}"
        if longest > _NAME_MAX:
            why = f"one of its names has {longest} bytes, more than the {_NAME_MAX} a name may have"
        else:
            why = f"it has {size} bytes, and a path may have at most {_PATH_MAX - 1}"
        return cls(f"the path {shown} is too long for this system ({why}): {advice}")


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
    "CopySourceChangedError",
    "CorruptCheckpointError",
    "InvalidURIError",
    "NoTaskContextError",
    "NotFoundError",
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
