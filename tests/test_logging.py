"""Logging (info per transfer, debug per retry and store call), progress callbacks and
the progress bar, and inspection of tarballs from a stream: in-process, on real stores."""

from __future__ import annotations

import gzip
import inspect
import io
import logging
import os
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint.errors import CorruptCheckpointError, SourceChangedError, TransientError
from flyte_checkpoint.format.inspection import inspect_stream, inspect_uri, iter_members
from flyte_checkpoint.progress import ProgressBar, format_bytes, format_duration, format_line, progress_bar
from flyte_checkpoint.storage.blobstore import BlobStore, BlobWriter, CopyCheck, CopySource
from flyte_checkpoint.storage.registry import get_registry, register_store, store_for, unregister_store
from flyte_checkpoint.storage.storelog import LoggedStore, unwrapped
from flyte_checkpoint.storage.stores.local import LocalStore
from flyte_checkpoint.uri import redact
from flyte_checkpoint.util.retry import RetryPolicy
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
        line.startswith(f"FlakyStore.pin(flaky://host{target}) raised TransientError") for line in lines
    )  # a load pins the version it reads (its size, here), then reads through the pin

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
    listed = list(store.list(str(tmp_path) + "/"))
    assert [u for u in listed if ".fcp-history/" not in u] == [uri]  # and its history: docs/history.md
    store.delete(uri)
    assert store.stat(uri) is None
    lines = [r.getMessage() for r in caplog.records if r.name == "flyte_checkpoint.store"]
    assert any(line.startswith(f"LocalStore.open_write({uri}): opened in ") for line in lines), lines
    assert any(line.startswith(f"LocalStore commit of {uri}: ") and " bytes, " in line for line in lines)
    assert any(line.startswith(f"LocalStore.pin({uri}): opened in ") for line in lines)
    assert any(line.startswith(f"LocalStore.list({tmp_path}/): {len(listed)} objects in ") for line in lines)
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


class _Marker:
    """A unique argument or answer; iterating it gives itself (a listing of one)."""

    size = 1  # read where an answer is a CopySource

    def __init__(self, label: str) -> None:
        self.label = label

    def __iter__(self) -> Iterator[_Marker]:
        yield self

    def __repr__(self) -> str:
        return f"<{self.label}>"


def _interface() -> tuple[list[str], list[str], list[str]]:
    """BlobStore's capabilities (public attributes that are not methods, annotated ones too) and
    methods, and BlobWriter's hooks (methods with one leading underscore), read here and not
    taken from storelog, so that a mistake there is not repeated here."""
    members = dict(inspect.getmembers(BlobStore))
    for name in BlobStore.__annotations__:
        members.setdefault(name, None)
    public = {n: v for n, v in members.items() if not n.startswith("_")}
    capabilities = sorted(n for n, v in public.items() if not inspect.isroutine(v))
    methods = sorted(n for n, v in public.items() if inspect.isroutine(v))
    hooks = sorted(
        n for n, v in vars(BlobWriter).items() if inspect.isfunction(v) and n[:1] == "_" and n[:2] != "__"
    )
    return capabilities, methods, hooks


#: Arguments of BlobStore's methods by name, where the wrapper reads them (a URI for its line,
#: bytes for their count); any other argument is a marker of its own.
ARGUMENTS: dict[str, Any] = {
    "uri": "memory://b/k",
    "prefix": "memory://b/",
    "data": b"abc",
    "start": 3,
    "length": 4,
}


