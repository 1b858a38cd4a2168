"""Logging (info per transfer, debug per retry and store call), progress callbacks and
the progress bar, and inspection of tarballs from a stream: in-process, on real stores."""

from __future__ import annotations

import gzip
import io
import logging
import os
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import CorruptCheckpointError, TransientError
from flyte_checkpoint.format.inspection import inspect_stream, inspect_uri, iter_members
from flyte_checkpoint.progress import ProgressBar, format_bytes, format_duration, format_line, progress_bar
from flyte_checkpoint.retry import RetryPolicy
from flyte_checkpoint.storage.blobstore import BlobStore, BlobWriter
from flyte_checkpoint.storage.registry import get_registry, register_store, store_for, unregister_store
from flyte_checkpoint.storage.storelog import LoggedStore
from flyte_checkpoint.storage.stores.local import LocalStore
from flyte_checkpoint.uri import redact
from tests.helpers import file_member, tar_bytes

SECRET = "hunter2-S3CRET"


def messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.levelno == level and r.name.startswith("flyte_checkpoint")
    ]


# --------------------------------------------------------------------------- info lines


def test_one_info_line_per_save_and_load_with_size_time_and_rate(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="flyte_checkpoint")
    dest = str(tmp_path / "ckpt")
    with fc.Checkpoint(dest) as cp:
        cp.save_sync(b"x" * 1000)
    with fc.Checkpoint(str(tmp_path / "next"), dest) as cp:
        cp.load_sync()
        cp.load_sync()  # cached: no second transfer, no second line
    lines = messages(caplog, logging.INFO)
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"saved checkpoint {dest}: 1000 bytes in ")
    assert lines[1].startswith(f"loaded checkpoint {dest}: 1000 bytes in ")
    assert all(line.endswith("MB/s)") for line in lines)
    assert messages(caplog, logging.DEBUG) == []  # debug lines only when asked for


def test_info_lines_and_reprs_carry_no_credentials(caplog):
    caplog.set_level(logging.INFO, logger="flyte_checkpoint")
    uri = f"memory://user:{SECRET}@bucket/{uuid.uuid4().hex}?sig={SECRET}&se=2030"
    with fc.Checkpoint(uri) as cp:
        cp.save_sync(b"state")
        assert SECRET not in repr(cp)
    with fc.Checkpoint("memory://elsewhere/x", uri) as cp:
        assert cp.load_sync() is not None
    text = "\n".join(messages(caplog, logging.INFO))
    assert "saved checkpoint memory://<redacted>@bucket/" in text and "sig=<redacted>" in text
    assert SECRET not in text


def test_starting_fresh_is_logged_once(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="flyte_checkpoint")
    with fc.Checkpoint(str(tmp_path / "d"), str(tmp_path / "absent")) as cp:
        assert cp.load_sync() is None
    assert messages(caplog, logging.INFO) == [f"no checkpoint at {tmp_path / 'absent'}: starting fresh"]


# --------------------------------------------------------------------------- retries


class FlakyStore(BlobStore):
    """``flaky://host/abs/path`` is the local file ``/abs/path``; the first ``failures``
    stats fail as a throttled server's would."""

    failures = 0

    def __init__(self) -> None:
        self._local = LocalStore()

    @staticmethod
    def _path(uri: str) -> str:
        return urlsplit(uri).path

    def stat(self, uri: str) -> int | None:
        if FlakyStore.failures > 0:
            FlakyStore.failures -= 1
            raise TransientError(f"503 Slow Down from the server for {redact(uri)}")
        return self._local.stat(self._path(uri))

    def open_read(self, uri: str) -> BinaryIO:
        return self._local.open_read(self._path(uri))

    def open_write(self, uri: str) -> BlobWriter:
        return self._local.open_write(self._path(uri))

    def delete(self, uri: str) -> None:
        self._local.delete(self._path(uri))

    def list(self, prefix: str) -> Iterator[str]:
        return self._local.list(self._path(prefix))


@pytest.fixture
def flaky(tmp_path):
    register_store("flaky", "flaky", FlakyStore)
    try:
        yield tmp_path
    finally:
        unregister_store("flaky")
        FlakyStore.failures = 0


