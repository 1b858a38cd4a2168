"""Property: whatever bytes are saved, a load gives exactly them back, unless they are a tarball.

Strategies lean towards what confuses a reader: zero blocks, valid tar headers, gzip's magic
bytes, complete gzip members of random data and of tar data, cut ones, bytes between and
after members, flipped bytes. The oracle of "is a tarball" is Python's ``tarfile`` (the
reader Flyte uses), independent of ours: bytes it does not take for a tarball must come
back whole as the payload; bytes it does may restore as a tree or raise a typed error.
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import os
import tarfile
import tempfile
import uuid
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flyte_checkpoint as fc
from flyte_checkpoint.errors import CorruptCheckpointError, UnsafeArchiveError

BLOCK = 512


def _tar(names: list[str], data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


NAMES = st.lists(st.sampled_from(["a", "b/c", "é", "d/e/f", "x" * 120]), min_size=1, max_size=3, unique=True)
TARS = st.builds(_tar, NAMES, st.binary(max_size=700))
TAIL = st.one_of(st.just(b""), st.binary(max_size=64), st.just(b"\n"), st.integers(1, 600).map(bytes))


def _gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def _cut(blob_and_fraction: tuple[bytes, float]) -> bytes:
    blob, fraction = blob_and_fraction
    return blob[: max(1, int(len(blob) * fraction))]


def _flip(blob_index_bit: tuple[bytes, int, int]) -> bytes:
    blob, index, bit = blob_index_bit
    b = bytearray(blob)
    b[index % len(b)] ^= 1 << bit
    return bytes(b)


BASE = st.one_of(
    st.binary(min_size=1, max_size=2000),
    st.builds(lambda n, b: bytes(BLOCK * n) + b, st.integers(1, 3), st.binary(max_size=600)),
    st.builds(lambda t, b: t[:BLOCK] + b, TARS, st.binary(max_size=600)),
    TARS,
    st.builds(lambda b: b"\x1f\x8b" + b, st.binary(max_size=600)),
    st.builds(lambda b: b"\x1f\x8b\x08\x00" + bytes(6) + b, st.binary(max_size=600)),
    st.builds(lambda b, t: _gz(b) + t, st.binary(max_size=2000), TAIL),
    st.builds(lambda t, tail: _gz(t) + tail, TARS, TAIL),
    st.builds(
        lambda a, b, mid: _gz(a) + mid + _gz(b), st.binary(max_size=800), st.binary(max_size=800), TAIL
    ),
    st.builds(lambda t, n, mid: _gz(t[:n]) + mid + _gz(t[n:]), TARS, st.integers(0, 2000), TAIL),
    st.builds(lambda n, tail: _gz(bytes(BLOCK * n)) + tail, st.integers(1, 24), TAIL),
)
OBJECTS = st.one_of(
    BASE,
    st.tuples(BASE, st.floats(0.0, 1.0)).map(_cut),
    st.tuples(BASE, st.integers(0, 10**6), st.integers(0, 7)).map(_flip),
)


def _decoded(blob: bytes, n: int) -> list[bytes]:
    """Up to ``n`` bytes of ``blob``'s data as readers see them: the bytes themselves, or what
    Python's gzip and ISA-L's igzip decode (their inflaters differ on some damaged streams:
    zlib refuses a few Huffman tables that ISA-L decodes correctly)."""
    if blob[:2] != b"\x1f\x8b":
        return [blob[:n]]
    readers = [gzip.GzipFile]
    if importlib.util.find_spec("isal") is not None:
        from isal import igzip

        readers.append(igzip.IGzipFile)
    out = []
    for reader in readers:
        try:
            with reader(fileobj=io.BytesIO(blob)) as g:
                out.append(g.read(n))
        except Exception:  # whatever it makes of it, it does not begin a tarball
            pass
    return out


def _may_be_tarball(blob: bytes) -> bool:
    """The oracle: ``tarfile`` reads a first header, or the bytes are a gzip'd empty archive."""
    for first in _decoded(blob, BLOCK):
        try:
            tarfile.TarInfo.frombuf(first, "utf-8", "surrogateescape")
            return True
        except Exception:  # every refusal of tarfile's means "not a tarball"
            pass
    if blob[:2] == b"\x1f\x8b":
        for inner in _decoded(blob, 2**20 + 1):
            if len(inner) >= 2 * BLOCK and len(inner) % BLOCK == 0 and not inner.strip(b"\0"):
                return True
    return False


def _check(dest: str, blob: bytes, workspace_root: str) -> None:
    fc.Checkpoint(dest).save_sync(blob)
    tempfile.tempdir, saved = workspace_root, tempfile.tempdir
    try:
        with fc.Checkpoint(dest + "-next", dest) as cp:
            try:
                path = cp.load_sync()
            except (CorruptCheckpointError, UnsafeArchiveError) as exc:
                assert _may_be_tarball(blob), f"a payload was refused: {exc}"
                return
            assert path is not None
            if path.name == "payload" and path.parent == cp.path and path.is_file():
                assert path.read_bytes() == blob
                return
            assert path == cp.path
            assert _may_be_tarball(blob), "bytes that are no tarball loaded as a tree"
    finally:
        tempfile.tempdir = saved


#: CI's budget; ``FCP_LOAD_PROPERTY_EXAMPLES=20000`` runs it longer.
EXAMPLES = int(os.environ.get("FCP_LOAD_PROPERTY_EXAMPLES", "300"))
PROPERTY = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(OBJECTS)
def test_any_bytes_come_back_whole_unless_they_are_a_tarball_file_backend(blob):
    with tempfile.TemporaryDirectory() as tmp:
        _check(str(Path(tmp, "obj")), blob, tmp)


@PROPERTY
@given(OBJECTS)
def test_any_bytes_come_back_whole_unless_they_are_a_tarball_memory_backend(blob):
    with tempfile.TemporaryDirectory() as tmp:
        _check(f"memory://props/{uuid.uuid4().hex}", blob, tmp)
