"""flytekit's tests of ``SyncCheckpoint`` (Flyte 1), adapted to flyte_checkpoint.

Upstream: https://github.com/flyteorg/flytekit, tests/flytekit/unit/core/test_checkpointer.py at
commit e96c7203089a1edc5709c92a606a2d4abb481c0e. flytekit, Copyright 2019-2020 Lyft Inc. (its
NOTICE). Licensed under the Apache License, Version 2.0 (http://www.apache.org/licenses/LICENSE-2.0);
this file is a modified copy: every assertion is flytekit's, and each change is a comment on its
line ("adapted: ..."). See test_flytekit_checkpoint.py for how flytekit's folders map to this
library's single object: the destination URI here names the object flytekit's test expects in
``outputs``.
"""

from pathlib import Path

import py.path

from flyte_checkpoint import Checkpoint  # adapted: for flytekit.core.checkpointer.SyncCheckpoint

from .differences import documented_difference

CHECKPOINT_FILE = "cp"


def create_folder_write_file(tmpdir: py.path.local) -> tuple[py.path.local, py.path.local, py.path.local]:
    outputs = tmpdir.mkdir("outputs")

    # Make an input test directory with one file called cp
    inputs = tmpdir.mkdir("inputs")
    input_file = inputs.join(CHECKPOINT_FILE)
    input_file.write_text("Hello!", encoding="utf-8")

    return inputs, input_file, outputs


@documented_difference(  # adapted: the manifest's sidecar beside the object is a documented difference
    "What a save leaves at the destination's folder: the object and NAME.fcp-history/",
    AssertionError,
)
def test_sync_checkpoint_file(tmpdir: py.path.local):
    inputs, input_file, outputs = create_folder_write_file(tmpdir)  # noqa: RUF059 (upstream unpacks all three)
    expected_dst = outputs.join(CHECKPOINT_FILE)  # adapted: moved up, to name the destination object
    cp = Checkpoint(Path(str(expected_dst)).as_uri())  # adapted: for SyncCheckpoint(checkpoint_dest=outputs)
    # Lets try to restore - should not work!
    assert not cp.load_sync()  # adapted: restore("/tmp") -> load_sync()
    # Now save
    cp.save_sync(str(input_file))  # adapted: save() -> save_sync()
    # Expect file in tmpdir
    assert outputs.listdir() == [expected_dst]


# Left out: test_sync_checkpoint_reader. It saves an open file (a reader); this library saves
# bytes, a path or a folder (UnsupportedDataError for a file object). Not in docs/flyte.md's table.


@documented_difference(  # adapted: the manifest's sidecar beside the object is a documented difference
    "What a save leaves at the destination's folder: the object and NAME.fcp-history/",
    AssertionError,
)
def test_sync_checkpoint_folder(tmpdir: py.path.local):
    inputs, input_file, outputs = create_folder_write_file(tmpdir)  # noqa: RUF059 (upstream unpacks all three)
    expected_dst = outputs.join(CHECKPOINT_FILE)  # adapted: moved up, to name the destination object
    cp = Checkpoint(Path(str(expected_dst)).as_uri())  # adapted: for SyncCheckpoint(checkpoint_dest=outputs)
    # Lets try to restore - should not work!
    assert not cp.load_sync()  # adapted: restore("/tmp") -> load_sync()
    # Now save
    cp.save_sync(Path(str(inputs)))  # adapted: save() -> save_sync(); the folder becomes one tar object
    # Expect file in tmpdir
    assert outputs.listdir() == [expected_dst]


# Left out: test_sync_checkpoint_previous. restore(scratch) copies the previous checkpoint into a
# folder of the caller's and a second restore("x") returns the first folder; this library
# restores into cp.path and has no such argument.
