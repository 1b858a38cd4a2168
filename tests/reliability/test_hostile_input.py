"""A corpus of hostile and damaged checkpoint objects, each a named case, loaded for real.

Each case is an object (bytes) put where ``Checkpoint.load_sync`` reads it, on the local
file backend, with the workspace inside the test's sandbox. For every case:

- nothing is written outside the checkpoint's own temporary root (the whole sandbox is
  listed before and after, and the escape targets the case aims at are checked);
- it finishes (pytest-timeout is the hang guard; no test here measures time);
- the only errors are the project's own (``CheckpointError`` subclasses), and the one
  expected for the case; a failed load leaves the workspace empty;
- a case that may legitimately restore restores inside the workspace (every link resolving
  inside it) with the content the archive holds.

``tests/test_archive_safety.py`` and ``tests/test_fuzz_archive.py`` test the basic refusals
and hypothesis-generated archives; this corpus adds the harder shapes (PAX and GNU
metadata that lies, chained links, bombs, name collisions, damaged gzip framing).
"""

from __future__ import annotations

import gzip
import io
import os
import struct
import tarfile
import tempfile
import unicodedata
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import CheckpointError, CorruptCheckpointError, StoreError, UnsafeArchiveError

TIMEOUT = 300  # a hang guard only: a case takes well under a second
MARK = "fcp-escaped"  # every escape in the corpus aims at a path with this in its name

Members = list[tuple[tarfile.TarInfo, bytes | None]]


# --------------------------------------------------------------------------- builders


