"""The library's working files: every name it gives a file or folder of its own among the
user's files or in the temp folder, in one place, and the rule that tells them apart.

=============================== ================================== =========================
name                            what it is                         where, made by
=============================== ================================== =========================
``.fcp-staging-HOST-PID-TOKEN/`` a background save's snapshot       beside the source, or in a
                                                                   local root (``snapshot``)
``.fcp-tmp-NAME.TOKEN``         a local store writer's temporary   beside the object
                                file                               (``storage.stores.local``)
``.fcp-tmp-NAME.shard/``        a sharded save's markers and       beside the object
                                pieces (local store)               (``sharded.writes``)
``.NAME.fcp-tmp-TOKEN``         a download's temporary file        beside the file
                                                                   (``storage.kit.files``)
``.fcp-restore-XXXXXXXX/``      a partial restore's staging        beside the file restored
                                                                   (``format.partial``)
``.fcp-links-XXXXXXXX/``        hard links a partial restore sets  inside the one above
                                aside
``.fcp-pull-XXXXXXXX/``         ``flyte-checkpoint pull``'s        beside its destination
                                staging                            (``cli``)
``flyte-checkpoint-ws-TOKEN/``  a ``Checkpoint``'s local root:     the temp folder
                                workspace, restores, staging       (``checkpoint``)
=============================== ================================== =========================

``TOKEN`` is 12 hexadecimal digits, ``XXXXXXXX`` 8 characters as ``tempfile.mkdtemp``'s
(:func:`new_name`). ``NAME`` is the user's file name, made shorter where the working file's
name would be longer than the user's name could be (:func:`fitted`): a working file fits
wherever its user's name fits.
The staging folders (background saves', partial restores', pulls') and local roots also hold
:data:`LOCK`, the file their owner keeps locked while it lives
(:mod:`flyte_checkpoint.util.heldfolders`), and are swept once their owner is gone by the next
operation of their kind made in the same place; it is never anywhere else. A partial
restore or a pull stages in a folder of its own inside (:data:`STAGED`), never beside the lock.

:func:`is_working_file` recognises these names exactly (not a user's ``.fcp-notes``), and a
folder save leaves out every entry it recognises, at any depth (``pack_directory``, the
background snapshot, sharded segments): a save never stores another save's staging copy,
temporary file or pieces, which come and go while it reads. A new working file takes its
name from here, so that it is left out too.

Not among them: a named run's lock, ``{root}/{run_name}/.{function}.lock``. It lives beside
the run's checkpoint objects, in the run's checkpoint folder, not among the data; its name
is any function's and cannot be told from a user's file by its name alone.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Callable

#: Background saves' staging folders (:mod:`flyte_checkpoint.lifecycle.snapshot`).
STAGING = ".fcp-staging-"
#: The mark of temporary files: ``.fcp-tmp-NAME.TOKEN`` (local store), ``.NAME.fcp-tmp-TOKEN``
#: (downloads) and a local sharded save's folder ``.fcp-tmp-NAME.shard/``.
TMP = ".fcp-tmp-"
#: The suffix of a local sharded save's folder after ``.fcp-tmp-NAME``.
SHARD = ".shard"
#: Prefixes of names of 8 characters as ``tempfile.mkdtemp`` makes them (:func:`new_name`): a
#: partial restore's staging, its hard links set aside, a CLI pull's staging.
RESTORE = ".fcp-restore-"
LINKS = ".fcp-links-"
PULL = ".fcp-pull-"
#: The folder a partial restore or a pull stages in, inside its held folder.
STAGED = "tree"
#: A ``Checkpoint``'s local root in the temp folder.
ROOT = "flyte-checkpoint-ws-"
#: The lock file in a staging folder or a local root (see :mod:`flyte_checkpoint.util.heldfolders`).
LOCK = ".fcp-lock"

_TOKEN = "[0-9a-f]{12}"
_MKDTEMP_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"
_MKDTEMP = "[a-z0-9_]{8}"
_WORKING = re.compile(
    "|".join(
        (
            re.escape(STAGING) + ".+",
            re.escape(TMP) + ".+" + r"\." + _TOKEN,
            re.escape(TMP) + ".+" + re.escape(SHARD),
            r"\..+" + re.escape(TMP) + _TOKEN,
            "(?:" + "|".join(re.escape(p) for p in (RESTORE, LINKS, PULL)) + ")" + _MKDTEMP,
            re.escape(ROOT) + _TOKEN,
        )
    ),
    re.DOTALL,
)


#: The length in bytes a working file's name may reach whatever the user's name: every file
#: system in use takes names of 143 bytes (eCryptfs) or more (255 on most).
_FLOOR = 128
#: What stands for the rest of a name that was cut: ``~`` and 16 hexadecimal digits of its hash.
_CUT = 17


def fitted(before: str, name: str, after: str = "", *, room: int = 0) -> str:
    """``before + name + after``, the name of a working file made from a user's file ``name``,
    with ``name`` cut where that would not fit: the result, with ``room`` more bytes added
    after it (a token), is no longer than ``name`` or 128 bytes, whichever is longer. So it fits
    in any folder that holds ``name`` (one of 255 bytes included, ``.fcp-tmp-`` and all).

    A cut name keeps its head and ends with ``~`` and 16 hexadecimal digits of a hash of the
    whole name: the same ``name`` always gives the same result, two names almost never the
    same one, and :func:`is_working_file` recognises it as it recognises the uncut one.
    """
    whole = before + name + after
    size = len(os.fsencode(name))
    limit = max(size, _FLOOR) - room
    if len(os.fsencode(whole)) <= limit:
        return whole
    digest = hashlib.sha256(os.fsencode(name)).hexdigest()[:16]
    keep = limit - len(os.fsencode(before + after)) - _CUT
    head = ""
    for char in name:  # whole characters, so a cut name is still valid UTF-8 where name was
        keep -= len(os.fsencode(char))
        if keep < 0:
            break
        head += char
    return f"{before}{head}~{digest}{after}"


def temp_prefix(name: str) -> str:
    """``.fcp-tmp-NAME.``: how a local store writer's temporary files for ``name`` begin (then
    ``TOKEN``)."""
    return fitted(TMP, name, ".", room=12)


def shard_folder(name: str) -> str:
    """``.fcp-tmp-NAME.shard``: the name of a local sharded save's folder beside ``name``."""
    return fitted(TMP, name, SHARD)


