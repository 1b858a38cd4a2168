"""flytekit's tests of ``SyncCheckpoint`` (Flyte 1), adapted to flyte_checkpoint.

Upstream: https://github.com/flyteorg/flytekit, tests/flytekit/unit/core/test_checkpoint.py at commit
e96c7203089a1edc5709c92a606a2d4abb481c0e (the file last changed in c2b5c454e922f5dff1795f2a320868691429de3b).
flytekit, Copyright 2019-2020 Lyft Inc. (its NOTICE). Licensed under the Apache License, Version 2.0
(http://www.apache.org/licenses/LICENSE-2.0); this file is a modified copy: every assertion is
flytekit's, and each change is a comment on its line ("adapted: ...").

flytekit's ``SyncCheckpoint(checkpoint_dest, checkpoint_src)`` takes folders: it writes
``dest/_dst_cp`` (``TMP_DST_PATH``) or copies files into ``dest``, and ``restore(path)`` copies
the files of ``src`` into a folder of the caller's. This library's (and flyte-sdk's) checkpoint
is one object: the destination URI names it, ``load_sync()`` restores it into ``cp.path``. The
adaptations put the object where flytekit's test looks for it; ``read()``/``write()`` become
``load_sync()``/``save_sync()``. Tests of the folder-only API are left out where they stood.
"""

import os
from pathlib import Path

import flyte_checkpoint as fc  # adapted: for import flytekit
from flyte_checkpoint import Checkpoint  # adapted: for flytekit.core.checkpointer.SyncCheckpoint
from flyte_checkpoint.format.restore import PAYLOAD  # adapted: where load_sync() puts a bytes checkpoint

TMP_DST_PATH = "_dst_cp"  # adapted: SyncCheckpoint.TMP_DST_PATH


def test_sync_checkpoint_write(tmpdir):
    td_path = Path(tmpdir)
    dst_path = td_path / TMP_DST_PATH  # adapted: moved up, to name the destination object
    cp = Checkpoint(dst_path.as_uri())  # adapted: for SyncCheckpoint(checkpoint_dest=tmpdir)
    assert cp.load_sync() is None  # adapted: read() -> load_sync() (no previous checkpoint)
    assert cp.load_sync() is None  # adapted: restore() -> load_sync()
    assert not dst_path.exists()
    cp.save_sync(b"bytes")  # adapted: write() -> save_sync()
    assert dst_path.exists()


# Left out: test_sync_checkpoint_save_file. It saves an open file (io.BufferedReader) and expects
# ValueError for an unsupported object; this library saves bytes, a path or a folder, and raises
# UnsupportedDataError (a TypeError) for a file object. Not in docs/flyte.md's table.


def test_sync_checkpoint_save_filepath(tmpdir):
    src_path = Path(os.path.join(tmpdir, "src"))
    src_path.mkdir(parents=True, exist_ok=True)
    chkpnt_path = Path(os.path.join(tmpdir, "dest"))
    chkpnt_path.mkdir()
    dst_path = chkpnt_path / "test"  # adapted: moved up, to name the destination object
    cp = Checkpoint(dst_path.as_uri())  # adapted: for SyncCheckpoint(checkpoint_dest=str(chkpnt_path))
    assert not dst_path.exists()
    inp = src_path / "test"
    with inp.open("wb") as f:
        f.write(b"blah")
    cp.save_sync(inp)  # adapted: save() -> save_sync()
    assert dst_path.exists()


# Left out: test_sync_checkpoint_restore. restore(user_dest) copies the previous checkpoint into
# a folder of the caller's (ValueError if it does not exist; a second call returns the first
# folder); this library restores into cp.path and has no such argument.

# Left out: test_sync_checkpoint_restore_corrupt. flytekit raises FlyteDataNotFoundException when
# the previous checkpoint is missing; this library returns None, as flyte-sdk's
# test_checkpoint_load_sync_treats_sync_get_errors_as_no_checkpoint requires (test_flyte_sdk_checkpoint.py).
# The two Flyte SDKs disagree; docs/flyte.md does not say so.


def test_sync_checkpoint_restore_default_path(tmpdir):
    td_path = Path(tmpdir)
    dest = td_path / "dest"
    dest.mkdir()
    src = td_path / "src"
    src.mkdir()
    prev = src / "prev"
    p = b"prev-bytes"
    with prev.open("wb") as f:
        f.write(p)
    cp = Checkpoint((dest / TMP_DST_PATH).as_uri(), prev.as_uri())  # adapted: URIs name objects, not folders
    loaded = cp.load_sync()  # adapted: read() returns the bytes, load_sync() the path holding them
    assert loaded is not None and loaded.read_bytes() == p  # adapted: for cp.read() == p
    assert cp.path is not None  # adapted: for cp._prev_download_path (where it downloads the previous one)
    assert cp.load_sync() == cp.path / PAYLOAD  # adapted: for cp.restore() == cp._prev_download_path


# Left out: test_sync_checkpoint_read_empty_dir and test_sync_checkpoint_read_multiple_files. Their
# previous checkpoint is a folder of files (none, or two: "Expected exactly one checkpoint");
# here it is one object, and a URI naming a folder raises StoreError ("point the URI at a file").


@fc.task  # adapted: for @flytekit.task (the local runner gives each attempt a destination)
def t1(n: int) -> int:
    ctx = fc.ctx()  # adapted: for flytekit.current_context()
    cp = ctx.checkpoint
    cp.save_sync(bytes(n + 1))  # adapted: write() -> save_sync()
    return n + 1


def test_checkpoint_task():
    assert t1(n=5) == 6