def _info(name: str, kind: bytes = tarfile.REGTYPE, *, size: int = 0, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = size
    info.linkname = link
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    info.mtime = 1_700_000_000
    return info


def f(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    return _info(name, size=len(data)), data


def d(name: str) -> tuple[tarfile.TarInfo, None]:
    return _info(name, tarfile.DIRTYPE), None


def sym(name: str, target: str) -> tuple[tarfile.TarInfo, None]:
    return _info(name, tarfile.SYMTYPE, link=target), None


def hard(name: str, target: str) -> tuple[tarfile.TarInfo, None]:
    return _info(name, tarfile.LNKTYPE, link=target), None


def special(name: str, kind: bytes) -> tuple[tarfile.TarInfo, None]:
    return _info(name, kind), None


def tar(members: Members, *, fmt: int = tarfile.PAX_FORMAT, gz: bool = True, eof: bool = True) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    raw = buf.getvalue()
    if not eof:
        raw = _strip_end(raw)
    return gzip.compress(raw, mtime=0) if gz else raw


def _strip_end(raw: bytes) -> bytes:
    """The tar stream without its end-of-archive zero blocks (and the record padding)."""
    while raw.endswith(bytes(512)):
        raw = raw[:-512]
    return raw


def header(name: str, typeflag: bytes, size: int, *, linkname: str = "") -> bytes:
    """One ustar header block with any typeflag and size field, with a valid checksum."""
    info = _info(name, tarfile.REGTYPE, size=0, link=linkname)
    block = bytearray(info.tobuf(format=tarfile.USTAR_FORMAT))[:512]
    block[156:157] = typeflag
    block[124:136] = b"%011o\0" % size if size < 8**11 else b"\x80" + size.to_bytes(11, "big")
    return _fix_checksum(block)


def _fix_checksum(block: bytearray) -> bytes:
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def pax_record(key: str, value: str) -> bytes:
    """One PAX record, ``"<len> key=value\n"``, its length counting itself."""
    body = f" {key}={value}\n".encode()
    n = len(body) + 1
    while len(str(n)) + len(body) != n:
        n = len(str(n)) + len(body)
    return str(n).encode() + body


def _with(block: bytes, offset: int, data: bytes, *, checksum: bool = True) -> bytes:
    b = bytearray(block)
    b[offset : offset + len(data)] = data
    return _fix_checksum(b) if checksum else bytes(b)


def pax_member(records: dict[str, str], then: bytes) -> bytes:
    """A PAX extended header saying ``records``, followed by the raw member ``then``."""
    data = b"".join(pax_record(k, v) for k, v in records.items())
    pad = (-len(data)) % 512
    return header("PaxHeaders/x", b"x", len(data)) + data + bytes(pad) + then


def member(name: str, data: bytes, typeflag: bytes = b"0", *, size: int | None = None) -> bytes:
    """A raw member: header (size field ``size``, default the data's length) + padded data."""
    return header(name, typeflag, len(data) if size is None else size) + data + bytes((-len(data)) % 512)


END = bytes(1024)


def gz(raw: bytes) -> bytes:
    return gzip.compress(raw, mtime=0)


def bomb(unpacked: int) -> bytes:
    """A gzip'd tar of one file of ``unpacked`` zero bytes (a few hundred KiB compressed)."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [comp.compress(header("zeros.bin", b"0", unpacked))]
    chunk = bytes(1 << 20)
    left = unpacked
    while left:
        n = min(left, len(chunk))
        out.append(comp.compress(chunk[:n]))
        left -= n
    out.append(comp.compress(bytes((-unpacked) % 512) + END))
    out.append(comp.flush())
    return b"".join(out)


def bad_crc(blob: bytes) -> bytes:
    b = bytearray(blob)
    b[-8] ^= 0xFF  # the gzip trailer's CRC32
    return bytes(b)


# --------------------------------------------------------------------------- the corpus


@dataclass(frozen=True)
class Case:
    """``build(sandbox)`` gives the object; ``expect``: "refused", "corrupt", "store" (a file
    system refusal as StoreError), "error" (any project error), "restores" or "payload" (the
    object comes back whole as ``payload``); ``check`` looks at a restored workspace."""

    build: Callable[[Path], bytes]
    expect: str
    match: str = ""
    check: Callable[[Path], None] | None = None
    env: tuple[tuple[str, str], ...] = ()


def _nfc_nfd(ws: Path) -> None:
    names = sorted(p.name for p in ws.iterdir())
    assert len(names) == 2 and {unicodedata.normalize("NFC", n) for n in names} == {"\u00e9.txt"}


def _case_pair(ws: Path) -> None:
    assert (ws / "Model.bin").read_bytes() == b"upper" and (ws / "model.bin").read_bytes() == b"lower"


def _last_wins(ws: Path) -> None:
    assert (ws / "f").read_bytes() == b"second" and not (ws / "f").is_symlink()


def _loop_kept_inside(ws: Path) -> None:
    assert os.readlink(ws / "a") == "b" and os.readlink(ws / "b") == "a"


CORPUS: dict[str, Case] = {
    # names that climb out or are absolute
    "traversal-dotdot": Case(lambda s: tar([f(f"../../{MARK}")]), "refused", "climbs out"),
    "traversal-nested": Case(lambda s: tar([f(f"a/b/../../../{MARK}")]), "refused", "climbs out"),
    "traversal-dot-segments": Case(lambda s: tar([f(f"./././../{MARK}")]), "refused", "climbs out"),
    "absolute-name": Case(lambda s: tar([f(f"{s}/{MARK}-abs")]), "refused", "absolute name"),
    "pax-path-with-nul": Case(
        lambda s: gz(pax_member({"path": "a\0b"}, member("innocent", b"x")) + END), "refused", "NUL"
    ),
    "empty-name": Case(lambda s: gz(member("", b"x") + END), "refused", "names the destination"),
    # links
    "symlink-absolute": Case(lambda s: tar([sym("etc", f"{s}/{MARK}-dir")]), "refused", "absolute path"),
    "symlink-relative-escape": Case(
        lambda s: tar([sym("up", f"../../../{MARK}")]), "refused", "resolves outside"
    ),
    "write-through-symlink": Case(
        lambda s: tar([sym("d", "../.."), f(f"d/{MARK}")]), "refused", "under the symbolic link"
    ),
    "hardlink-absolute": Case(lambda s: tar([hard("h", f"{s}/{MARK}")]), "refused", "absolute name"),
    "hardlink-dotdot": Case(lambda s: tar([hard("h", f"../{MARK}")]), "refused", "climbs out"),
    "hardlink-to-escaping-symlink": Case(
        lambda s: tar([sym("s", f"../../{MARK}"), hard("h", "s")]), "refused", "resolves outside"
    ),
    "links-chained-three-deep": Case(
        lambda s: tar([sym("a", "b"), sym("b", "c"), sym("c", "../..")]), "refused", "resolves outside"
    ),
    "links-chained-through-dir-link": Case(
        lambda s: tar([d("x"), sym("x/here", "."), sym("x/up", "here/.."), sym("esc", "x/up/x/up/..")]),
        "refused",
        "resolves outside",
    ),
    "symlink-loop": Case(lambda s: tar([sym("a", "b"), sym("b", "a")]), "restores", check=_loop_kept_inside),
    "symlink-then-file-same-name": Case(
        lambda s: tar([sym("f", f"../../{MARK}"), f("f", b"second")]), "restores", check=_last_wins
    ),
    "file-then-child-of-file": Case(lambda s: tar([f("a"), f("a/b")]), "refused", "under the file"),
    "dir-then-file-same-name": Case(lambda s: tar([d("d"), f("d")]), "refused", "replace a folder"),
    # special members
    "char-device": Case(lambda s: tar([special("tty", tarfile.CHRTYPE)]), "refused", "device file"),
    "block-device": Case(lambda s: tar([special("sda", tarfile.BLKTYPE)]), "refused", "device file"),
    "fifo": Case(lambda s: tar([special("pipe", tarfile.FIFOTYPE)]), "refused", "FIFO"),
    "gnu-sparse-member": Case(lambda s: gz(member("sparse", b"abc", b"S") + END), "refused", "tar type"),
    "unknown-member-type": Case(lambda s: gz(member("odd", b"abc", b"Z") + END), "refused", "tar type"),
    "contiguous-file-type": Case(
        lambda s: gz(member("c", b"contiguous", b"7") + END),
        "restores",
        check=lambda ws: (ws / "c").read_bytes() == b"contiguous" or pytest.fail("content"),
    ),
    # sizes that lie
    "member-bigger-than-header": Case(
        lambda s: gz(member("a", b"A" * 1500, size=100)[:512] + b"A" * 1536 + member("b", b"b") + END),
        "corrupt",
        "damaged",
    ),
    "member-smaller-than-header": Case(
        lambda s: gz(member("a", b"A" * 100, size=10_000)), "corrupt", "ends early"
    ),
    "size-field-garbage": Case(
        lambda s: gz(member("ok", b"x") + _with(header("a", b"0", 1), 124, b"zzzzzzzzzzz\0") + END),
        "corrupt",
        "damaged",
    ),
    "bad-header-checksum": Case(
        lambda s: gz(
            member("ok", b"x") + _with(header("a", b"0", 0), 148, b"0000000\0", checksum=False) + END
        ),
        "corrupt",
        "damaged",
    ),
    # what does not begin with a valid tar header is a payload, returned as it is (issue 14)
    "first-header-size-garbage": Case(
        lambda s: gz(_with(header("a", b"0", 1), 124, b"zzzzzzzzzzz\0") + END), "payload"
    ),
    "first-header-bad-checksum": Case(
        lambda s: gz(_with(header("a", b"0", 0), 148, b"0000000\0", checksum=False) + END), "payload"
    ),
    "zero-block-then-data-plain": Case(lambda s: bytes(512) + b"w", "payload"),
    "gzip-magic-then-noise": Case(lambda s: b"\x1f\x8b" + bytes(range(256)) * 4, "payload"),
    "gzip-bomb-over-limit": Case(
        lambda s: bomb(256 * 1024 * 1024),
        "refused",
        "beyond the limit of 1048576 bytes",
        env=(("FLYTE_CHECKPOINT_MAX_UNPACKED_BYTES", str(1024 * 1024)),),
    ),
    "many-members-over-limit": Case(
        lambda s: tar([f(f"m{i}", b"z" * 4096) for i in range(400)]),
        "refused",
        "beyond the limit",
        env=(("FLYTE_CHECKPOINT_MAX_UNPACKED_BYTES", "1000000"),),
    ),
    # PAX and GNU metadata
    "pax-path-traversal": Case(
        lambda s: gz(pax_member({"path": f"../../{MARK}"}, member("innocent", b"x")) + END),
        "refused",
        "climbs out",
    ),
    "pax-path-absolute": Case(
        lambda s: gz(pax_member({"path": f"{s}/{MARK}-pax"}, member("innocent", b"x")) + END),
        "refused",
        "absolute name",
    ),
    "pax-linkpath-escape": Case(
        lambda s: gz(pax_member({"linkpath": "../../.."}, header("l", b"2", 0, linkname="ok")) + END),
        "refused",
        "resolves outside",
    ),
    "pax-huge-size": Case(
        lambda s: gz(pax_member({"size": str(10**15)}, member("big", b"tiny")) + END), "corrupt", "ends early"
    ),
    "pax-size-not-a-number": Case(
        lambda s: gz(pax_member({"size": "lots"}, member("big", b"tiny")) + END), "corrupt", "PAX size"
    ),
    "pax-size-negative": Case(
        lambda s: gz(pax_member({"size": "-4096"}, member("big", b"tiny")) + END), "corrupt", "PAX size"
    ),
    "pax-header-over-1mib": Case(
        lambda s: gz(header("PaxHeaders/x", b"x", 2 * 1024 * 1024) + bytes(2 * 1024 * 1024) + END),
        "refused",
        "metadata member",
    ),
    "pax-record-malformed": Case(
        lambda s: gz(
            header("PaxHeaders/x", b"x", 12) + b"99 path=x\n\0\0" + bytes(500) + member("a", b"") + END
        ),
        "error",
    ),
    "gnu-longname-traversal": Case(
        lambda s: tar([f("../" * 40 + MARK)], fmt=tarfile.GNU_FORMAT), "refused", "climbs out"
    ),
    "gnu-longlink-absolute": Case(
        lambda s: tar([sym("l", f"{s}/" + "x" * 120 + MARK)], fmt=tarfile.GNU_FORMAT),
        "refused",
        "absolute path",
    ),
    # names that collide
    "case-collision": Case(
        lambda s: tar([f("Model.bin", b"upper"), f("model.bin", b"lower")]), "restores", check=_case_pair
    ),
    "unicode-nfc-vs-nfd": Case(
        lambda s: tar(
            [
                f(unicodedata.normalize("NFC", "\u00e9.txt"), b"nfc"),
                f(unicodedata.normalize("NFD", "\u00e9.txt"), b"nfd"),
            ]
        ),
        "restores",
        check=_nfc_nfd,
    ),
    "duplicate-name-last-wins": Case(
        lambda s: tar([f("f", b"first"), f("f", b"second")]), "restores", check=_last_wins
    ),
    "name-component-too-long": Case(lambda s: tar([f("n" * 300)]), "store"),
    # damaged gzip framing and tar ends
    "truncated-gzip": Case(lambda s: tar([f("a", os.urandom(50_000))])[:-20_000], "corrupt"),
    "gzip-trailer-cut": Case(lambda s: tar([f("a", b"abc" * 1000)])[:-4], "corrupt"),
    "bad-gzip-crc": Case(lambda s: bad_crc(tar([f("a", b"data" * 1000)])), "corrupt"),
    "trailing-garbage-after-gzip": Case(
        lambda s: tar([f("a", b"data")]) + b"GARBAGE-NOT-GZIP" * 8, "corrupt"
    ),
    "tar-without-end-marker-gz": Case(
        lambda s: tar([f("a", b"A" * 600)], eof=False), "corrupt", "ends early"
    ),
    "tar-without-end-marker-plain": Case(
        lambda s: tar([f("a", b"A" * 600), f("b", b"B")], gz=False, eof=False), "corrupt", "ends early"
    ),
}


# --------------------------------------------------------------------------- the run


def _listing(root: Path, skip: Path | None) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` (not following links), except under ``skip``, with size and mode."""
    out: dict[str, tuple[int, int]] = {}
    for dirpath, dirs, files in os.walk(root):
        here = Path(dirpath)
        if skip is not None and (here == skip or skip in here.parents):
            dirs[:] = []
            continue
        for name in dirs + files:
            if here / name == skip:
                continue
            st = os.lstat(here / name)
            out[str((here / name).relative_to(root))] = (st.st_size, st.st_mode)
    return out


def _assert_inside(ws: Path) -> None:
    real_ws = os.path.realpath(ws)
    for dirpath, dirs, files in os.walk(ws):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            real = os.path.realpath(p)
            assert real == real_ws or real.startswith(real_ws + os.sep), (p, real)


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_hostile_object(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Loading the case's object writes nothing outside the workspace, ends in time, and raises
    only the expected project error (or restores correctly, inside the workspace)."""
    case = CORPUS[name]
    for k, v in case.env:
        monkeypatch.setenv(k, v)
    sandbox = tmp_path / "sandbox"
    (sandbox / "tmp").mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(sandbox / "tmp"))  # workspaces land in the sandbox
    blob = case.build(sandbox)
    obj = sandbox / "object"
    obj.write_bytes(blob)
    before = _listing(tmp_path, None)
    cp = fc.Checkpoint(str(sandbox / "dest"), str(obj))
    error: BaseException | None = None
    try:
        result = cp.load_sync()
    except BaseException as exc:
        error = exc
    ws = cp.path
    cp_root = ws.parent
    assert cp_root.parent == sandbox / "tmp"
    # nothing outside the checkpoint's own root changed, and no escape target exists
    assert _listing(tmp_path, cp_root) == before
    assert not [p for p in Path(tmp_path).rglob(f"*{MARK}*") if cp_root not in p.parents]
    assert not list(Path("/tmp").glob(f"{MARK}*"))
    if case.expect == "payload":
        assert error is None, f"{name}: {error!r}"
        assert result == ws / "payload" and result.read_bytes() == blob
    elif case.expect == "restores":
        assert error is None, f"{name}: {error!r}"
        assert result == ws
        _assert_inside(ws)
        if case.check is not None:
            case.check(ws)
    else:
        assert error is not None, f"{name}: restored instead of raising"
        assert isinstance(error, CheckpointError), f"{name}: not a project error: {error!r}"
        want = {
            "refused": UnsafeArchiveError,
            "corrupt": CorruptCheckpointError,
            "store": StoreError,
            "error": CheckpointError,
        }[case.expect]
        assert isinstance(error, want), f"{name}: {error!r}"
        if case.match:
            assert case.match in str(error), f"{name}: {error}"
        assert list(ws.iterdir()) == [], f"{name}: a failed load left files in the workspace"
        left = sorted(p.name for p in cp_root.iterdir())
        assert left == [".fcp-lock", "workspace"], "a staging folder was left"
    cp.close()
    assert not cp_root.exists(), "close() left the checkpoint's temporary root"


def test_corpus_covers_the_issue():
    """The corpus names every shape issue 7 lists (a guard against cases being dropped)."""
    required = {
        "traversal-dotdot", "absolute-name", "symlink-relative-escape", "hardlink-dotdot",
        "links-chained-three-deep", "char-device", "fifo", "member-bigger-than-header",
        "gzip-bomb-over-limit", "case-collision", "unicode-nfc-vs-nfd", "pax-path-traversal",
        "pax-huge-size", "gnu-longname-traversal", "gnu-sparse-member", "unknown-member-type",
        "truncated-gzip", "bad-gzip-crc", "trailing-garbage-after-gzip", "tar-without-end-marker-gz",
    }  # fmt: skip
    assert required <= set(CORPUS)
    assert len(CORPUS) == 54  # as RELIABILITY.md states: update both together


def test_bomb_is_refused_at_its_first_member_after_little_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The limit stops the bomb at its first member's header: of the 256 MiB it claims, at most
    8 MiB are ever decompressed (what the read-ahead holds), and nothing is written. A bound on
    work, not on time."""
    from flyte_checkpoint.format import restore as restore_module

    inflated = []
    real = restore_module.decompressor

    class Counting:
        def __init__(self, raw):
            self._inner = real(raw)

        def read(self, n=-1):
            data = self._inner.read(n)
            inflated.append(len(data))
            return data

        def readable(self):
            return True

        def close(self):
            self._inner.close()

    monkeypatch.setattr(restore_module, "decompressor", Counting)
    monkeypatch.setenv("FLYTE_CHECKPOINT_MAX_UNPACKED_BYTES", str(1024 * 1024))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    obj = tmp_path / "bomb"
    obj.write_bytes(bomb(256 * 1024 * 1024))
    with fc.Checkpoint(str(tmp_path / "dest"), str(obj)) as cp:
        with pytest.raises(
            UnsafeArchiveError, match=r"beyond the limit of 1048576 bytes \(at member 'zeros\.bin'\)"
        ):
            cp.load_sync()
        assert list(cp.path.iterdir()) == []
    assert 0 < sum(inflated) <= 8 * 1024 * 1024, sum(inflated)


def test_bomb_is_small_on_the_wire():
    """The bomb really is one: a few hundred KiB that claim 256 MiB (so the limit, not the
    object's size, is what stops it)."""
    blob = bomb(256 * 1024 * 1024)
    assert len(blob) < 1024 * 1024
    assert struct.unpack("<I", blob[-4:])[0] == (512 + 256 * 1024 * 1024 + 1024) % 2**32