def test_retries_log_a_debug_line_each_without_credentials(flaky, caplog):
    caplog.set_level(logging.DEBUG, logger="flyte_checkpoint")
    target = flaky / "obj"
    target.write_bytes(b"payload")
    uri = f"flaky://user:{SECRET}@host{target}?token={SECRET}"
    FlakyStore.failures = 2
    policy = RetryPolicy(attempts=5, base_delay=0.0, max_delay=0.0)
    with fc.Checkpoint(str(flaky / "d"), f"flaky://host{target}", retry=policy) as cp:
        path = cp.load_sync()
        assert path is not None and path.read_bytes() == b"payload"
    retries = [m for m in messages(caplog, logging.DEBUG) if "transient error" in m]
    assert len(retries) == 2
    assert retries[0].startswith(f"load of flaky://host{target}: transient error (try 1 of 5), retrying in")
    assert "try 2 of 5" in retries[1]

    caplog.clear()
    FlakyStore.failures = 5
    with pytest.raises(TransientError, match="failed after 2 tries"):
        RetryPolicy(attempts=2, base_delay=0.0).call(
            lambda: store_for(uri).stat(uri), f"stat of {redact(uri)}"
        )
    text = "\n".join(messages(caplog, logging.DEBUG))
    assert "transient error (try 1 of 2)" in text
    assert SECRET not in text


# --------------------------------------------------------------------------- store calls


def test_debug_on_the_store_logger_alone_shows_store_lines_only(flaky, caplog):
    """README: ``flyte_checkpoint.store`` set to DEBUG on its own gives the store-call lines,
    and nothing else of the library (no retry lines, no info lines)."""
    caplog.set_level(logging.DEBUG, logger="flyte_checkpoint.store")
    assert logging.getLogger("flyte_checkpoint").level == logging.NOTSET
    target = flaky / "obj"
    target.write_bytes(b"payload")
    FlakyStore.failures = 1  # one retry, which logs a DEBUG line on flyte_checkpoint when it is on
    policy = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0)
    with fc.Checkpoint(str(flaky / "d"), f"flaky://host{target}", retry=policy) as cp:
        assert cp.load_sync().read_bytes() == b"payload"
    names = {r.name for r in caplog.records if r.name.startswith("flyte_checkpoint")}
    assert names == {"flyte_checkpoint.store"}
    lines = [r.getMessage() for r in caplog.records]
    assert any(
        line.startswith(f"FlakyStore.stat(flaky://host{target}) raised TransientError") for line in lines
    )
    assert any(line.startswith(f"FlakyStore.open_read(flaky://host{target}): opened in ") for line in lines)

    caplog.clear()  # the same with the library's logger at DEBUG: the retry line appears too
    FlakyStore.failures = 1
    caplog.set_level(logging.DEBUG, logger="flyte_checkpoint")
    with fc.Checkpoint(str(flaky / "e"), f"flaky://host{target}", retry=policy) as cp:
        cp.load_sync()
    assert any(
        "transient error (try 1 of 3)" in r.getMessage()
        for r in caplog.records
        if r.name == "flyte_checkpoint"
    )


def test_store_calls_are_logged_only_when_debug_is_on(tmp_path, caplog):
    uri = str(tmp_path / "ckpt")
    raw = get_registry().store_for(uri)
    assert not isinstance(raw, LoggedStore)  # no debug logging: the store itself, no wrapper
    caplog.set_level(logging.DEBUG)  # the root logger alone does not wrap stores
    assert store_for(uri) is raw

    caplog.set_level(logging.DEBUG, logger="flyte_checkpoint")
    store = store_for(uri)
    assert isinstance(store, LoggedStore) and store.inner is raw
    assert store_for(str(tmp_path / "other")) is store  # one wrapper per store
    logging.getLogger("flyte_checkpoint.store").setLevel(logging.INFO)
    try:
        assert store_for(uri) is raw  # store calls silenced on their own logger
    finally:
        logging.getLogger("flyte_checkpoint.store").setLevel(logging.NOTSET)
    assert store.supports_ranges == raw.supports_ranges
    with fc.Checkpoint(uri) as cp:
        cp.save_sync(tmp_path)  # a folder: open_write, streamed, committed
    with fc.Checkpoint(str(tmp_path / "n"), uri) as cp:
        cp.load_sync()
    assert list(store.list(str(tmp_path) + "/")) == [uri]
    store.delete(uri)
    assert store.stat(uri) is None
    lines = [r.getMessage() for r in caplog.records if r.name == "flyte_checkpoint.store"]
    assert any(line.startswith(f"LocalStore.open_write({uri}): opened in ") for line in lines), lines
    assert any(line.startswith(f"LocalStore commit of {uri}: ") and " bytes, " in line for line in lines)
    assert any(line.startswith(f"LocalStore.stat({uri}): ") and " bytes in " in line for line in lines)
    assert any(line.startswith(f"LocalStore.open_read({uri}): opened in ") for line in lines)
    assert any(line.startswith(f"LocalStore.list({tmp_path}/): 1 objects in ") for line in lines)
    assert any(line.startswith(f"LocalStore.delete({uri}): done in ") for line in lines)
    assert any(line.startswith(f"LocalStore.stat({uri}): absent in ") for line in lines)


