"""``load_file_sync(name, dest)``: where the file goes, as ``cp`` decides (issue 32, item 16).

A folder ``dest`` (or a link to one, or a path ending with ``/``) receives the file under its
base name; any other ``dest`` is the file itself. A folder where the file goes, or a file where
a folder must be, is a :class:`WorkspaceError` that names it and says what to do; nothing is
written and no staging folder is left. Each case runs on the file and memory stores, against
an object with an index (saved here: ranged reads) and one without (made by ``tarfile``, as
Flyte's: streamed).
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import CheckpointError, WorkspaceError
from flyte_checkpoint.util.workfiles import RESTORE

CONTENT = b"weights of epoch 3" * 500


@pytest.fixture(params=["file-indexed", "file-plain", "memory-indexed", "memory-plain"])
def source(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A checkpoint holding ``run/sub/model.pt`` (CONTENT) and ``run/other.txt``."""
    target, kind = request.param.split("-")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "model.pt").write_bytes(CONTENT)
    (tree / "other.txt").write_text("other")
    uri = str(tmp_path / "src.obj") if target == "file" else f"memory://dest/{os.urandom(4).hex()}/src"
    if kind == "indexed":
        fc.Checkpoint(uri).save_sync(tree)
    else:
        plain = tmp_path / "plain.tar.gz"
        with tarfile.open(plain, "w:gz") as tar:
            for entry in sorted(tree.iterdir()):
                tar.add(entry, arcname=entry.name)
        fc.Checkpoint(uri).save_sync(plain.read_bytes())
    return uri


def restore(source: str, tmp_path: Path, dest: str | os.PathLike[str]) -> Path | None:
    with fc.Checkpoint(str(tmp_path / "unused"), source) as cp:
        return cp.load_file_sync("sub/model.pt", dest)


def leftovers(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.rglob(RESTORE + "*"))


def test_an_existing_folder_as_dest_receives_the_file_under_its_base_name(source: str, tmp_path: Path):
    """Proves (item 16): ``dest`` an existing folder (as ``cp a/b.bin folder``), a link to a
    folder (the file goes where the link leads; the link stays), or a path ending with ``/``
    that does not exist yet (made) receives ``model.pt``; a file of that name there is
    replaced. The path written is returned."""
    folder = tmp_path / "out"
    folder.mkdir()
    assert restore(source, tmp_path, folder) == folder / "model.pt"
    assert (folder / "model.pt").read_bytes() == CONTENT
    (folder / "model.pt").write_bytes(b"old")
    assert restore(source, tmp_path, str(folder)) == folder / "model.pt"
    assert (folder / "model.pt").read_bytes() == CONTENT
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert restore(source, tmp_path, tmp_path / "link") == tmp_path / "link" / "model.pt"
    assert (real / "model.pt").read_bytes() == CONTENT and (tmp_path / "link").is_symlink()
    assert restore(source, tmp_path, f"{tmp_path}/new/deeper/") == tmp_path / "new" / "deeper" / "model.pt"
    assert (tmp_path / "new" / "deeper" / "model.pt").read_bytes() == CONTENT
    assert leftovers(tmp_path) == []


def test_any_other_dest_is_the_file_itself(source: str, tmp_path: Path):
    """Proves: a ``dest`` that is not a folder is the file written: missing folders above it are
    made; a link there (to a file, or leading nowhere) is replaced by the file and what it led
    to is left alone."""
    deep = tmp_path / "a" / "b" / "c.pt"
    assert restore(source, tmp_path, deep) == deep and deep.read_bytes() == CONTENT
    kept = tmp_path / "epoch2.ckpt"
    kept.write_bytes(b"epoch 2")
    (tmp_path / "last.ckpt").symlink_to(kept)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for name in ("last.ckpt", "dangling"):
        path = tmp_path / name
        assert restore(source, tmp_path, path) == path
        assert not path.is_symlink() and path.read_bytes() == CONTENT
    assert kept.read_bytes() == b"epoch 2" and not (tmp_path / "nowhere").exists()
    assert leftovers(tmp_path) == []


def test_a_folder_or_a_file_in_the_way_is_an_error_that_says_what_to_do(source: str, tmp_path: Path):
    """Proves: a folder named ``model.pt`` in the folder given as ``dest``, and a file where a
    folder above ``dest`` must be, raise WorkspaceError (a CheckpointError and an OSError),
    which names the path in the way, the checkpoint and what to do; nothing is written and no
    staging folder is left (the library's own names never show)."""
    folder = tmp_path / "out"
    (folder / "model.pt").mkdir(parents=True)
    (folder / "model.pt" / "inside").write_bytes(b"keep")
    with pytest.raises(WorkspaceError) as err:
        restore(source, tmp_path, folder)
    text = str(err.value)
    assert isinstance(err.value, CheckpointError) and isinstance(err.value, OSError)
    assert f"{folder / 'model.pt'}: a folder is there" in text and "Pass the path of a file" in text
    assert "sub/model.pt" in text and source.rsplit("/", 1)[-1] in text and RESTORE not in text
    assert (folder / "model.pt" / "inside").read_bytes() == b"keep"
    blocker = tmp_path / "afile"
    blocker.write_bytes(b"in the way")
    with pytest.raises(WorkspaceError, match=rf"{blocker} is a file \(or a link .*\), not a folder\. Pass"):
        restore(source, tmp_path, blocker / "x" / "y.pt")
    assert blocker.read_bytes() == b"in the way"
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_a_fifo_or_a_socket_at_dest_is_in_the_way_and_left_as_it_is(source: str, tmp_path: Path, kind: str):
    """Proves: a ``dest`` that is a FIFO or a socket (a device such as ``/dev/null`` alike) is
    in the way, a WorkspaceError naming it; it was replaced by a regular file holding the bytes
    (``load_file_sync(name, '/dev/null')`` run as root left ``/dev/null`` a regular file, which
    broke every program on the machine that wrote to it). Nothing is written, the node stays."""
    import socket
    import stat

    node = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(node)
    else:
        bound = socket.socket(socket.AF_UNIX)
        bound.bind(str(node))
        bound.close()
    with pytest.raises(WorkspaceError) as err:
        restore(source, tmp_path, node)
    text = str(err.value)
    assert f"cannot restore 'sub/model.pt' from {source}"[:40] in text
    assert f"to {node}: a {'FIFO' if kind == 'fifo' else 'socket'} is there" in text
    assert "Pass the path of a file" in text
    mode = os.lstat(node).st_mode
    assert (stat.S_ISFIFO if kind == "fifo" else stat.S_ISSOCK)(mode)
    assert leftovers(tmp_path) == []