def download_temp(name: str, token: str) -> str:
    """``.NAME.fcp-tmp-TOKEN``: the name of a download's temporary file beside ``name``."""
    return fitted(".", name, TMP, room=len(token)) + token


def new_name(prefix: str) -> str:
    """A new name ``prefix`` + ``XXXXXXXX`` (8 random characters, as ``tempfile.mkdtemp``'s)."""
    return prefix + "".join(secrets.choice(_MKDTEMP_CHARS) for _ in range(8))


def named(prefix: str) -> Callable[[str], bool]:
    """Whether a name is ``prefix`` + ``XXXXXXXX`` (:func:`new_name`'s): what a sweep of the
    folders made with that prefix removes once their makers are gone."""
    pattern = re.compile(re.escape(prefix) + _MKDTEMP)
    return lambda name: name.startswith(prefix) and pattern.fullmatch(name) is not None


def is_working_file(name: str) -> bool:
    """Whether ``name`` (one entry's name, not a path) is one of this library's working files
    (see the module's table): what a folder save leaves out."""
    return name[:1] in (".", "f") and _WORKING.fullmatch(name) is not None


def is_staging(name: str) -> bool:
    """Whether ``name`` is a background save's staging folder."""
    return name.startswith(STAGING)


def is_root(name: str) -> bool:
    """Whether ``name`` is a ``Checkpoint``'s local root (``flyte-checkpoint-ws-TOKEN``)."""
    return name.startswith(ROOT) and re.fullmatch(_TOKEN, name[len(ROOT) :]) is not None


__all__ = [
    "LOCK",
    "ROOT",
    "STAGING",
    "TMP",
    "download_temp",
    "fitted",
    "is_root",
    "is_staging",
    "is_working_file",
    "named",
    "new_name",
    "shard_folder",
    "temp_prefix",
]
