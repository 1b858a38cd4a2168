"""Helpers around checkpoint locations: the newest file in a restored tree, URI repair, and the
local facts both the store and the packer need (the process umask, what a pack leaves out)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..uri import is_local, scheme_of

#: Schemes whose previous-attempt URIs the platform could get wrong (see below).
REMOTE_SCHEMES = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az"})


def latest_checkpoint(
    root: str | Path,
    glob_pattern: str = "**/last.ckpt",
    *,
    key: Callable[[Path], Any] | None = None,
) -> Path | None:
    """The file under ``root`` matching ``glob_pattern`` with the largest ``key``, or ``None``.

    ``key`` defaults to the modification time (newest wins); ties go to the larger path.
    Folders that match are ignored.
    """
    base = Path(root)
    if not base.is_dir():
        return None
    matches = [p for p in base.glob(glob_pattern) if p.is_file()]
    if not matches:
        return None
    rank = key if key is not None else (lambda p: p.stat().st_mtime)
    return max(matches, key=lambda p: (rank(p), str(p)))


def repair_union_prev_checkpoint_uri(prev_uri: str, *, run_name: str, action_name: str) -> str:
    """Fix a previous-attempt URI that points at the current attempt's folder.

    For remote schemes only (s3, s3a, gs, gcs, abfs, abfss, az): the first
    ``.../{run_name}/{action_name}/{n}/...`` with ``n > 1`` becomes ``n - 1``. Any other URI,
    a local path included, is returned unchanged.
    """
    if not prev_uri or not run_name or not action_name or scheme_of(prev_uri) not in REMOTE_SCHEMES:
        return prev_uri

    def step_back(m: re.Match[str]) -> str:
        n = int(m.group(2))
        return m.group(1) + (str(n - 1) if n > 1 else m.group(2))

    return _attempt_pattern(run_name, action_name).sub(step_back, prev_uri, count=1)


def _attempt_pattern(run_name: str, action_name: str) -> re.Pattern[str]:
    """The ``{run_name}/{action_name}/{n}`` part of an attempt's URI (Flyte's layout)."""
    return re.compile(r"(?<=/)(" + re.escape(run_name) + r"/" + re.escape(action_name) + r"/)(\d+)(?=/|$)")


def attempt_number_in(uri: str, *, run_name: str, action_name: str) -> int | None:
    """The attempt number ``n`` of a URI in Flyte's layout ``.../{run_name}/{action_name}/{n}/...``
    (the first such part), or ``None`` when it has none."""
    if not run_name or not action_name:
        return None
    m = _attempt_pattern(run_name, action_name).search(uri)
    return int(m.group(2)) if m else None


def with_attempt_number(uri: str, n: int, *, run_name: str, action_name: str) -> str:
    """``uri`` with the attempt number of its (first) ``{run_name}/{action_name}/{n}`` part set to ``n``."""
    return _attempt_pattern(run_name, action_name).sub(lambda m: m.group(1) + str(n), uri, count=1)


def points_at_same_attempt(prev_uri: str, dest_uri: str, *, run_name: str, action_name: str) -> bool:
    """True when the remote ``prev_uri`` names the same ``.../{run}/{action}/{n}`` folder as ``dest_uri``.

    That is the platform bug :func:`repair_union_prev_checkpoint_uri` fixes; any other
    previous URI is taken as given.
    """
    if not run_name or not action_name or is_local(prev_uri):
        return False
    marker = f"/{run_name}/{action_name}/"

    def folder(uri: str) -> str | None:
        at = uri.find(marker)
        if at < 0:
            return None
        number = uri[at + len(marker) :].split("/", 1)[0]
        return uri[: at + len(marker)] + number if number.isdigit() else None

    here = folder(dest_uri)
    return here is not None and folder(prev_uri) == here


@dataclass(frozen=True)
class LeaveOut:
    """Entries of one folder that a pack leaves out: the one named ``name``, its history
    ``name.fcp-history`` (manifests, kept generations: docs/history.md) and those whose names
    start with ``prefix``. ``folder`` is the folder's ``(st_dev, st_ino)``, so it is recognised
    however the walk reaches it."""

    folder: tuple[int, int]
    name: str
    prefix: str

    def __call__(self, name: str) -> bool:
        return name == self.name or name == self.name + ".fcp-history" or name.startswith(self.prefix)


def file_destination(name: str, dest: str | os.PathLike[str]) -> Path:
    """Where a file restored as ``dest`` goes, as ``cp`` decides: into ``dest`` under the
    file's own base name when ``dest`` is a folder (or a link to one), or ends with a
    separator (a folder, made if missing); else ``dest`` itself (a link there is replaced,
    what it leads to is left alone). ``name`` is the file's name in the checkpoint."""
    text = os.fspath(dest)
    target = Path(text).absolute()
    if text.endswith(("/", os.sep)) or target.is_dir():
        return target / name.rpartition("/")[2]
    return target


def make_way(target: Path, what: str) -> None:
    """Make the folders ``target`` goes in (none of its missing parents is an error).

    Raises:
        WorkspaceError: a folder, a device, a FIFO or a socket is at ``target`` (a file
            replaces it by a rename: ``/dev/null`` would become a regular file), or a file (or
            a link to one, or to nothing) is where one of its folders must be; the message
            names it and says what to do (``what`` names the restore).
    """
    from ..errors import WorkspaceError

    if target.is_dir():
        raise WorkspaceError(
            f"cannot restore {what} to {target}: a folder is there. Pass the path of a file, or"
            " of a folder that holds no folder of the file's name, as dest; or move that folder"
        )
    node = _special_node(target)
    if node:
        raise WorkspaceError(
            f"cannot restore {what} to {target}: a {node} is there, which the file would replace."
            " Pass the path of a file, or of a folder, as dest"
        )
    for parent in reversed(target.parents):
        if os.path.lexists(parent) and not parent.is_dir():
            raise WorkspaceError(
                f"cannot restore {what} to {target}: {parent} is a file (or a link that leads"
                " nowhere), not a folder. Pass another dest, or move that file"
            )
    target.parent.mkdir(parents=True, exist_ok=True)


def _special_node(path: Path) -> str:
    """What ``path`` itself is when it is neither a file, a folder nor a link ('' otherwise)."""
    import stat

    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return ""
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    return "socket" if stat.S_ISSOCK(mode) else ""


def current_umask() -> int:
    """The process umask, read without changing it (``os.umask`` would, for every thread)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return -1  # unknown: callers set modes explicitly
