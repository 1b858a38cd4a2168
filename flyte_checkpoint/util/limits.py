"""What a load may consume: the limits a restore enforces, and the disk reserve it keeps.

- ``FLYTE_CHECKPOINT_MAX_UNPACKED_BYTES``: the most bytes a tarball's tar stream may hold
  (file data, and 512 bytes for each header block, so empty members count too); unset
  means no limit.
- ``FLYTE_CHECKPOINT_MAX_MEMBERS``: the most members (files, folders, links) a tarball may
  hold; default :data:`DEFAULT_MAX_MEMBERS`.
- ``FLYTE_CHECKPOINT_DISK_RESERVE``: bytes a restore leaves free on the workspace's file
  system; it stops with :class:`~flyte_checkpoint.errors.WorkspaceError` rather than go
  below. Default: 1% of the file system's size, at least 64 MiB, at most 4 GiB and never
  more than 10% of it; ``0`` turns the check off.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import WorkspaceError

MAX_UNPACKED_ENV = "FLYTE_CHECKPOINT_MAX_UNPACKED_BYTES"
MAX_MEMBERS_ENV = "FLYTE_CHECKPOINT_MAX_MEMBERS"
DISK_RESERVE_ENV = "FLYTE_CHECKPOINT_DISK_RESERVE"

#: Far more members than a checkpoint holds, far fewer than the inodes a bomb would take.
DEFAULT_MAX_MEMBERS = 1_000_000
_RESERVE_FLOOR = 64 * 1024 * 1024
_RESERVE_CAP = 4 * 1024**3
#: Free space is looked up again after this much is written, so others' writes are seen.
_RECHECK = 64 * 1024 * 1024


def env_count(name: str, what: str) -> int | None:
    """``$name`` as a whole number of at least 0, or None when unset or blank.

    Raises:
        ValueError: the value is not such a number; the message names the variable.
    """
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise ValueError(f"{name}={value!r} is not a number of {what}: set a whole number (>= 0) or unset it")
    return number


@dataclass(frozen=True)
class LoadLimits:
    """Bounds on what restoring one object may take.

    Attributes:
        max_bytes: the most bytes of tar stream (data and headers) a tarball may hold; None: no limit.
        max_members: the most members a tarball may hold.
        disk_reserve: bytes to leave free on the workspace's file system; None: the default
            for that file system (see :func:`default_reserve`).
    """

    max_bytes: int | None = None
    max_members: int = DEFAULT_MAX_MEMBERS
    disk_reserve: int | None = None

    @classmethod
    def from_env(cls) -> LoadLimits:
        """The limits set by the environment variables this module names.

        Raises:
            ValueError: a variable is set to something other than a whole number >= 0.
        """
        members = env_count(MAX_MEMBERS_ENV, "members")
        return cls(
            max_bytes=env_count(MAX_UNPACKED_ENV, "bytes"),
            max_members=DEFAULT_MAX_MEMBERS if members is None else members,
            disk_reserve=env_count(DISK_RESERVE_ENV, "bytes"),
        )


def default_reserve(total: int) -> int:
    """The default reserve for a file system of ``total`` bytes: 1%, at least 64 MiB, at most
    4 GiB, and never more than 10%."""
    return min(max(_RESERVE_FLOOR, total // 100), _RESERVE_CAP, total // 10)


class DiskBudget:
    """Keeps a restore from filling the file system that holds ``path``.

    :meth:`claim` is called before each write with its size; free space is looked up
    (``statvfs``) when the bytes claimed since the last look-up could reach the reserve,
    and at least every 64 MiB.
    """

    def __init__(self, path: str, reserve: int | None, *, source: str) -> None:
        self._path = path
        self._source = source
        try:
            st = os.statvfs(path)
        except OSError:  # a file system that cannot tell its free space: no check
            reserve, st = 0, None
        if reserve is None and st is not None:
            reserve = default_reserve(st.f_blocks * st.f_frsize)
        self.reserve = reserve or 0
        self._budget = -1 if self.reserve else float("inf")

    def claim(self, n: int) -> None:
        """Account for ``n`` bytes about to be written.

        Raises:
            WorkspaceError: writing them would leave less than the reserve free.
        """
        self._budget -= n
        if self._budget >= 0:
            return
        st = os.statvfs(self._path)
        free = st.f_bavail * st.f_frsize
        room = free - self.reserve
        if room < n:
            raise WorkspaceError(
                f"stopped restoring {self._source} into {self._path}: its file system has"
                f" {free:,} bytes free, and a restore leaves at least {self.reserve:,} ({DISK_RESERVE_ENV})."
                " Free space there, restore on a larger disk (load() restores under TMPDIR), or lower"
                f" {DISK_RESERVE_ENV} (0 turns the check off)"
            )
        self._budget = min(room, _RECHECK) - n