def _not_passed_on() -> list[str]:
    """What a LoggedStore does not answer with its wrapped store's own: capabilities whose value
    is not the wrapped store's, methods that do not reach the wrapped store's with the caller's
    arguments or do not return its answer, writer hooks the wrapper's writer leaves to
    BlobWriter or does not pass on."""
    capabilities, methods, hooks = _interface()
    seen: list[tuple[str, tuple, dict]] = []
    answers = {name: _Marker(f"answer of {name}") for name in methods}

    class InnerWriter(BlobWriter):
        def _write(self, data):
            seen.append(("_write", (bytes(data),), {}))

        def _copy(self, source, start, length, expect):
            seen.append(("_copy", (source, start, length, expect), {}))

        def _commit(self):
            seen.append(("_commit", (), {}))

        def _abort(self):
            seen.append(("_abort", (), {}))

    def method(name: str):
        def call(self, *args, **kwargs):
            seen.append((name, args, kwargs))
            return InnerWriter(args[0]) if name == "open_write" else answers[name]

        return call

    namespace: dict[str, Any] = {n: _Marker(f"capability {n}") for n in capabilities}
    namespace.update({n: method(n) for n in methods})
    inner = type("Inner", (BlobStore,), namespace)()
    logged = LoggedStore(inner)
    missing = [n for n in capabilities if getattr(logged, n) is not getattr(inner, n)]
    for name in methods:
        if name == "open_write":
            continue
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        signature = inspect.signature(getattr(BlobStore, name))
        for p in list(signature.parameters.values())[1:]:
            value = ARGUMENTS.get(p.name) or _Marker(p.name)
            if p.kind is p.KEYWORD_ONLY:
                kwargs[p.name] = value
            elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                args.append(value)
        seen.clear()
        returns_nothing = signature.return_annotation in (None, "None")
        try:
            result = getattr(logged, name)(*args, **kwargs)
            answered = (
                returns_nothing
                or result is answers[name]
                or (isinstance(result, Iterator) and list(result) == [answers[name]])  # a listing
            )
        except Exception:  # the base class's default, working on the markers
            answered = False
        if seen != [(name, tuple(args), kwargs)] or not answered:
            missing.append(name)
    seen.clear()
    source = CopySource("memory://b/old", 10, "v1")
    expect = CopyCheck(((5, 7),))  # the copy's check: passed on too
    try:
        writer = logged.open_write("memory://b/k")
        writer.write(b"abc")
        writer.copy(source, 2, 5, expect)
        writer.close()
        logged.open_write("memory://b/k").abort()
    except Exception as exc:
        missing.append(f"writer ({type(exc).__name__})")
    if seen[:1] != [("open_write", ("memory://b/k",), {})]:
        missing.append("open_write")
    reached = {name for name, _, _ in seen}
    wrapper_writer = type(logged.open_write("memory://b/k"))
    missing += [
        f"writer {h}"
        for h in hooks
        if h not in reached or getattr(wrapper_writer, h) is getattr(BlobWriter, h)
    ]
    if ("_copy", (source, 2, 5, expect), {}) not in seen or ("_write", (b"abc",), {}) not in seen:
        missing.append("writer arguments")
    return missing


def test_the_wrapper_passes_on_every_capability_method_and_writer_hook():
    """Proves: a LoggedStore answers each capability BlobStore declares with the wrapped store's
    value, passes each method of BlobStore (fast paths included) to the wrapped store's own with
    the caller's arguments and returns its answer, and its writers pass on writes, copies,
    commits and aborts. (At DEBUG, copy_limits and the writers' copies were lost: every
    incremental save sent everything, 901 KB instead of 311 KB.)"""
    capabilities, methods, hooks = _interface()
    assert {"copy_limits", "part_size", "supports_ranges", "supports_list_details"} <= set(capabilities)
    assert {"copy_source", "list_details", "upload_file", "read_range"} <= set(methods)
    assert {"_copy", "_write", "_commit", "_abort"} <= set(hooks)
    assert _not_passed_on() == []


def test_a_capability_or_method_added_to_the_interface_is_caught(monkeypatch):
    """Proves: the check above fails for a capability, method or writer hook that BlobStore or
    BlobWriter gains and the wrapper does not pass on (here added after the wrapper was made)."""
    monkeypatch.setattr(BlobStore, "supports_teleport", False, raising=False)
    monkeypatch.setattr(BlobStore, "teleport", lambda self, uri: None, raising=False)
    monkeypatch.setattr(BlobWriter, "_seal", lambda self: None, raising=False)
    assert _not_passed_on() == ["supports_teleport", "teleport", "writer _seal"]


def test_a_capability_the_wrapped_store_changes_is_seen_through_the_wrapper(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="flyte_checkpoint")
    raw = LocalStore()
    logged = LoggedStore(raw)
    raw.supports_ranges = False  # type: ignore[misc]
    raw.copy_limits = None
    assert (logged.supports_ranges, logged.copy_limits) == (False, None)
    assert unwrapped(logged) is raw and unwrapped(raw) is raw


