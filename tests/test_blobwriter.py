"""``BlobWriter``'s promises to backend authors (CONTRIBUTING.md): commit and abort each run at
most once, a failed commit is followed by an abort, and nothing is written after either."""

from __future__ import annotations

import threading

import pytest

from flyte_checkpoint.storage.blobstore import BlobWriter
from flyte_checkpoint.uri import redact


class Recording(BlobWriter):
    """Records every call the base class makes into the subclass."""

    def __init__(self, uri: str = "mem://b/key", *, fail_commit: BaseException | None = None) -> None:
        super().__init__(uri)
        self.calls: list[str] = []
        self.data = bytearray()
        self.fail_commit = fail_commit
        self.commit_started = threading.Event()
        self.release_commit = threading.Event()
        self.release_commit.set()

    def _write(self, data) -> None:
        self.calls.append("write")
        self.data += data

    def _commit(self) -> None:
        self.calls.append("commit")
        self.commit_started.set()
        assert self.release_commit.wait(timeout=60), "hang guard"
        if self.fail_commit is not None:
            raise self.fail_commit

    def _abort(self) -> None:
        self.calls.append("abort")


def test_commit_happens_once_and_abort_after_it_does_nothing():
    w = Recording()
    w.write(b"abc")
    w.close()
    w.close()
    w.abort()
    assert w.calls == ["write", "commit"] and w.closed and w.bytes_written == 3


def test_abort_happens_once_and_close_after_it_commits_nothing():
    w = Recording()
    w.write(b"abc")
    w.abort()
    w.abort()
    w.close()
    assert w.calls == ["write", "abort"]


@pytest.mark.parametrize("error", [OSError("upload failed"), KeyboardInterrupt()])
def test_a_failed_commit_is_followed_by_one_abort_and_raised(error):
    w = Recording(fail_commit=error)
    w.write(b"abc")
    with pytest.raises(type(error)):
        w.close()
    w.close()
    w.abort()
    assert w.calls == ["write", "commit", "abort"]


def test_an_abort_that_fails_after_a_failed_commit_does_not_hide_the_commit_error():
    class AbortFails(Recording):
        def _abort(self) -> None:
            super()._abort()
            raise OSError("abort failed too")

    w = AbortFails(fail_commit=OSError("commit failed"))
    with pytest.raises(OSError, match="commit failed"):
        w.close()
    assert w.calls == ["commit", "abort"]


def test_the_with_block_commits_on_success_and_aborts_on_an_exception():
    with Recording() as ok:
        ok.write(b"x")
    assert ok.calls == ["write", "commit"]
    with pytest.raises(RuntimeError), Recording() as failed:
        failed.write(b"x")
        raise RuntimeError("boom")
    assert failed.calls == ["write", "abort"]


@pytest.mark.parametrize("end", ["close", "abort"])
def test_writing_after_the_end_is_an_error_naming_the_uri_without_credentials(end):
    uri = "s3://KEY:SECRET@bucket/key"
    w = Recording(uri)
    getattr(w, end)()
    with pytest.raises(ValueError) as info:
        w.write(b"late")
    state = {"close": "committed", "abort": "aborted"}[end]
    assert str(info.value) == f"write to a {state} writer for {redact(uri)}"
    assert "SECRET" not in str(info.value) and "write" not in w.calls


def test_racing_closes_and_aborts_run_exactly_one_of_commit_or_abort():
    for _ in range(50):
        w = Recording()
        go = threading.Barrier(6)

        def end(method: str, w: Recording = w, go: threading.Barrier = go) -> None:
            go.wait(timeout=60)
            getattr(w, method)()

        threads = [threading.Thread(target=end, args=(m,)) for m in ["close"] * 3 + ["abort"] * 3]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert w.calls in (["commit"], ["abort"]), w.calls


def test_an_abort_during_the_commit_does_nothing_and_the_commit_completes():
    w = Recording()
    w.release_commit.clear()
    closer = threading.Thread(target=w.close)
    closer.start()
    assert w.commit_started.wait(timeout=60), "hang guard"
    w.abort()  # the commit has begun: too late to abort
    w.release_commit.set()
    closer.join(timeout=60)
    assert w.calls == ["commit"]
