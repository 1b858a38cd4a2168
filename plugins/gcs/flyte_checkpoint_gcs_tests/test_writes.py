"""Writes: resumable uploads in order, one request for a small object, aborts, secrets in logs."""

from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path

import pytest
import requests
from flyte_checkpoint_gcs.store import GCSStore
from requests.structures import CaseInsensitiveDict

from flyte_checkpoint.errors import TransientError
from flyte_checkpoint.uri import join

from .helpers import CHUNK, Call, RecordingSession, make_store
from .server import GCSServer


def test_large_object_goes_as_a_multi_chunk_resumable_upload(
    store: GCSStore, session: RecordingSession, gcs_root: str
) -> None:
    uri = join(gcs_root, "multi")
    data = os.urandom(6 * CHUNK + 1000)
    w = store.open_write(uri)
    for i in range(0, len(data), 100_001):
        w.write(data[i : i + 100_001])
    assert store.stat(uri) is None, "visible before close"
    w.close()

    puts = session.chunk_puts()
    assert len(puts) == 7
    assert [p.body_size for p in puts] == [CHUNK] * 6 + [1000]
    assert puts[0].headers["Content-Range"] == f"bytes 0-{CHUNK - 1}/*"
    assert puts[-1].headers["Content-Range"] == f"bytes {6 * CHUNK}-{len(data) - 1}/{len(data)}"
    assert len(session.find("POST", "uploadType=resumable")) == 1
    assert session.find("POST", "uploadType=multipart") == []

    assert store.stat(uri) == len(data)
    assert store.read_bytes(uri) == data


def test_exact_multiple_of_the_chunk_size_ends_with_an_empty_final_request(
    store: GCSStore, session: RecordingSession, gcs_root: str
) -> None:
    uri = join(gcs_root, "exact")
    data = os.urandom(3 * CHUNK)
    store.write_bytes(uri, data)
    puts = session.chunk_puts()
    assert [p.body_size for p in puts] == [CHUNK, CHUNK, CHUNK, 0]
    assert puts[-1].headers["Content-Range"] == f"bytes */{len(data)}"
    assert store.read_bytes(uri) == data


def test_small_object_goes_in_one_request_with_its_checksum(
    store: GCSStore, session: RecordingSession, gcs_root: str
) -> None:
    uri = join(gcs_root, "small")
    data = os.urandom(CHUNK - 1)
    store.write_bytes(uri, data)
    assert len(session.find("POST", "uploadType=multipart")) == 1
    assert session.find("POST", "uploadType=resumable") == []
    assert session.chunk_puts() == []
    assert store.read_bytes(uri) == data


def test_abort_midway_cancels_the_session_and_leaves_nothing(
    store: GCSStore, session: RecordingSession, gcs_root: str
) -> None:
    uri = join(gcs_root, "aborted")
    w = store.open_write(uri)
    w.write(os.urandom(3 * CHUNK + 5))
    w.abort()
    assert len(session.chunk_puts()) >= 2, "chunks were on the server before the abort"
    # The session is cancelled (GCS answers 499; the emulator does not implement it).
    cancels = session.find("DELETE", "upload_id=")
    assert len(cancels) == 1
    assert store.stat(uri) is None
    assert list(store.list(gcs_root)) == []


def test_exception_in_with_block_after_many_chunks_leaves_nothing(
    store: GCSStore, session: RecordingSession, gcs_root: str
) -> None:
    uri = join(gcs_root, "boom")
    with pytest.raises(RuntimeError, match="boom"), store.open_write(uri) as w:
        for _ in range(5):
            w.write(os.urandom(CHUNK))
        raise RuntimeError("boom")
    assert session.find("DELETE", "upload_id=")
    assert store.stat(uri) is None


def test_failed_chunk_abandons_the_upload(gcs_server: GCSServer, gcs_root: str) -> None:
    def fail_third_chunk(call: Call, data: object) -> object:
        if "Content-Range" in call.headers and call.headers["Content-Range"].startswith(
            f"bytes {2 * CHUNK}-"
        ):
            raise requests.ConnectionError("connection reset by peer")
        return data

    session = RecordingSession(fault=fail_third_chunk)
    store = make_store(gcs_server.endpoint, session=session)
    uri = join(gcs_root, "failed")
    with pytest.raises(TransientError) as info, store.open_write(uri) as w:
        for _ in range(6):
            w.write(os.urandom(CHUNK))
    assert "gs://" in str(info.value) and "upload_id" not in str(info.value)
    assert session.find("DELETE", "upload_id=")
    assert store.stat(uri) is None
    assert list(store.list(gcs_root)) == []


