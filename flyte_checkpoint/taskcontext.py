"""The context of one attempt of a task: where it saves, where the previous attempt saved.

:class:`TaskContext` is what ``fc.ctx()`` returns inside a task (the local runner's, or
:class:`~flyte_checkpoint.integrations.flyte.FlyteTaskContext` inside a Flyte task), and
:class:`NoContext` what it returns outside one. ``ctx()`` and ``@task`` are in
:mod:`flyte_checkpoint.context`; the types are here, a floor below, so that the Flyte adapter
builds on them without importing the runner that consults it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .uri import redact

if TYPE_CHECKING:
    from .checkpoint import Checkpoint
    from .history.retention import Retention
    from .lifecycle.preemption import Registration, Saver


@dataclass(frozen=True)
class CheckpointPaths:
    """Where this attempt saves (``checkpoint_path``) and where the previous one saved."""

    checkpoint_path: str | None
    prev_checkpoint_path: str | None = None

    def __repr__(self) -> str:  # URIs may carry tokens (user-info, SAS query strings)
        show = [None if p is None else redact(p) for p in (self.checkpoint_path, self.prev_checkpoint_path)]
        return f"CheckpointPaths(checkpoint_path={show[0]!r}, prev_checkpoint_path={show[1]!r})"


@dataclass
class TaskContext:
    """The context of one attempt of a task."""

    attempt_number: int
    checkpoint_paths: CheckpointPaths
    run_name: str = ""
    action_name: str = ""
    _checkpoint: Checkpoint | None = field(default=None, repr=False)
    #: The retention policy this attempt's checkpoint follows (``@fc.task(retention=...)``).
    retention: Retention | None = field(default=None, repr=False, kw_only=True)

    def __post_init__(self) -> None:
        # Flyte's TaskContext takes checkpoint_paths=None for an attempt given no paths: the
        # same as paths without a destination, so ``checkpoint`` says so (not AttributeError).
        if self.checkpoint_paths is None:
            self.checkpoint_paths = CheckpointPaths(None)

    def __bool__(self) -> bool:
        return True

    @property
    def checkpoint(self) -> Checkpoint:
        """This attempt's checkpoint (made on first use).

        Raises:
            NoCheckpointDestinationError: (a ``NoTaskContextError`` and a ``ValueError``) this
                attempt has no destination to save to (a Flyte task given none).
        """
        if self._checkpoint is None and self.checkpoint_paths.checkpoint_path:
            from .checkpoint import Checkpoint

            self._checkpoint = Checkpoint(
                self.checkpoint_paths.checkpoint_path,
                self.checkpoint_paths.prev_checkpoint_path,
                retention=self.retention,
            )
        if self._checkpoint is None:
            raise no_destination()
        return self._checkpoint

    def on_terminate(self, fn: Saver | None = None, *, wait_background: bool = False) -> Registration:
        """Save ``fn()`` (bytes, a file or a folder; ``None``: nothing) as this attempt's
        checkpoint when the process gets SIGTERM, or on :func:`flyte_checkpoint.preempt`;
        with ``wait_background``, first let the checkpoint's background saves end.

        Runs within ``$FLYTE_CHECKPOINT_GRACE_SECONDS`` (see :mod:`flyte_checkpoint.lifecycle.preemption`);
        unregistered when the attempt ends, or by the returned registration's ``remove()``.

        Raises:
            NoTaskContextError: outside a task.
            ValueError: this attempt has no checkpoint destination.
        """
        from .lifecycle.preemption import terminate_entries

        return terminate_entries(self.checkpoint, fn, wait_background=wait_background, owner=self)

    def close(self) -> None:
        """End the attempt: its final-save registrations go, its checkpoint's workspace too."""
        self.end_final_saves()
        if self._checkpoint is not None:
            self._checkpoint.close()

    def end_final_saves(self) -> None:
        """Unregister the final saves registered through this context or its checkpoint."""
        if "flyte_checkpoint.lifecycle.preemption" in sys.modules:  # else none was ever registered
            from .lifecycle.preemption import forget

            forget(self)
            if self._checkpoint is not None:
                forget(self._checkpoint)


def no_destination() -> Exception:
    """The error of ``checkpoint`` in a task attempt that was given no destination."""
    from .errors import NoCheckpointDestinationError

    return NoCheckpointDestinationError(
        "fc.ctx().checkpoint: this task attempt has no checkpoint destination (Flyte gave it no"
        " checkpoint path), so there is nothing to save to or load from: run it where Flyte sets"
        " checkpoint paths, or make one yourself: fc.Checkpoint(destination_uri, previous_uri);"
        " test first with 'if fc.ctx().checkpoint_paths.checkpoint_path:'"
    )


class NoContext:
    """What ``ctx()`` returns outside a task: falsy; its ``checkpoint`` raises
    :class:`~flyte_checkpoint.errors.NoTaskContextError`, which says what to do."""

    attempt_number = 0
    checkpoint_paths = CheckpointPaths(None, None)
    run_name = ""
    action_name = ""

    @property
    def checkpoint(self) -> Checkpoint:
        """Always raises: outside a task there is no attempt to checkpoint.

        Raises:
            NoTaskContextError: always, saying how to get a checkpoint.
        """
        from .errors import NoTaskContextError

        raise NoTaskContextError(
            "fc.ctx().checkpoint is only available while a task runs, and no task is running: decorate"
            " the function with @fc.task (it runs it with retries, each attempt with its own checkpoint)"
            " or run it as a Flyte task; or, without a task, make one yourself:"
            " fc.Checkpoint(destination_uri, previous_uri). Test for a task first with 'if fc.ctx():'"
        )

    def on_terminate(self, fn: Saver | None = None, *, wait_background: bool = False) -> Registration:
        """Always raises :class:`~flyte_checkpoint.errors.NoTaskContextError`, as ``checkpoint`` does."""
        return self.checkpoint.on_terminate(fn, wait_background=wait_background)

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "NoContext()"


__all__ = ["CheckpointPaths", "NoContext", "TaskContext", "no_destination"]
