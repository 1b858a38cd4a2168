"""The checkpoint contract as a whole, as a hypothesis rule-based state machine.

Random sequences of what a task does to a checkpoint, on the file and memory backends and on
S3 (moto's server on 127.0.0.1): it grows and changes a real tree (files with odd, long and
unicode names, empty folders, sparse and empty files, contents that look like tar or gzip,
links inside and outside the tree, dangling ones), saves it, saves bytes and files (that may
look like tarballs too), overwrites, changes a file while it is being saved (at a set point:
right after its bytes went into the tar, or after the first read of a file saved alone),
damages the stored object (cut, a flipped bit, a zeroed range, whole gzip members), saves
under the load limits, cancels async saves and loads at store calls they report (a gate on
tests/spystore.py), interrupts saves and loads (KeyboardInterrupt at a point of
test_interrupts.py's hook) and forks children that load and save while the parent is mid-save.

After every step a fresh ``Checkpoint`` whose source is the destination loads it, and what
it gives is checked against the model, the last committed save:

- a folder comes back as what reading the folder showed when it was saved: every path (links
  followed, loops cut), its kind, its bytes (hash), the modes we promise (files: their
  permission bits with owner read/write; folders: with owner rwx), holes in large sparse
  files; each link that resolved inside the tree is a link resolving to the same place;
- bytes and files come back whole as ``payload``, unless Python's ``tarfile`` takes them for
  a tarball: then a tree or a typed error (a tarball of known members: exactly its tree);
- a damaged object: a typed error from ``flyte_checkpoint.errors``, or, where the damage left
  a valid object of another kind, what the bytes are (a payload, or the same tree); never a
  part of the tree;
- a save that raised left the stored object byte for byte as it was;
- after each sequence: no thread, temporary file, open multipart upload or workspace left.

CI runs a fixed budget (``FCP_STATE_EXAMPLES`` sequences of up to ``FCP_STATE_STEPS`` steps per
backend); RELIABILITY.md gives the command that runs it longer.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import errno
import faulthandler
import gc
import hashlib
import io
import os
import select
import shutil
import signal
import stat
import tarfile
import tempfile
import threading
import traceback
import uuid
import weakref
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import flyte_checkpoint as fc
from flyte_checkpoint.errors import CheckpointError, SourceChangedError, UnsupportedDataError
from flyte_checkpoint.format.compression import GZIP_MAGIC
from flyte_checkpoint.format.pipeline import ParallelGzipWriter
from flyte_checkpoint.lifecycle import saveorder
from flyte_checkpoint.storage.registry import get_registry, store_for
from flyte_checkpoint.uri import scheme_of
from flyte_checkpoint.util.limits import MAX_MEMBERS_ENV, MAX_UNPACKED_ENV
from flyte_checkpoint.util.retry import RetryPolicy
from flyte_checkpoint.util.sources import SourceFile
from tests.reliability.backends import backend_pool, s3_open_uploads  # noqa: F401
from tests.reliability.gates import HANG, Gate, cancel_then_close
from tests.reliability.test_interrupts import InterruptHook, assert_nothing_left, settle
from tests.spystore import spying
from tests.test_load_properties import OBJECTS, _gz, _may_be_tarball

#: CI's budget, per backend; raise both to run it longer (see RELIABILITY.md).
LONG_RUN = os.environ.get("FCP_STATE_EXAMPLES")
EXAMPLES = int(LONG_RUN or "4")
STEPS = int(os.environ.get("FCP_STATE_STEPS", "20"))
BACKEND_NAMES = ("file", "memory", "s3")
#: Loads of damaged objects fail fast: a retry would only read the same bytes again.
ONE_TRY = RetryPolicy(attempts=1)
LONG_AGO = (1_000_000_000, 1_000_000_000)  # an mtime in 2001: any write now changes it
BIG = 1024 * 1024  # files this large are made sparse; their holes must survive a load
WORKSPACES = "flyte-checkpoint-ws-*"
#: What the runs did, per backend (printed at the end, ``-s`` shows it).
TALLY: Counter[str] = Counter()


def event(what: str) -> None:
    TALLY[what] += 1


# -- strategies --------------------------------------------------------------------------------

ODD_NAMES = [
    "-rf", "--", "-", "--help", " ", " lead", "trail ", "a b", "new\nline", "tab\t", "back\\slash",
    "*", "?", "[x]", "$HOME", "'q'", '"dq"', "é", "e\u0301", "日本語", "😀", ".hidden", "...",
    "payload", "workspace", ".fcp-tmp-x", "\x7f", "\x01", "@", "#", "a:b", "%41", "ckpt.tar.gz",
]  # fmt: skip
NAME_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="/\0")
NAMES = st.one_of(
    st.sampled_from(["a", "b", "c", "d", "f", "x.bin"]),
    st.sampled_from(ODD_NAMES),
    st.text(NAME_CHARS, min_size=1, max_size=12),
    # around the 100 bytes of a ustar name field, in one- and two-byte characters
    st.integers(97, 103).map(lambda n: "n" * n),
    st.integers(48, 52).map(lambda n: "é" * n + "z"),
    # around NAME_MAX (255 bytes)
    st.integers(250, 255).map(lambda n: "L" * n),
    st.just("é" * 127 + "z"),
).filter(lambda s: s not in (".", "..") and len(s.encode()) <= 255)


def _tar(members: list[tuple[str, bytes]], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


TAR_MEMBERS = st.lists(
    st.tuples(st.sampled_from(["a", "b", "é", "n" * 120]), st.binary(max_size=600)), max_size=3
)
CONTENTS = st.one_of(
    st.just(b""),
    st.binary(max_size=3000),
    st.builds(lambda n, tail: bytes(512 * n) + tail, st.integers(1, 4), st.binary(max_size=40)),
    st.builds(_tar, TAR_MEMBERS),
    st.builds(lambda m: _gz(_tar(m)), TAR_MEMBERS),
    st.builds(lambda b: b"\x1f\x8b" + b, st.binary(max_size=200)),
    st.builds(lambda b: _gz(b), st.binary(max_size=500)),
    OBJECTS,
)
#: Data islands in a sparse file: (offset, bytes).
ISLANDS = st.lists(st.tuples(st.integers(0, 6 * BIG), st.binary(min_size=1, max_size=300)), max_size=4)
FILE_MODES = st.sampled_from([0o644, 0o600, 0o755, 0o700, 0o444, 0o640, 0o777, 0o604, 0o4755])
DIR_MODES = st.sampled_from([0o755, 0o700, 0o750, 0o555, 0o777, 0o1777])
LINK_KINDS = st.sampled_from(
    ["rel", "rel", "abs", "abs", "dangling", "out_file", "out_dir", "out_missing", "holder", "root", "self"]
)


@st.composite
def known_tarballs(draw) -> tuple[bytes, dict[str, tuple]]:
    """A tarball (gzip'd or not, PAX or GNU) of files and folders, and the view its load gives."""
    files = draw(
        st.dictionaries(
            st.sampled_from(
                ["a", "é", "-rf", "sp ace", "n" * 99, "m" * 101, "d/b", "d/e/f", "d/" + "x" * 120]
            ),
            st.tuples(st.binary(max_size=900), st.sampled_from([0o644, 0o755, 0o600, 0o400])),
            min_size=1,
            max_size=5,
        )
    )
    dir_mode = draw(st.sampled_from([0o755, 0o700, 0o555]))
    buf = io.BytesIO()
    view: dict[str, tuple] = {}
    fmt = draw(st.sampled_from([tarfile.PAX_FORMAT, tarfile.GNU_FORMAT]))
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for name in sorted(files):
            parts = name.split("/")
            for i in range(1, len(parts)):
                folder = "/".join(parts[:i])
                if folder not in view:
                    info = tarfile.TarInfo(folder)
                    info.type, info.mode = tarfile.DIRTYPE, dir_mode
                    tf.addfile(info)
                    view[folder] = ("dir", dir_mode & 0o777 | 0o700)
            data, mode = files[name]
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tf.addfile(info, io.BytesIO(data))
            view[name] = ("file", _sha(data), mode & 0o777 | 0o600)
    blob = buf.getvalue()
    return (_gz(blob) if draw(st.booleans()) else blob), view


# -- what reading a tree shows ------------------------------------------------------------------


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_hash(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(BIG):
            h.update(chunk)
    return h.hexdigest()


def _inside(real: str, root: str) -> bool:
    return real == root or real.startswith(root.rstrip("/") + "/")


@dataclass
class View:
    """What reading a tree shows: ``entries`` maps each path (links followed, loops cut) to
    ``("file", sha256, mode[, holes])``, ``("dir", mode)`` or ``("nothing",)``; ``lands`` maps
    each link that resolves inside the tree to where it lands; ``escapes`` lists links that
    resolve outside it."""

    entries: dict[str, tuple] = field(default_factory=dict)
    lands: dict[str, str] = field(default_factory=dict)
    escapes: list[str] = field(default_factory=list)


def _differences(expected: View, got: View) -> list[str]:
    """How the view ``got`` of a restored tree differs from ``expected``, in words."""
    out = []
    missing = sorted(set(expected.entries) - set(got.entries))
    extra = sorted(set(got.entries) - set(expected.entries))
    if missing or extra:
        out.append(f"missing {missing[:5]}, extra {extra[:5]}")
    differ = {k: (v, got.entries[k]) for k, v in expected.entries.items() if got.entries.get(k, v) != v}
    if differ:
        out.append(f"entries differ (expected, got): {dict(list(differ.items())[:5])}")
    if got.escapes:
        out.append(f"restored links that leave the tree: {got.escapes}")
    moved = {k: (v, got.lands.get(k)) for k, v in expected.lands.items() if got.lands.get(k) != v}
    if moved:
        out.append(f"links landing elsewhere (expected, got): {moved}")
    return out


def view(root: str | os.PathLike[str]) -> View:
    """Read ``root`` as a task that resumes would, with the modes a load promises."""
    out = View()
    root_real = os.path.realpath(root)

    def walk(folder: str, rel: str, open_dirs: frozenset[str]) -> None:
        for name in sorted(os.listdir(folder)):
            path, key = os.path.join(folder, name), rel + name
            if os.path.islink(path):
                real = os.path.realpath(path)
                if _inside(real, root_real):
                    out.lands[key] = os.path.relpath(real, root_real)
                else:
                    out.escapes.append(key)
            try:
                st_ = os.stat(path)
            except OSError as exc:
                assert exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP), exc
                out.entries[key] = ("nothing",)
                continue
            real = os.path.realpath(path)
            if real == root_real:  # the tree's own folder: no member holds its mode
                out.entries[key] = ("the tree itself",)
            elif stat.S_ISDIR(st_.st_mode):
                out.entries[key] = ("dir", st_.st_mode & 0o777 | 0o700)
                if real not in open_dirs:  # a folder met again through a link is a loop: cut it
                    walk(path, key + "/", open_dirs | {real})
            elif stat.S_ISREG(st_.st_mode):
                entry: tuple = ("file", _file_hash(path), st_.st_mode & 0o777 | 0o600)
                if st_.st_size >= BIG:  # made sparse: it must stay so
                    entry += (st_.st_blocks * 512 < st_.st_size // 2,)
                out.entries[key] = entry
            else:
                out.entries[key] = ("special",)

    walk(str(root), "", frozenset({root_real}))
    return out


# -- the model ----------------------------------------------------------------------------------


@dataclass
class Stored:
    """What the destination must load as.

    ``kind``: ``"tree"`` (``tree``: the view its load must show; ``"tarball"`` for a tarball of
    known members, the same), ``"payload"`` (``payload_hash``: the bytes that must come back whole),
    ``"tarlike"`` (bytes ``tarfile`` takes for a tarball: a tree or a typed error),
    ``"damaged"`` (``before``: what it was). ``blob``: the object's bytes.
    """

    kind: str
    blob: bytes
    tree: View | None = None
    payload_hash: str | None = None
    before: Stored | None = None
    how: str = ""


DAMAGE = [
    "cut", "flip", "zero", "zeros after",
    "drop a member", "repeat a member", "zero a member", "cut after a member", "swap two members",
]  # fmt: skip


def _members(blob: bytes) -> list[tuple[int, int]]:
    """Where each whole gzip member of ``blob`` begins and ends (a save writes one per 4 MiB of tar)."""
    spans, pos = [], 0
    while blob[pos : pos + 2] == GZIP_MAGIC:
        d = zlib.decompressobj(31)
        try:
            d.decompress(blob[pos:])
        except zlib.error:
            break
        if not d.eof:
            break
        end = len(blob) - len(d.unused_data)
        spans.append((pos, end))
        pos = end
    return spans


def _damage(blob: bytes, how: str, at: int, length: int, bit: int) -> bytes:
    if how.endswith("member"):  # whole gzip members: each one's checksum still holds
        spans = _members(blob)
        if len(spans) < 2:
            how = "cut"
        else:
            i, j = at % len(spans), (at // len(spans)) % len(spans)
            (a, b), (c, d) = spans[i], spans[j]
            if how == "drop a member":
                return blob[:a] + blob[b:]
            if how == "repeat a member":
                return blob[:b] + blob[a:b] + blob[b:]
            if how == "zero a member":
                return blob[:a] + bytes(b - a) + blob[b:]
            if how == "cut after a member":
                return blob[:b]
            first, second = sorted([(a, b), (c, d)])  # "swap two members"
            return (
                blob[: first[0]]
                + blob[second[0] : second[1]]
                + blob[first[1] : second[0]]
                + blob[first[0] : first[1]]
                + blob[second[1] :]
            )
    at %= len(blob)
    if how == "cut":
        return blob[:at]
    if how == "flip":
        b = bytearray(blob)
        b[at] ^= 1 << bit
        return bytes(b)
    if how == "zero":
        return blob[:at] + bytes(min(length, len(blob) - at)) + blob[at + length :]
    return blob + bytes(length)  # "zeros after"


@contextlib.contextmanager
def _after(cls: type, name: str, action: Callable[[object, tuple, object], None]) -> Iterator[None]:
    """``cls.name`` calls ``action(self, args, result)`` after each call, while in the block."""
    original = getattr(cls, name)

    def wrapper(self, *args):
        result = original(self, *args)
        action(self, args, result)
        return result

    setattr(cls, name, wrapper)
    try:
        yield
    finally:
        setattr(cls, name, original)


def _change(path: str, how: str) -> None:
    size = os.path.getsize(path)
    if how == "truncated":
        os.truncate(path, size // 2)
    elif how == "rewritten in place":
        with open(path, "r+b") as f:
            data = f.read()
            f.seek(0)
            f.write(bytes(b ^ 0xFF for b in data))
    else:
        with open(path, "ab") as f:
            f.write(b"more")


class Contract(RuleBasedStateMachine):
    """One task's checkpoint: a live tree, a destination, and the model of what it holds.

    ``where`` (a class attribute set per backend) makes destination URIs; ``base`` is a folder
    for the trees.
    """

    where: Callable[[], str]
    base: Path
    backend: str
    pool_backend: object  # the running server's Backend (S3), or None

    def __init__(self) -> None:
        super().__init__()
        self.sandbox = Path(tempfile.mkdtemp(dir=self.base))
        self.root = self.sandbox / "tree"
        self.root.mkdir()
        outside = self.sandbox / "outside"
        (outside / "dir" / "sub").mkdir(parents=True)
        (outside / "file").write_bytes(b"outside the tree")
        (outside / "dir" / "a").write_bytes(b"a, in a folder outside")
        (outside / "dir" / "sub" / "b").write_bytes(b"")
        self.outside = outside
        self.files = self.sandbox / "files"  # files saved on their own
        self.files.mkdir()
        self.dest = self.where()
        self.stored: Stored | None = None
        self.saver = fc.Checkpoint(self.dest)
        TALLY["sequences"] += 1

    # -- the live tree ---------------------------------------------------------------------

    def folders(self) -> list[Path]:
        out = [self.root]
        for dirpath, dirnames, _ in os.walk(self.root):
            out += [Path(dirpath, d) for d in sorted(dirnames) if not Path(dirpath, d).is_symlink()]
        return [p for p in out if len(p.relative_to(self.root).parts) < 4]

    def entries(self, *, files_only: bool = False) -> list[Path]:
        out = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            for name in sorted(dirnames + filenames):
                p = Path(dirpath, name)
                if not files_only or (p.is_file() and not p.is_symlink()):
                    out.append(p)
        return out

    def new_path(self, data: st.DataObject) -> Path | None:
        parent = data.draw(st.sampled_from(self.folders()), label="parent")
        path = parent / data.draw(NAMES, label="name")
        if os.path.lexists(path) or len(os.fsencode(str(path))) > 3000:
            return None
        return path

    @rule(data=st.data(), content=CONTENTS, mode=FILE_MODES)
    def add_file(self, data, content, mode):
        path = self.new_path(data)
        if path is not None:
            path.write_bytes(content)
            os.chmod(path, mode)

    @rule(data=st.data(), size=st.integers(BIG, 6 * BIG), islands=ISLANDS)
    def add_sparse_file(self, data, size, islands):
        path = self.new_path(data)
        if path is None or sum(1 for p in self.entries(files_only=True) if p.stat().st_size >= BIG) >= 2:
            return
        with open(path, "wb") as f:
            f.truncate(size)
            for offset, chunk in islands:
                f.seek(min(offset, size - len(chunk)))
                f.write(chunk)

    @rule(data=st.data(), mode=DIR_MODES)
    def add_folder(self, data, mode):
        path = self.new_path(data)
        if path is not None:
            path.mkdir()
            os.chmod(path, mode)

    @rule(data=st.data(), kind=LINK_KINDS)
    def add_link(self, data, kind):
        path = self.new_path(data)
        if path is None or sum(1 for p in self.entries() if p.is_symlink()) >= 6:
            return
        here = path.parent
        target: str
        if kind in ("rel", "abs"):
            entries = self.entries()
            if not entries:
                return
            to = data.draw(st.sampled_from(entries), label="to")
            target = os.path.relpath(to, here) if kind == "rel" else str(to)
        else:
            target = {
                "dangling": os.path.relpath(self.root / "missing", here),
                "out_file": str(self.outside / "file"),
                "out_dir": str(self.outside / "dir"),
                "out_missing": str(self.outside / "missing"),
                "holder": str(self.sandbox),
                "root": os.path.relpath(self.root, here),
                "self": path.name,
            }[kind]
        path.symlink_to(target)

    @rule(data=st.data())
    def add_hard_link(self, data):
        files = self.entries(files_only=True)
        path = self.new_path(data)
        if files and path is not None:
            os.link(data.draw(st.sampled_from(files), label="linked"), path)

    @rule(data=st.data())
    def remove(self, data):
        entries = self.entries()
        if entries:
            path = data.draw(st.sampled_from(entries), label="removed")
            if path.is_symlink() or not path.is_dir():
                path.unlink()
            else:
                shutil.rmtree(path)

    @rule(data=st.data(), content=CONTENTS)
    def rewrite(self, data, content):
        files = self.entries(files_only=True)
        if files:
            path = data.draw(st.sampled_from(files), label="rewritten")
            path.write_bytes(content)

    # -- saves -----------------------------------------------------------------------------

    def expected_for_tree(self, root: Path | None = None) -> tuple[View, list[str], list[str]]:
        """The view of ``root`` (default: the tree), the links a save must refuse and those it
        may refuse (loops)."""
        root = root or self.root
        seen = view(root)
        must, may = [], []
        for key in seen.escapes:
            path = root / key
            try:
                real = os.path.realpath(path, strict=True)
            except OSError as exc:
                (may if exc.errno == errno.ELOOP else must).append(key)
                continue
            if os.path.isdir(real) and _inside(str(root), real):
                must.append(key)  # a folder holding the tree: its content would hold it again
        for key, entry in seen.entries.items():
            if entry == ("nothing",) and key in seen.lands:
                try:
                    os.stat(root / key)
                except OSError as exc:
                    if exc.errno == errno.ELOOP:
                        may.append(key)
        return seen, must, may

    def committed(self, stored: Stored) -> None:
        """The save returned: the object is there, and it is what the model says."""
        blob = store_for(self.dest).read_bytes(self.dest)
        event(f"saved: {stored.kind}")
        if stored.tree is not None:
            TALLY["entries in saved trees"] += len(stored.tree.entries)
        stored.blob = blob
        self.stored = stored

    def failed(self, exc: BaseException) -> None:
        """The save raised: the object must be byte for byte what it was, nothing left behind."""
        event(f"save refused: {type(exc).__name__}")
        assert isinstance(exc, CheckpointError), f"an untyped error: {exc!r}"
        assert self.unchanged(), "a failed save changed the object"
        self.check_nothing_left()

    def unchanged(self) -> bool:
        """Whether the destination holds, byte for byte, what the model says was committed."""
        size = store_for(self.dest).stat(self.dest)
        if self.stored is None:
            return size is None
        return size is not None and store_for(self.dest).read_bytes(self.dest) == self.stored.blob

    def check_nothing_left(self) -> None:
        assert self.nothing_left(), "a temporary file or an open multipart upload was left"

    def nothing_left(self) -> bool:
        """No temporary file beside a local object, no open multipart upload on S3."""
        if self.backend == "file":
            folder = os.path.dirname(self.dest)
            names = os.listdir(folder) if os.path.isdir(folder) else []
            return not [p for p in names if p.startswith(".fcp-tmp-")]
        if self.backend == "s3":
            return s3_open_uploads(self.pool_backend, self.dest) == []
        return True

    @rule(use_async=st.booleans(), with_progress=st.booleans())
    def save_folder(self, use_async, with_progress):
        self.save_tree(self.root, use_async, with_progress)

    def save_tree(self, root: Path, use_async: bool, with_progress: bool) -> None:
        """Save the folder ``root`` (the tree, or a workspace) and update the model."""
        seen, must, may = self.expected_for_tree(root)
        calls: list[tuple[int, int | None]] = []
        saver = (
            fc.Checkpoint(self.dest, progress=lambda d, t: calls.append((d, t))) if with_progress else None
        )
        try:
            _save(saver or self.saver, root, use_async)
        except UnsupportedDataError as exc:
            assert must or may, f"a tree with no bad link was refused: {exc}"
            named = [k for k in must + may if str(root / k) in str(exc)]
            assert named, f"the refusal names none of the links {must + may}: {exc}"
            self.failed(exc)
            return
        finally:
            if saver is not None:
                saver.close()
                done = [d for d, _ in calls]
                assert done == sorted(done), f"progress went back: {calls}"
                assert all(t is not None and d <= t for d, t in calls), f"progress past its total: {calls}"
        assert not must, f"the links {must} cannot be stored, yet the save returned"
        if calls:
            assert calls[-1][0] == calls[-1][1], f"a save's progress ended at {calls[-1]}"
        self.committed(Stored("tree", b"", tree=seen))

    @rule(data=st.data(), content=CONTENTS)
    def resume_change_and_save_the_workspace(self, data, content):
        """What a task does: load its checkpoint, change what was restored, save that folder."""
        with fc.Checkpoint(self.dest, self.dest, retry=ONE_TRY) as cp:
            try:
                path = cp.load_sync()
            except CheckpointError:
                return  # damaged: checked after every step
            if path is None:
                return
            if path.name == "payload":
                path.write_bytes(content)
                _save(cp, path, data.draw(st.booleans(), label="async"))
                self.committed(self.bytes_model(content))
                return
            folders = [path] + [p for p in path.rglob("*") if p.is_dir() and not p.is_symlink()]
            new = data.draw(st.sampled_from(folders), label="in") / data.draw(NAMES, label="name")
            if not os.path.lexists(new):
                new.write_bytes(content)
            self.save_tree(path, data.draw(st.booleans(), label="async"), False)

    @rule(blob=st.one_of(CONTENTS, st.binary(min_size=1, max_size=64)), use_async=st.booleans())
    def save_bytes(self, blob, use_async):
        _save(self.saver, blob, use_async)
        self.committed(self.bytes_model(blob))

    @staticmethod
    def bytes_model(blob: bytes) -> Stored:
        if _may_be_tarball(blob):
            return Stored("tarlike", blob)
        return Stored("payload", blob, payload_hash=_sha(blob))

    @rule(tarball=known_tarballs())
    def save_a_tarball_of_known_members(self, tarball):
        """Bytes that are a tarball (as Flyte or GNU tar write it) load as their tree."""
        blob, entries = tarball
        self.saver.save_sync(blob)
        self.committed(Stored("tarball", blob, tree=View(entries)))

    @precondition(lambda self: self.stored is not None and self.stored.kind in ("tree", "tarball"))
    @rule()
    def save_the_object_as_bytes(self):
        """A checkpoint's bytes saved as bytes (a copy, as pull and push make) load as its tree."""
        assert self.stored is not None
        self.saver.save_sync(self.stored.blob)
        self.committed(Stored(self.stored.kind, b"", tree=self.stored.tree))

    @rule(data=st.data())
    def save_a_file(self, data):
        files = self.entries(files_only=True)
        if files and data.draw(st.booleans(), label="from the tree"):
            path = data.draw(st.sampled_from(files), label="file")
        else:
            path = self.files / uuid.uuid4().hex
            path.write_bytes(data.draw(CONTENTS, label="content"))
        blob = path.read_bytes()
        progress = (lambda done, total: None) if data.draw(st.booleans(), label="progress") else None
        with fc.Checkpoint(self.dest, progress=progress) as cp:
            _save(cp, path, data.draw(st.booleans(), label="async"))
        self.committed(self.bytes_model(blob))

    @rule(data=st.data(), how=st.sampled_from(["truncated", "rewritten in place", "appended to"]))
    def change_a_file_while_its_folder_is_saved(self, data, how):
        """Right after a file's bytes went into the tar, before it is checked: the save fails,
        naming it, and nothing is committed."""
        files = [p for p in self.entries(files_only=True) if p.stat().st_size < BIG]
        if not files:
            return
        path = data.draw(st.sampled_from(files), label="changed")
        content = uuid.uuid4().bytes * data.draw(st.integers(1, 40), label="size")  # unique in the tar
        path.write_bytes(content)
        os.utime(path, LONG_AGO)
        _, must, may = self.expected_for_tree()
        if must or may:
            return  # refused for its links: not this rule's point
        fired: list[bool] = []

        def change(_writer, args, _result) -> None:
            if not fired and bytes(args[0]) == content:
                fired.append(True)
                _change(str(path), how)

        with _after(ParallelGzipWriter, "write", change), pytest.raises(SourceChangedError) as info:
            self.saver.save_sync(self.root)
        names = [p for p in self.entries(files_only=True) if p.samefile(path)]  # its hard links too
        assert fired and any(str(p) in str(info.value) for p in names), info.value
        self.failed(info.value)

    @rule(data=st.data(), how=st.sampled_from(["truncated", "rewritten in place", "appended to"]))
    def change_a_file_while_it_is_saved(self, data, how):
        """After the first bytes of a file saved alone were read: the save fails, naming it."""
        path = self.files / uuid.uuid4().hex
        path.write_bytes(data.draw(st.binary(min_size=1, max_size=300_000), label="content"))
        os.utime(path, LONG_AGO)
        fired: list[bool] = []

        def change(_source, _args, result) -> None:
            if not fired and result:
                fired.append(True)
                _change(str(path), how)

        progress = (lambda done, total: None) if data.draw(st.booleans(), label="progress") else None
        with contextlib.ExitStack() as stack:
            for name in ("read", "readinto", "pread"):
                stack.enter_context(_after(SourceFile, name, change))
            with pytest.raises(SourceChangedError) as info, fc.Checkpoint(self.dest, progress=progress) as cp:
                cp.save_sync(path)
        assert fired and str(path) in str(info.value), info.value
        self.failed(info.value)

    @rule(data=st.data(), variable=st.sampled_from([MAX_MEMBERS_ENV, MAX_UNPACKED_ENV]))
    def save_under_a_load_limit(self, data, variable):
        """A save applies the limits a load in the same environment applies: it refuses
        exactly what that load would refuse, and what it stores loads."""
        seen, must, may = self.expected_for_tree()
        if must or may:
            return
        scratch = self.where()
        fc.Checkpoint(scratch).save_sync(self.root)  # the same tree, stored without a limit
        try:
            with tarfile.open(fileobj=io.BytesIO(store_for(scratch).read_bytes(scratch))) as tf:
                members = tf.getmembers()
            if variable == MAX_MEMBERS_ENV:
                limit = data.draw(st.integers(max(0, len(members) - 2), len(members) + 1), label="members")
            else:
                needed = max((m.offset_data + m.size for m in members), default=0)
                limit = data.draw(st.integers(max(0, needed - 1100), needed + 1), label="bytes")
            with _env(variable, str(limit)):
                try:
                    self.saver.save_sync(self.root)
                except UnsupportedDataError as exc:
                    assert variable in str(exc), exc
                    self.failed(exc)
                    saved = False
                else:
                    self.committed(Stored("tree", b"", tree=seen))
                    saved = True
                loads = self.try_load(scratch)
            event(f"under {variable}: {'saved' if saved else 'refused'}")
            assert saved == (loads is not None), f"{variable}={limit}: saved {saved}, a load gives {loads}"
        finally:
            store_for(scratch).delete(scratch)

    def try_load(self, uri: str) -> View | None:
        """The view of what a load of ``uri`` restores; None when it refuses (over a limit)."""
        from flyte_checkpoint.errors import UnsafeArchiveError

        with fc.Checkpoint(self.where(), uri, retry=ONE_TRY) as cp:
            try:
                path = cp.load_sync()
            except UnsafeArchiveError:
                return None
            assert path is not None
            return view(path)

    # -- damage ----------------------------------------------------------------------------

    @precondition(lambda self: self.stored is not None and len(self.stored.blob) > 0)
    @rule(
        how=st.sampled_from(DAMAGE),
        at=st.integers(0, 2**31),
        length=st.integers(1, 5000),
        bit=st.integers(0, 7),
    )
    def damage_the_object(self, how, at, length, bit):
        assert self.stored is not None
        blob = _damage(self.stored.blob, how, at, length, bit)
        store_for(self.dest).write_bytes(self.dest, blob)
        event(f"damaged: {how}")
        before = self.stored.before if self.stored.kind == "damaged" else self.stored
        if blob == self.stored.blob:
            event("damage that changed no byte")
        self.stored = Stored(
            "damaged",
            blob,
            before=before,
            how=f"{how} at {at % len(self.stored.blob)}/{len(self.stored.blob)}",
        )

    @rule()
    def new_saver(self):
        """A new ``Checkpoint`` for the same destination (a new attempt of the task)."""
        self.saver.close()
        self.saver = fc.Checkpoint(self.dest)

    # -- cancellations, interrupts, forks ----------------------------------------------------

    def storable_tree(self) -> View | None:
        """The tree's view if a save must store it (no link it refuses or may refuse), else None."""
        seen, must, may = self.expected_for_tree()
        return None if must or may else seen

    @rule(
        which=st.sampled_from(["the save held at the point", "a save waiting for its turn"]),
        at=st.sampled_from([1, 1, 2]),  # a small tree's save makes one write
        then=st.one_of(st.none(), CONTENTS),
    )
    def cancel_an_async_save(self, which, at, then):
        """An async save of the tree held at its ``at``-th store write (tests/spystore.py's
        gate), or a save called after it and waiting for its turn, is cancelled: it never
        lands; a save called after the cancel (``then``) is what stays."""
        seen = self.storable_tree()
        if seen is None:
            return
        gate = Gate(writes=at)
        spy_dest: list[str] = []
        outcome: list[str] = []

        async def main() -> None:
            with spying(scheme_of(self.dest), gate.hook) as spy:
                dest = spy.uri_for(self.dest)
                spy_dest.append(dest)
                held = asyncio.create_task(fc.Checkpoint(dest).save(self.root))
                held.add_done_callback(lambda _: gate.reached.set())  # it had no such point
                await asyncio.to_thread(gate.wait_reached)
                if held.done():
                    await held
                    outcome.append("ended before its point")
                    return
                if which == "a save waiting for its turn":
                    queued = asyncio.create_task(fc.Checkpoint(dest).save(then or b"queued"))
                    await asyncio.sleep(0)  # one turn of the loop: the task has called save()
                    assert saveorder.waiting(dest) == 2, "the later save is not in the destination's line"
                    queued.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await queued
                    gate.release.set()
                    await held
                    outcome.append("queued cancelled")
                    return
                held.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await held
                later = None if then is None else asyncio.create_task(fc.Checkpoint(dest).save(then))
                gate.release.set()  # the cancelled save's writer goes on from where it was held
                if later is not None:
                    await later
                outcome.append("held cancelled")

        asyncio.run(main())  # returns once the worker threads have ended
        assert settle(lambda: saveorder.waiting(spy_dest[0]) == 0), "a cancelled save kept its turn"
        self.check_nothing_left()
        event(f"cancelled save: {outcome[0]}")
        if outcome[0] == "held cancelled":
            ending = [] if then is None else ["write_bytes"]
            assert gate.endings == ["abort", *ending], f"how the uploads ended: {gate.endings}"
            if then is None:
                assert self.unchanged(), "a cancelled save changed the object"
                return
            self.committed(self.bytes_model(then))
            return
        if outcome[0] == "queued cancelled":
            assert gate.endings == ["commit"], f"how the uploads ended: {gate.endings}"
        self.committed(Stored("tree", b"", tree=seen))

    @rule(at=st.integers(1, 3), then=st.sampled_from(["close", "load again"]))
    def cancel_an_async_load(self, at, then):
        """A load held at its ``at``-th store read is cancelled; ``close()`` then returns without
        waiting for the held download, and removes the workspace once it stopped; the same
        ``Checkpoint`` loads what the model says after that."""
        gate = Gate(reads=at)
        watchdog = threading.Timer(HANG, gate.release.set)  # only a hang guard: a hang fails below
        closed_before_release: list[bool] = []

        async def main() -> None:
            load = asyncio.create_task(cp.load())
            load.add_done_callback(lambda _: gate.reached.set())  # it had no such point
            await asyncio.to_thread(gate.wait_reached)
            if load.done():
                with contextlib.suppress(CheckpointError):
                    await load
                return
            closed_before_release.append(await cancel_then_close(load, cp, gate, watchdog))

        with spying(scheme_of(self.dest), gate.hook) as spy:
            cp = fc.Checkpoint(self.where(), spy.uri_for(self.dest), retry=ONE_TRY)
            root = cp.path.parent
            try:
                asyncio.run(main())  # returns once the worker threads have ended
            finally:
                watchdog.cancel()
                gate.release.set()  # a gate the load never reached must not hold the next one
            event(f"cancelled load: {'held' if closed_before_release else 'ended before its point'}")
            assert closed_before_release in ([], [True]), "close() waited for the cancelled download"
            if closed_before_release:
                assert not root.exists(), f"the closed workspace {root} (with its staging folder) remains"
            try:
                if then == "load again":
                    self.check_a_load(cp)
            finally:
                root = cp.path.parent
                cp.close()
            assert not root.exists(), f"close() left the workspace {root}"

    @rule(
        data=st.data(),
        what=st.sampled_from(["save the tree", "save bytes", "save a file", "load"]),
        at=st.integers(1, 200),
        more=st.integers(0, 400),
    )
    def interrupt(self, data, what, at, more):
        """A KeyboardInterrupt at a point of a save or a load where one can land
        (tests/reliability/test_interrupts.py's hook): no thread, turn or upload is left; the
        previous checkpoint stays or the new one is there whole; an interrupted ``Checkpoint``
        loads normally after."""
        # A save of bytes or a file, or a load, has some 150 points; a tree's save 500 or more.
        hook = InterruptHook(("count", at + (more if what == "save the tree" else 0)))
        if what == "load":
            cp = fc.Checkpoint(self.where(), self.dest, retry=ONE_TRY)
            try:
                try:
                    delivered = hook.run(cp.load_sync)
                except CheckpointError:
                    delivered = False  # damage: what the load after says is checked
                event(f"interrupted load: {'delivered' if delivered else 'ran to its end'}")
                assert_nothing_left(f"load interrupted at {hook.fired}")
                staging = list(Path(cp._root).glob(".restore-*")) if cp._root else []
                assert staging == [], f"load interrupted at {hook.fired}: a staging folder is left"
                self.check_a_load(cp)
            finally:
                root = cp._root
                cp.close()
            assert root is None or not os.path.exists(root), f"close() left the workspace {root}"
            return
        must: list[str] = []
        if what == "save the tree":
            seen, must, _ = self.expected_for_tree()
            source: object = self.root
            model = Stored("tree", b"", tree=seen)
        else:
            blob = data.draw(CONTENTS, label="content")
            source, model = blob, self.bytes_model(blob)
            if what == "save a file":
                source = self.files / uuid.uuid4().hex
                source.write_bytes(blob)
        refused: CheckpointError | None = None
        with fc.Checkpoint(self.dest) as cp:
            try:
                delivered = hook.run(lambda: cp.save_sync(source))  # type: ignore[arg-type]
            except UnsupportedDataError as exc:
                delivered, refused = False, exc
        where = f"{what} interrupted at {hook.fired}"
        assert_nothing_left(where)
        assert settle(lambda: saveorder.waiting(self.dest) == 0), f"{where}: its turn was never given back"
        assert settle(self.nothing_left), f"{where}: an upload or temporary file was left"
        if refused is not None:
            self.failed(refused)
            return
        if delivered and self.unchanged():
            event(f"interrupted save: the previous checkpoint stays ({what})")
            return
        assert not must, f"{where}: the links {must} cannot be stored, yet the save committed"
        event(f"interrupted save: {'the new checkpoint, whole' if delivered else 'ran to its end'} ({what})")
        self.committed(model)

    @rule(
        data=st.data(),
        child=st.sampled_from(["load", "load with the parent's Checkpoint", "save bytes", "save the tree"]),
        ending=st.sampled_from(["exit", "drop", "close"]),
        mid_save=st.booleans(),
    )
    def fork(self, data, child, ending, mid_save):
        """A child forked (as data-loader workers are) while the parent holds a ``Checkpoint``
        with a workspace (loaded, or not if ``parent_loaded`` is false) and, if ``mid_save``, a
        thread is inside a save of the tree (held in its progress callback): the child loads or
        saves (with the held ``Checkpoint`` too), checks it against its copy of the model and
        ends (interpreter exit, dropping its copy of the parent's ``Checkpoint``, or closing
        it). The parent's workspace is as it was; the parent's held save commits after the
        child's."""
        blob = data.draw(CONTENTS, label="child's bytes")
        seen = self.storable_tree()
        if child == "save the tree" and seen is None:
            child = "save bytes"
        go, inside, held = threading.Event(), threading.Event(), threading.Event()

        def hold(done: int, _total: int | None) -> None:
            if done and not go.is_set():
                held.set()
                inside.set()
                go.wait(HANG)

        busy = fc.Checkpoint(self.dest, progress=hold)
        saving: list[BaseException | None] = []
        saver: threading.Thread | None = None
        if mid_save and seen is not None:

            def save() -> None:
                try:
                    busy.save_sync(self.root)
                    saving.append(None)
                except BaseException as exc:
                    saving.append(exc)
                finally:
                    inside.set()  # it had no bytes to report: it ended

            saver = threading.Thread(target=save, name="held-save")
            saver.start()
            assert inside.wait(HANG), "the held save reported nothing"
            if not held.is_set():  # it read no file data, so never reported any: it ended
                saver.join(HANG)
                assert saving == [None], f"the save: {saving}"
                self.committed(Stored("tree", b"", tree=seen))
                saver = None
        try:
            mine = [fc.Checkpoint(self.where(), self.dest, retry=ONE_TRY)]  # the child drops it
            loaded = None
            if data.draw(st.booleans(), label="parent_loaded"):
                with contextlib.suppress(CheckpointError):
                    loaded = mine[0].load_sync()  # damage: checked after every step
            if loaded != mine[0].path:  # not a restored tree (which a load in the child may return)
                (mine[0].path / f"parent's {uuid.uuid4().hex}").write_bytes(b"the parent's state")
            before = view(mine[0].path)
            report = self.in_a_forked_child(lambda: self.child_steps(child, ending, mine, busy, blob, go))
        finally:
            go.set()
            if saver is not None:
                saver.join(HANG)
        assert report == "ok", f"the child ({child}, then {ending}) failed:\n{report}"
        event(f"forked: {child}, then {ending}{', mid-save' if saver else ''}")
        workspace = mine[0].path
        assert workspace.is_dir(), "the child removed the parent's workspace"
        assert not _differences(before, view(workspace)), "the child changed the parent's workspace"
        mine[0].close()
        assert not workspace.parent.exists(), f"close() left the workspace {workspace.parent}"
        busy.close()
        if saver is not None:  # it commits last, whatever the child did
            assert not saver.is_alive() and saving == [None], f"the held save: {saving}"
            self.committed(Stored("tree", b"", tree=seen))
        elif child.startswith("save") and self.backend != "memory":  # memory: the child's own copy
            tree = Stored("tree", b"", tree=seen)
            self.committed(self.bytes_model(blob) if child == "save bytes" else tree)
        else:
            assert self.unchanged(), "the object changed, though the parent saved nothing"

    def in_a_forked_child(self, steps: Callable[[], None]) -> str:
        """Run ``steps`` in a forked child; ``"ok"``, or what went wrong there."""
        stacks = self.sandbox / "child-stacks"
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: it never returns
            code = 1
            try:
                os.close(read_end)
                with open(stacks, "w") as out:
                    faulthandler.dump_traceback_later(HANG, exit=True, file=out)  # a hang guard
                    steps()
                os.write(write_end, b"ok")
                code = 0
            except BaseException:
                os.write(write_end, traceback.format_exc()[-8000:].encode())
            finally:
                os._exit(code)
        os.close(write_end)
        chunks = []
        with os.fdopen(read_end, "rb") as reader:
            while ready := select.select([reader], [], [], 2 * HANG)[0]:  # until the child's exit
                if not (chunk := reader.read1(65536)):
                    break
                chunks.append(chunk)
        if not ready:  # its own guard did not end it
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        if not ready:
            return f"hung; its stacks:\n{stacks.read_text() if stacks.exists() else '?'}"
        return b"".join(chunks).decode(errors="replace") or f"no report; its stacks:\n{stacks.read_text()}"

    def child_steps(
        self, child: str, ending: str, mine: list[fc.Checkpoint], busy: fc.Checkpoint, blob: bytes, go
    ) -> None:
        """In a forked child: do ``child``, check it against the model, end as ``ending`` says."""
        go.set()  # this process's copy: its own saves are not held
        if child == "load with the parent's Checkpoint":
            self.check_a_load(mine[0])
        elif child == "load":
            self.a_load_gives_what_the_last_committed_save_stored()
        else:
            if child == "save bytes":
                busy.save_sync(blob)
                self.committed(self.bytes_model(blob))
            else:
                seen = self.storable_tree()
                busy.save_sync(self.root)
                self.committed(Stored("tree", b"", tree=seen))
            self.a_load_gives_what_the_last_committed_save_stored()
        if ending == "exit":
            atexit._run_exitfuncs()  # what an interpreter exit runs: the workspaces' finalizers too
        elif ending == "drop":
            gone = weakref.ref(mine[0])
            mine.clear()
            gc.collect()
            assert gone() is None, "the child still holds the parent's Checkpoint"
        else:
            mine[0].close()

    # -- the check after every step --------------------------------------------------------

    @invariant()
    def a_load_gives_what_the_last_committed_save_stored(self):
        TALLY["steps (each followed by a load)"] += 1
        cp = fc.Checkpoint(self.where(), self.dest, retry=ONE_TRY)
        try:
            self.check_a_load(cp, use_async=TALLY["steps (each followed by a load)"] % 2 == 1)
        finally:
            root = cp.path.parent if cp._root else None
            cp.close()
            assert root is None or not root.exists(), f"close() left the workspace {root}"

    def check_a_load(self, cp: fc.Checkpoint, *, use_async: bool = False) -> None:
        """``cp`` (whose source is the destination) loads what the model says, twice."""
        try:
            path = asyncio.run(cp.load()) if use_async else cp.load_sync()
        except CheckpointError as exc:
            self.check_error(exc)
            self.inspect_agrees(exc)
            return
        except Exception as exc:
            raise AssertionError(f"a load raised an error of no type of ours: {exc!r}") from exc
        again = cp.load_sync()
        assert again == path, "a second load() gave another result"
        self.check_loaded(cp, path)
        self.inspect_agrees(None if path is None else "payload" if path.name == "payload" else "tarball")

    def inspect_agrees(self, loaded: str | CheckpointError | None) -> None:
        """``inspect`` (the command line's, which does not extract) tells what the load did:
        empty, a payload, a tarball with no member a load refuses, or damage."""
        from flyte_checkpoint.errors import CorruptCheckpointError, NotFoundError
        from flyte_checkpoint.format.inspection import inspect_uri

        try:
            seen = inspect_uri(self.dest)
        except NotFoundError:
            assert loaded is None, f"inspect found no object; the load gave {loaded!r}"
            return
        except CorruptCheckpointError as exc:
            assert isinstance(loaded, CorruptCheckpointError), f"inspect: {exc}; the load gave {loaded!r}"
            return
        if isinstance(loaded, CorruptCheckpointError):
            raise AssertionError(f"the load found damage ({loaded}); inspect saw a whole {seen.kind}")
        if isinstance(loaded, CheckpointError):
            return  # a refusal of the load's own (a limit, a link), which inspect may not see
        assert seen.kind == (loaded or "empty"), f"inspect says {seen.kind}; the load gave {loaded}"
        assert seen.refused == [], f"inspect says a load refuses {seen.refused}; it restored them"

    def check_error(self, exc: CheckpointError) -> None:
        s = self.stored
        event(f"load raised {type(exc).__name__} ({s.kind if s else 'nothing'})")
        assert s is not None and s.kind in ("damaged", "tarlike"), (
            f"a load of a whole {s and s.kind} raised {exc!r}"
        )
        if s.kind == "damaged":
            assert _may_be_tarball(s.blob), (
                f"bytes that are no tarball (damaged {s.before.kind}) raised {exc!r}"
            )

    def check_loaded(self, cp: fc.Checkpoint, path: Path | None) -> None:
        s = self.stored
        if path is None:
            assert s is None or len(s.blob) == 0, f"a {s.kind} checkpoint loaded as none"
            return
        assert s is not None, f"nothing was saved, yet a load gave {path}"
        is_payload = path == cp.path / "payload" and path.is_file() and not path.is_symlink()
        if not is_payload:
            assert path == cp.path, path
        kind = s.kind
        if kind == "payload":
            assert is_payload, f"a payload loaded as a tree: {sorted(view(path).entries)[:5]}"
            assert _file_hash(str(path)) == s.payload_hash, "the payload came back changed"
        elif kind in ("tree", "tarball"):
            assert not is_payload, f"a {kind} loaded as a payload"
            self.check_tree(path, s.tree)
        elif kind == "tarlike":
            self.check_tarlike(path, is_payload, s.blob)
        else:  # damaged: what the bytes are, or what they were
            before = s.before
            assert before is not None
            if is_payload:
                assert _file_hash(str(path)) == _sha(s.blob), "a damaged object loaded as other bytes"
                event(f"damaged {before.kind}: loads as the payload it now is")
            elif before.kind in ("tree", "tarball"):
                assert before.tree is not None
                if not _differences(before.tree, view(path)):
                    event(f"damaged {before.kind}: the same tree (damage where no reader looks)")
                else:  # only an uncompressed tar, which has no checksum, can read as another tree
                    assert s.blob[:2] != GZIP_MAGIC, f"a damaged {before.kind} loaded as another tree"
                    self.check_as_tarfile_reads(path, s.blob, exact=True)
                    event(f"damaged plain {before.kind}: the smaller tarball it now is ({s.how})")
            else:
                self.check_tarlike(path, False, s.blob)
            if not _may_be_tarball(s.blob):
                assert is_payload, "bytes that are no tarball loaded as a tree"

    def check_tree(self, path: Path, expected: View | None) -> None:
        assert expected is not None
        problems = _differences(expected, view(path))
        assert not problems, "; ".join(problems)
        for key, where in expected.lands.items():
            assert os.path.islink(path / key), f"{key} (landing on {where}) is no longer a link"

    def check_tarlike(self, path: Path, is_payload: bool, blob: bytes) -> None:
        """Bytes ``tarfile`` takes for a tarball: whole as a payload, or as a tree holding each
        file tarfile reads in them."""
        if is_payload:
            assert _file_hash(str(path)) == _sha(blob), "tar-like bytes came back changed"
            event("tar-like bytes: a payload")
            return
        event("tar-like bytes: a tree")
        self.check_as_tarfile_reads(path, blob, exact=False)

    @staticmethod
    def check_as_tarfile_reads(path: Path, blob: bytes, *, exact: bool) -> None:
        """The tree at ``path`` holds each file Python's tarfile reads in ``blob``, with its
        bytes (and, if ``exact``, no other file)."""
        try:
            with tarfile.open(fileobj=io.BytesIO(blob)) as tf:
                files = {
                    os.path.normpath(m.name): _sha(tf.extractfile(m).read())  # type: ignore[union-attr]
                    for m in tf.getmembers()
                    if m.isreg() or m.islnk()
                }
        except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
            raise AssertionError(f"a tree from bytes tarfile cannot read whole: {exc!r}") from None
        got = {k: v[1] for k, v in view(path).entries.items() if v[0] == "file"}
        wrong = {k: (v, got.get(k)) for k, v in files.items() if got.get(k) != v}
        assert not wrong, f"files that differ from tarfile's reading (tarfile, ours): {wrong}"
        if exact:
            assert set(got) == set(files), f"files tarfile does not read: {sorted(set(got) - set(files))}"

    def teardown(self) -> None:
        self.saver.close()
        try:
            self.check_nothing_left()
        finally:
            store_for(self.dest).delete(self.dest)
            shutil.rmtree(self.sandbox, ignore_errors=True)


def _save(cp: fc.Checkpoint, data: object, use_async: bool) -> None:
    if use_async:
        asyncio.run(cp.save(data))  # type: ignore[arg-type]
    else:
        cp.save_sync(data)  # type: ignore[arg-type]


@contextlib.contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            del os.environ[name]
        else:
            os.environ[name] = saved


def _join_new_threads(known: set[threading.Thread]) -> list[threading.Thread]:
    """Close the registry's stores, join every thread started since ``known`` (a hang guard of
    60 s each), and return those still alive."""
    get_registry().close()
    for t in threading.enumerate():
        if t not in known and t is not threading.current_thread():
            t.join(timeout=60)
    return [t for t in threading.enumerate() if t not in known and t.is_alive()]


@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_the_checkpoint_contract_holds_through_any_sequence_of_steps(
    name,
    backend_pool,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    """See the module docstring. Runs ``FCP_STATE_EXAMPLES`` sequences of up to
    ``FCP_STATE_STEPS`` steps on ``name``'s backend."""
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))  # workspaces: only ours in it
    for var in (MAX_MEMBERS_ENV, MAX_UNPACKED_ENV, "FLYTE_CHECKPOINT_DISK_RESERVE"):
        monkeypatch.delenv(var, raising=False)
    base = tmp_path / "trees"
    base.mkdir()
    with contextlib.ExitStack() as stack:
        pool_backend = None
        if name == "memory":

            def where() -> str:
                return f"memory://fcp-state/{uuid.uuid4().hex}/ckpt"
        else:
            pool_backend = backend_pool.get(name)
            stack.enter_context(pool_backend.activated())
            where = pool_backend.fresh
        known = set(threading.enumerate())
        machine = type(
            f"Contract_{name}",
            (Contract,),
            {"where": staticmethod(where), "base": base, "backend": name, "pool_backend": pool_backend},
        )

        class Checked(machine):  # type: ignore[misc, valid-type]
            def __init__(self) -> None:
                super().__init__()
                self.workspaces_before = set(private_tmp.glob(WORKSPACES))  # a failed example's

            def teardown(self) -> None:
                super().teardown()
                left = _join_new_threads(known)
                assert left == [], f"threads left running: {left}"
                ws = sorted(p.name for p in set(private_tmp.glob(WORKSPACES)) - self.workspaces_before)
                assert ws == [], f"workspaces left: {ws}"

        TALLY.clear()
        run_state_machine_as_test(
            Checked,
            settings=settings(
                max_examples=EXAMPLES,
                stateful_step_count=STEPS,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                derandomize=LONG_RUN is None,  # CI: the same sequences every run; longer runs: new ones
            ),
        )
    print(f"\nstate machine on {name}: " + ", ".join(f"{k} {v}" for k, v in sorted(TALLY.items())))