def test_upload_file_round_trip_and_overwrite(store: GCSStore, gcs_root: str, tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    data = os.urandom(4 * CHUNK + 3)
    src.write_bytes(data)
    uri = join(gcs_root, "file")
    store.write_bytes(uri, b"old")
    store.upload_file(src, uri)
    assert store.read_bytes(uri) == data


def test_a_chunk_persisted_in_part_is_resent_from_where_the_server_stopped(
    gcs_server: GCSServer, gcs_root: str
) -> None:
    """GCS may keep only part of a chunk (a multiple of 256KiB) and say so with a 308 whose Range
    ends early. The session below delivers only the first half of the second chunk (the emulator
    then answers exactly that); the writer sends the rest again from the acknowledged offset,
    ahead of the next chunk's bytes."""
    part, kept = 2 * CHUNK, CHUNK

    class Halving(RecordingSession):
        cut = False

        def request(self, method, url, data=None, headers=None, **kwargs):  # type: ignore[no-untyped-def]
            sent = CaseInsensitiveDict(headers or {}).get("Content-Range")
            if not self.cut and sent == f"bytes {part}-{2 * part - 1}/*":
                self.cut = True
                data = bytes(data)[:kept]
                headers = {**headers, "Content-Range": f"bytes {part}-{part + kept - 1}/*"}
            return super().request(method, url, data=data, headers=headers, **kwargs)

    session = Halving()
    store = make_store(gcs_server.endpoint, session=session, part_size=part)
    uri = join(gcs_root, "resent")
    data = os.urandom(4 * part + 11)
    store.write_bytes(uri, data)
    ranges = [p.headers["Content-Range"] for p in session.chunk_puts()]
    assert ranges == [
        f"bytes 0-{part - 1}/*",
        f"bytes {part}-{part + kept - 1}/*",  # what reached the server of the second chunk
        f"bytes {part + kept}-{2 * part + kept - 1}/*",  # its rest, resent first, then the third's
        f"bytes {2 * part + kept}-{3 * part + kept - 1}/*",
        f"bytes {3 * part + kept}-{len(data) - 1}/{len(data)}",
    ], ranges
    assert store.read_bytes(uri) == data
    store.close()


def test_chunks_go_from_the_stores_pool_one_at_a_time(gcs_server: GCSServer, gcs_root: str) -> None:
    """max_concurrency is 1: never two requests at once; every chunk but the last leaves from a
    pool thread while the caller fills the next, and the last one (the commit) from the thread
    that closes the writer."""
    lock = threading.Lock()
    state = {"now": 0, "most": 0}
    names: list[str] = []

    def watch(call: Call, data: object) -> object:
        if "Content-Range" in call.headers:
            names.append(threading.current_thread().name)
        return data

    class Counting(RecordingSession):
        def request(self, method, url, *args, **kwargs):  # type: ignore[no-untyped-def]
            with lock:
                state["now"] += 1
                state["most"] = max(state["most"], state["now"])
            try:
                return super().request(method, url, *args, **kwargs)
            finally:
                with lock:
                    state["now"] -= 1

    store = make_store(gcs_server.endpoint, session=Counting(fault=watch))
    store.write_bytes(join(gcs_root, "serial"), os.urandom(5 * CHUNK + 1))
    assert state["most"] == 1
    assert len(names) == 6, names
    assert all(n.startswith("flyte-checkpoint-gcs-") for n in names[:-1]), names
    assert names[-1] == threading.current_thread().name, names
    store.close()


def test_upload_id_never_reaches_the_debug_logs(
    store: GCSStore, session: RecordingSession, gcs_root: str, caplog: pytest.LogCaptureFixture
) -> None:
    """urllib3 logs each request line at DEBUG, with a resumable upload's upload_id in it: the
    GCS plugin's filter replaces the id, over a multi-chunk upload."""
    with caplog.at_level(logging.DEBUG):
        store.write_bytes(join(gcs_root, "logged"), os.urandom(3 * CHUNK + 5))
    puts = session.chunk_puts()
    assert len(puts) == 4
    ids = {re.search(r"upload_id=([^&]+)", p.url).group(1) for p in puts}  # type: ignore[union-attr]
    assert len(ids) == 1 and len(next(iter(ids))) > 4
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "upload_id=<redacted>" in text, "the request lines were logged, so the check means something"
    for upload_id in ids:
        assert upload_id not in text