def test_failed_store_calls_and_aborted_writes_log_the_error_type_only(caplog):
    caplog.set_level(logging.DEBUG, logger="flyte_checkpoint")
    uri = f"memory://k:{SECRET}@b/{uuid.uuid4().hex}"
    store = store_for(uri)
    with pytest.raises(FileNotFoundError):
        store.open_read(uri)
    with pytest.raises(RuntimeError), store.open_write(uri) as w:
        w.write(b"abc")
        raise RuntimeError("crash mid-write")
    assert store.stat(uri) is None  # the abort reached the real writer
    lines = [r.getMessage() for r in caplog.records if r.name == "flyte_checkpoint.store"]
    assert any(
        "MemoryStore.open_read(memory://<redacted>@b/" in line and "raised NotFoundError" in line
        for line in lines
    )
    assert any(
        line.startswith("MemoryStore abort of memory://<redacted>@b/") and "after 3 bytes" in line
        for line in lines
    )
    assert SECRET not in "\n".join(lines)


# --------------------------------------------------------------------------- progress


def test_progress_is_off_by_default_and_reported_when_asked(tmp_path, capsys):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.bin").write_bytes(os.urandom(200_000))
    dest = str(tmp_path / "ckpt")
    with fc.Checkpoint(dest) as cp:
        cp.save_sync(tree)
    with fc.Checkpoint(str(tmp_path / "n"), dest) as cp:
        cp.load_sync()
    assert capsys.readouterr() == ("", "")  # task code gets no output

    calls: list[tuple[int, int | None]] = []
    with fc.Checkpoint(str(tmp_path / "n2"), dest, progress=lambda d, t: calls.append((d, t))) as cp:
        cp.load_sync()
    size = Path(dest).stat().st_size
    assert calls[0] == (0, size) and calls[-1] == (size, size)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_progress_bar_draws_first_update_throttles_and_ends_the_line():
    now = [100.0]
    out = io.StringIO()
    bar = ProgressBar("push", stream=out, interval=1.0, clock=lambda: now[0])
    bar(0, 4 * 1024 * 1024)
    now[0] += 0.5
    bar(1024 * 1024, 4 * 1024 * 1024)  # within the interval: not drawn
    now[0] += 0.5
    bar(2 * 1024 * 1024, 4 * 1024 * 1024)  # drawn: 2 MiB in 1 s, 2 MiB left
    now[0] += 1.0
    bar(4 * 1024 * 1024, 4 * 1024 * 1024)
    bar.close()
    bar.close()
    drawn = out.getvalue().split("\r")[1:]
    assert len(drawn) == 4
    assert "  0%" in drawn[0] and "left" not in drawn[0]
    assert " 50%     2 MiB / 4 MiB      2 MiB/s  0:01 left" in drawn[1]
    assert drawn[-1].startswith("push [##") and "100%" in drawn[-1] and "in 0:02" in drawn[-1]
    assert out.getvalue().endswith("\n") and out.getvalue().count("\n") == 1
    bar(5, 5)  # after close: ignored
    assert out.getvalue().count("\r") == 4


def test_no_time_left_is_shown_until_the_samples_mean_something():
    """Proves: the first updates of a transfer (a 512-byte block after 0.25 s, as a save's
    first gzip member gives) show no time left, which would read hours; one second in with 1%
    done, or five seconds in with less, the estimate appears; the bar does not move."""
    now = [0.0]
    out = io.StringIO()
    total = 30 * 1024 * 1024
    bar = ProgressBar("push", stream=out, interval=0.0, clock=lambda: now[0])
    steps = [(0.0, 0), (0.25, 512), (0.9, 20 * 1024 * 1024), (1.0, 24 * 1024 * 1024)]
    for at, done in steps:
        now[0] = at
        bar(done, total)
    drawn = out.getvalue().split("\r")[1:]
    assert ["left" in line for line in drawn] == [False, False, False, True], drawn
    assert drawn[3].rstrip().endswith("0:01 left")
    assert len({line.index("]") for line in drawn}) == 1, drawn  # the bar does not move

    slow = 1024**4
    assert "left" not in format_line("push", 1024, slow, 4.9, 100)  # under 1% and under 5 s
    assert "left" in format_line("push", 1024, slow, 5.0, 100)
    assert "left" not in format_line("push", 0, slow, 60.0, 100)  # nothing done: no rate yet