def test_a_change_of_level_during_a_save_leaves_it_incremental(tmp_path, monkeypatch, caplog):
    """Proves: a folder save that found its store wrapped (DEBUG) still copies from the previous
    object when the level is lowered before it looks that object's store up (the two stores
    were compared by identity, wrapper against store: a full save)."""
    from flyte_checkpoint.storage import registry

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "big.bin").write_bytes(os.urandom(200_000))
    dest = str(tmp_path / "ckpt")
    fc.Checkpoint(dest).save_sync(tree)
    (tree / "small.bin").write_bytes(b"changed")
    lookups = []
    real = registry.store_for

    def store_for_then_quiet(uri: str) -> BlobStore:
        store = real(uri)
        lookups.append(type(store).__name__)
        logging.getLogger("flyte_checkpoint").setLevel(logging.WARNING)  # from the next look-up on
        return store

    monkeypatch.setattr(registry, "store_for", store_for_then_quiet)
    caplog.set_level(logging.DEBUG, logger="flyte_checkpoint")
    raw = unwrapped(get_registry().store_for(dest))
    copied = []
    real_open_write = raw.open_write

    def open_write(uri: str) -> BlobWriter:
        copied.append(writer := real_open_write(uri))
        return writer

    monkeypatch.setattr(raw, "open_write", open_write, raising=False)
    fc.Checkpoint(dest).save_sync(tree)
    assert lookups[:2] == ["LoggedStore", "LocalStore"], lookups
    assert copied and copied[0].bytes_copied > 200_000, [(w.bytes_written, w.bytes_copied) for w in copied]


class Retiring(LocalStore):
    """``retiring:///abs`` is the local file ``/abs``; a class of its own, so that the test
    knows its instances are this test's."""

    def open_write(self, uri: str) -> BlobWriter:
        return super().open_write(urlsplit(uri).path)

    def stat(self, uri: str) -> int | None:
        return super().stat(urlsplit(uri).path)


@pytest.mark.parametrize("level", [logging.WARNING, logging.DEBUG], ids=["WARNING", "DEBUG"])
def test_a_store_retired_by_configure_store_is_freed_with_its_wrapper(tmp_path, caplog, level):
    """Proves (leftovers, item 4): a store that ``configure_store`` replaced, once its users
    let go of it, is freed with the wrapper that logged its calls (at DEBUG): neither the
    wrappers' table (whose wrappers held their keys) nor the registry's list of retired stores
    keeps it. A store still held when it is retired lives on, keeps its wrapper while that is
    held, and gets a wrapper again after."""
    import gc
    import weakref

    caplog.set_level(level, logger="flyte_checkpoint")
    register_store("retiring", "retiring", Retiring)
    try:
        uri = f"retiring://{tmp_path}/ckpt"
        seen = []
        for _ in range(3):
            store = store_for(uri)
            assert isinstance(store, LoggedStore) == (level == logging.DEBUG)
            assert store_for(uri) is store  # one wrapper per store while it is in use
            fc.Checkpoint(uri).save_sync(b"state")  # used: a save through it
            seen.append((weakref.ref(unwrapped(store)), weakref.ref(store)))
            del store
            fc.configure_store("retiring")  # no settings: the backend's stores are dropped
        gc.collect()
        alive = [(inner(), outer()) for inner, outer in seen if inner() is not None or outer() is not None]
        assert alive == [], "retired stores (or their wrappers) were kept"
        kept = store_for(uri)  # held through a reconfiguration, as a save in flight would hold it
        fc.configure_store("retiring")
        gc.collect()
        assert store_for(uri) is not kept
        assert store_for(uri) is store_for(uri)
        if level == logging.DEBUG:
            raw, ref = unwrapped(kept), weakref.ref(kept)
            del kept
            gc.collect()
            assert ref() is None  # its wrapper went when no one held it; the store is held here
            assert isinstance(raw, Retiring)
    finally:
        unregister_store("retiring")


class PathReadingStore(LocalStore):
    """``pathread:///abs`` is the local file ``/abs``; its upload_file reads the file by its path
    (not through open_source), and the file grows meanwhile, as a file still being written would."""

    def open_write(self, uri: str) -> BlobWriter:
        return super().open_write(urlsplit(uri).path)

    def upload_file(self, path, uri):
        with open(os.fspath(path), "ab") as grow:
            grow.write(b"more")
        self.write_bytes(uri, Path(os.fspath(path)).read_bytes())


@pytest.mark.parametrize("level", [logging.WARNING, logging.DEBUG])
def test_a_store_named_in_an_error_is_the_store_at_every_level(tmp_path, caplog, level):
    """Proves: the error of a file changed under a store's upload_file names that store's
    class at DEBUG too (it named LoggedStore)."""
    caplog.set_level(level, logger="flyte_checkpoint")
    register_store("pathread", "pathread", PathReadingStore)
    try:
        src = tmp_path / "model.pt"
        src.write_bytes(b"weights")
        with pytest.raises(SourceChangedError, match=r"and PathReadingStore\.upload_file stored it"):
            fc.Checkpoint(f"pathread://{tmp_path}/ckpt").save_sync(src)
        assert (tmp_path / "ckpt").read_bytes() == b"weightsmore"  # stored before the check saw it
    finally:
        unregister_store("pathread")


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