def test_a_bar_hidden_for_log_lines_blanks_its_line_and_is_redrawn_below_them():
    """Proves: ``hidden()`` blanks the bar's line, lets whole lines through, then redraws the
    bar (the command line writes its log lines and warnings this way)."""
    now = [0.0]
    out = io.StringIO()
    bar = ProgressBar("pull", stream=out, interval=10.0, clock=lambda: now[0])
    bar(100, 1000)
    before = out.getvalue()
    with bar.hidden():
        out.write("a log line\n")
    after = out.getvalue()[len(before) :]
    blank = "\r" + " " * len(before.lstrip("\r")) + "\r"
    assert after.startswith(blank + "a log line\n\r" + "pull ["), repr(after)
    assert after.count("\r") == 3
    bar.close()
    with bar.hidden():  # closed: nothing blanked, nothing redrawn
        pass
    assert out.getvalue().endswith("\n") and out.getvalue().count("pull [") == 3


def test_a_bar_that_saw_nothing_prints_nothing_and_off_a_terminal_there_is_none():
    out = io.StringIO()
    ProgressBar(stream=out).close()
    assert out.getvalue() == ""
    with progress_bar("pull", stream=out) as bar:  # a StringIO is not a terminal
        assert bar is None
    with progress_bar("pull", stream=out, enabled=True) as bar:
        assert isinstance(bar, ProgressBar)
        bar(10, 10)
    assert "pull [" in out.getvalue()


def test_progress_text_formats():
    assert format_bytes(0) == "0 B" and format_bytes(1023) == "1023 B"
    assert format_bytes(1536) == "1.5 KiB" and format_bytes(3 * 1024**3) == "3 GiB"
    assert format_duration(0) == "0:00" and format_duration(61.2) == "1:02"
    assert format_duration(3725) == "1:02:05"
    line = format_line("pull", 512, None, 2.0, 80)
    assert line == "pull 512 B  256 B/s  for 0:02"
    for done in (0, 10, 500, 1000):
        assert len(format_line("x", done, 1000, 1.0, 60)) <= 60
    assert "[" not in format_line("a very long label " * 3, 1, 2, 1.0, 40)


# --------------------------------------------------------------------------- inspection


def test_iter_members_reads_pax_and_gnu_long_names_links_and_sizes():
    long = "d/" + "n" * 150 + ".bin"
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
            info = tarfile.TarInfo(long)
            info.size = 3
            tf.addfile(info, io.BytesIO(b"abc"))
            link = tarfile.TarInfo("l")
            link.type = tarfile.SYMTYPE
            link.linkname = "x/" + "t" * 120
            tf.addfile(link)
        members = list(iter_members(io.BytesIO(buf.getvalue())))
        assert [(m.name, m.kind, m.size) for m in members] == [(long, "file", 3), ("l", "symlink", 0)]
        assert members[1].linkname == "x/" + "t" * 120


def test_inspect_stream_summarizes_without_writing_and_checks_length(tmp_path):
    data = tar_bytes([file_member("a/x", b"1" * 10), file_member("a/y", b"2" * 20), file_member("b", b"3")])
    info = inspect_stream(io.BytesIO(data), len(data))
    assert (info.kind, info.members, info.files, info.unpacked_bytes) == ("tarball", 3, 3, 31)
    assert [(e.name, e.kind, e.size, e.members) for e in info.entries] == [
        ("a", "dir", 30, 2),
        ("b", "file", 1, 1),
    ]
    assert info.to_dict()["kind"] == "tarball"
    with pytest.raises(TransientError, match="the store reported"):
        inspect_stream(io.BytesIO(data), len(data) + 1)
    with pytest.raises(CorruptCheckpointError):
        inspect_stream(io.BytesIO(data[:-40]), len(data) - 40)
    assert inspect_stream(io.BytesIO(gzip.compress(b"hello")), 25).kind == "payload"
    assert list(tmp_path.iterdir()) == []


def test_inspect_uri_reports_progress_for_a_tarball_only(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "w.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    dest = str(tmp_path / "ckpt")
    fc.Checkpoint(dest).save_sync(tree)
    calls: list[tuple[int, int | None]] = []
    info = inspect_uri(dest, progress=lambda d, t: calls.append((d, t)))
    size = Path(dest).stat().st_size
    assert info.format == "tar.gz" and info.entries[0].name == "w.bin"
    assert calls[0][1] == size and calls[-1] == (size, size)
    calls.clear()
    fc.Checkpoint(dest).save_sync(b"raw bytes")
    assert inspect_uri(dest, progress=lambda d, t: calls.append((d, t))).format == "raw"
    assert calls == []
