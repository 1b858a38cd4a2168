"""Logging never changes what a program does: every operation on every store makes the same store
calls, and sends the same bytes, at WARNING and at DEBUG (where the registry hands out stores
wrapped in ``LoggedStore``, or the command line's ``--debug`` does).

Each case runs one operation twice from scratch, under two fresh roots of one store (file,
memory, S3 on moto, GCS on its emulator, Azure on Azurite): once with the library's logger at
WARNING, once at DEBUG. :mod:`tests.storecalls` records the calls on the store instance itself,
below the logging wrapper, with each writer's pieces (runs of written bytes by length and digest,
server-side copies by source and range). What differs between the two runs by design is
normalized: the roots, workspace paths, a sharded save's random session token and the contents
of its coordination markers (they carry that token and the store's upload ids), the timings in
the command line's output and the modification times in a listing (kept as "has one or not").

Compared in order (a list), except where the order is not defined, compared as multisets (said
per operation): a sharded save's ranks run as threads, so their calls interleave as the threads
are scheduled, and a follower polls the markers as often as the timing gives (the set of marker
reads is compared, not how many). Each case also checks that DEBUG did wrap the store (store
lines were logged) and WARNING did not, so no case compares two runs of the same thing.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import flyte_checkpoint as fc
from flyte_checkpoint import cli
from flyte_checkpoint.format.inspection import inspect_index, inspect_uri
from flyte_checkpoint.storage.registry import store_for
from flyte_checkpoint.storage.storelog import LoggedStore
from tests.reliability.backends import BACKENDS, backend_pool  # noqa: F401
from tests.storecalls import recording, summary

STORES = ("file", "memory", *(b for b in BACKENDS if b != "file"))
#: A file of the incremental save that stays the same: on S3 a copy must be at least 5 MiB.
BIG = {"s3": 5 * 1024 * 1024 + 4096}
BIG_DEFAULT = 300 * 1024
TOKEN = re.compile(r"\b[0-9a-f]{16}\b")  # a sharded save's session token (secrets.token_hex(8))
RANK_TOKEN = re.compile(r"((?:done|piece)-\d+\.)[0-9a-f]{16}\b")  # a rank's report: <kind>-<n>.<token>
MTIME = 1_700_000_000


@dataclass
class Place:
    """Where a store's runs go: ``root`` (a URI prefix with no trailing slash)."""

    name: str
    root: str


@pytest.fixture(params=STORES)
def place(request: pytest.FixtureRequest, backend_pool: Any) -> Iterator[Place]:  # noqa: F811
    if request.param == "memory":
        yield Place("memory", f"memory://fcp-logging/{uuid.uuid4().hex[:8]}")
        return
    backend = backend_pool.get(request.param)
    with backend.activated():
        yield Place(backend.name, backend.root)


def _tree(folder: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, (MTIME, MTIME))
    return folder


@dataclass
class Inputs:
    """What the operations save: the same files (bytes and times) for both runs."""

    small: Path  # a folder of a few small files
    v1: Path  # a folder with a big file...
    v2: Path  # ...and the same folder with one small file changed
    payload: Path  # one file
    other: Path  # a folder whose names are not in small's (a second rank's)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Inputs]:
    """Per store name (the big file's size depends on the store's copy minimum)."""
    rng = random.Random(32)
    base = tmp_path_factory.mktemp("inputs")
    text = b"".join(b"line %d of a text file\n" % i for i in range(2000))
    small = {"a.txt": text, "sub/b.bin": rng.randbytes(40_000), "sub/empty": b"", "c.json": b'{"step": 3}'}
    out = {}
    for name in STORES:
        big = rng.randbytes(BIG.get(name, BIG_DEFAULT))
        v1 = {**small, "big.bin": big}
        v2 = {**v1, "sub/b.bin": rng.randbytes(40_000)}
        payload = base / name / "model.pt"
        payload.parent.mkdir()
        payload.write_bytes(rng.randbytes(70_000))
        out[name] = Inputs(
            _tree(base / name / "small", small),
            _tree(base / name / "v1", v1),
            _tree(base / name / "v2", v2),
            payload,
            _tree(base / name / "other", {"rank1/w.bin": rng.randbytes(30_000), "rank1/n.txt": text[:999]}),
        )
    return out


@dataclass
class Run:
    """One run of an operation: its root on the store and a local folder of its own."""

    root: str
    here: Path
    inputs: Inputs
    debug: bool

    def uri(self, label: str) -> str:
        return f"{self.root}/{label}"

    def local(self, label: str) -> Path:
        return self.here / label


def _workspace_free(value: Any) -> Any:
    """A restored tree as its files' relative names and contents (never its workspace path)."""
    if value is None:
        return None
    root = Path(value)
    if root.is_file():
        return ("file", root.name, root.read_bytes())
    return sorted(
        (str(p.relative_to(root)), p.read_bytes() if p.is_file() else None) for p in root.rglob("*")
    )


# --------------------------------------------------------------------------- the operations


def save_bytes(r: Run) -> Any:
    with fc.Checkpoint(r.uri("ckpt")) as cp:
        cp.save_sync(b"step 7 of 10")
        cp.save_sync(b"step 8 of 10")


def save_file(r: Run) -> Any:
    with fc.Checkpoint(r.uri("ckpt")) as cp:
        cp.save_sync(r.inputs.payload)  # a file: the store's upload_file


def save_folder(r: Run) -> Any:
    with fc.Checkpoint(r.uri("ckpt")) as cp:
        cp.save_sync(r.inputs.small)


def save_incremental(r: Run) -> Any:
    with fc.Checkpoint(r.uri("ckpt")) as cp:
        cp.save_sync(r.inputs.v1)
        cp.save_sync(r.inputs.v2)  # big.bin unchanged: copied where the store can copy


def save_background(r: Run) -> Any:
    with fc.Checkpoint(r.uri("ckpt")) as cp:
        cp.save_background(r.inputs.small).result(timeout=120)
        cp.save_background(r.inputs.payload).result(timeout=120)


def _saved(r: Run) -> str:
    uri = r.uri("ckpt")
    with fc.Checkpoint(uri) as cp:
        cp.save_sync(r.inputs.small)
    return uri


def load_whole(r: Run) -> Any:
    with fc.Checkpoint(r.uri("next"), _saved(r)) as cp:
        return _workspace_free(cp.load_sync())


def load_partial(r: Run) -> Any:
    with fc.Checkpoint(r.uri("next"), _saved(r)) as cp:
        return _workspace_free(cp.load_sync(members=["sub"]))


def load_file(r: Run) -> Any:
    with fc.Checkpoint(r.uri("next"), _saved(r)) as cp:
        return _workspace_free(cp.load_file_sync("sub/b.bin", r.local("b.bin")))


def load_payload(r: Run) -> Any:
    uri = r.uri("ckpt")
    with fc.Checkpoint(uri) as cp:
        cp.save_sync(r.inputs.payload)
    with fc.Checkpoint(r.uri("next"), uri) as cp:
        return _workspace_free(cp.load_sync())


def _listed(infos: Any) -> list[Any]:
    return [(i.uri, i.size, i.is_folder, i.modified is not None) for i in infos]


def list_objects(r: Run) -> Any:
    _saved(r)
    with fc.Checkpoint(r.uri("sub/other")) as cp:
        cp.save_sync(b"x")
    store = store_for(r.root)
    # a manifest's size depends on its times (docs/history.md): its URI is compared, not its size
    details = [i for i in store.list_details(r.root + "/") if ".fcp-history/" not in i.uri]
    return (
        list(store.list(r.root + "/")),
        _listed(iter(details)),
        _listed(store.list_details(r.root + "/", recursive=False)),
    )


def inspect(r: Run) -> Any:
    uri = _saved(r)
    return inspect_uri(uri).to_dict(), inspect_index(uri).to_dict()  # type: ignore[union-attr]


def sharded(r: Run) -> Any:
    from flyte_checkpoint.sharded import load_sharded, save_sharded

    uri = r.uri("ckpt")
    folders = [r.inputs.small, r.inputs.other]
    errors: list[BaseException] = []

    def rank(n: int) -> None:
        try:
            save_sharded(uri, folders[n], rank=n, world_size=2, timeout=120)
        except BaseException as exc:  # pragma: no cover - shown by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=rank, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)  # a hang guard only
    assert not errors and not any(t.is_alive() for t in threads), errors
    with fc.Checkpoint(r.uri("next"), uri) as cp:
        own = _workspace_free(load_sharded(cp, own=True, rank=1))
    with fc.Checkpoint(r.uri("next2"), uri) as cp:
        return own, _workspace_free(load_sharded(cp))


def _cli(r: Run, *argv: str) -> Any:
    """The command's JSON document (timings left out); ``--debug`` in the DEBUG run."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    args = [*argv, "--json", *(["--debug"] if r.debug else [])]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main(args)
    assert status == 0, err.getvalue()
    assert (": DEBUG: " in err.getvalue()) == r.debug, err.getvalue()  # --debug did log store calls
    doc = json.loads(out.getvalue())

    def timeless(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: (v is not None) if k == "modified" else timeless(v)
                for k, v in value.items()
                if k not in ("seconds", "rate")
            }
        if isinstance(value, list):
            return [timeless(v) for v in value]
        return value

    return timeless(doc)


def cli_push_pull(r: Run) -> Any:
    uri = r.uri("ckpt")
    return (
        _cli(r, "push", str(r.inputs.small), uri),
        _cli(r, "pull", uri, str(r.local("all"))),
        _workspace_free(r.local("all")),
        _cli(r, "pull", uri, str(r.local("one")), "--member", "sub/b.bin"),
        _workspace_free(r.local("one")),
        _cli(r, "push", str(r.inputs.payload), r.uri("payload")),
    )


def cli_ls_inspect_rm(r: Run) -> Any:
    uri = _saved(r)
    return (
        _cli(r, "ls", r.root + "/"),
        _cli(r, "ls", "--long", r.root + "/"),
        _cli(r, "ls", "--long", "--no-recursive", r.root + "/"),
        _cli(r, "inspect", "--members", uri),
        _cli(r, "inspect", "--index", uri),
        _cli(r, "rm", uri),
    )


#: Operation -> whether its calls are compared in order (False: as a multiset; see the docstring).
OPERATIONS: dict[str, tuple[Callable[[Run], Any], bool]] = {
    "save bytes": (save_bytes, True),
    "save a file": (save_file, True),
    "save a folder": (save_folder, True),
    "incremental save": (save_incremental, True),
    "background saves": (save_background, True),
    "full load": (load_whole, True),
    "partial load": (load_partial, True),
    "load_file": (load_file, True),
    "load of a payload": (load_payload, True),
    "list": (list_objects, True),
    "inspect": (inspect, True),
    "sharded save and load": (sharded, False),
    "cli push and pull": (cli_push_pull, True),
    "cli ls, inspect and rm": (cli_ls_inspect_rm, True),
}


# --------------------------------------------------------------------------- the comparison


def _normalizer(root: str, here: Path) -> Callable[[str], str]:
    tokens: dict[str, str] = {}
    workspace = re.compile(r"/[^ ]*flyte-checkpoint-ws-[^/ ]+")
    staging = re.compile(r"\.fcp-staging-[^/ ]+")  # a background save's snapshot

    def normalize(text: str) -> str:
        text = text.replace(root, "<run>").replace(str(here), "<here>")
        text = staging.sub("<staging>", workspace.sub("<workspace>", text))
        # a rank's own token in its report's name: numbered by first use, the ranks' threads
        # would number them in the order they ran, which differs from run to run
        text = RANK_TOKEN.sub(r"\1<rank token>", text)
        return TOKEN.sub(lambda m: tokens.setdefault(m.group(0), f"<token{len(tokens)}>"), text)

    return normalize


def _coordination(entry: tuple[Any, ...]) -> bool:
    return any(isinstance(a, str) and (".fcp-shard/" in a or ".shard/" in a) for a in entry[1:2])


_MARKER_READS = {"read_bytes", "stat", "list", "open_read", "list_details"}


def _history(entry: tuple[Any, ...]) -> tuple[Any, ...]:
    """A write of a checkpoint's history (docs/history.md) without its bytes: a manifest holds
    the commit's time and the object's modification time, which differ from run to run."""
    history_writes = ("write_bytes", "write_bytes_if_absent", "commit")  # a manifest is created by the second
    if entry[0] in history_writes and isinstance(entry[1], str) and ".fcp-history/" in entry[1]:
        return (*entry[:2], "<history content>")
    return entry


def _comparable(entries: list[tuple[Any, ...]], ordered: bool) -> Any:
    entries = [_history(e) for e in entries]
    if ordered:
        return entries
    counted: Counter[tuple[Any, ...]] = Counter()
    polled: set[tuple[Any, ...]] = set()
    for entry in entries:
        if _coordination(entry) and entry[0] in _MARKER_READS:
            polled.add(entry)  # a follower polls as often as the timing gives
        elif _coordination(entry):
            counted[(*entry[:2], "<marker content>")] += 1  # carries the token, upload ids
        else:
            counted[entry] += 1
    return counted, polled


def _run(place: Place, name: str, inputs: Inputs, tmp: Path, debug: bool, caplog: Any) -> tuple[Any, Any]:
    fn, ordered = OPERATIONS[name]
    root = f"{place.root}/{uuid.uuid4().hex}"
    here = tmp / ("debug" if debug else "warning")
    here.mkdir()
    normalize = _normalizer(root, here)
    store = store_for(root)  # no level set on the library's loggers yet: the store itself
    assert not isinstance(store, LoggedStore)
    logger = logging.getLogger("flyte_checkpoint")
    saved = logger.level
    caplog.clear()
    cli_run = name.startswith("cli ")
    with recording(store, normalize) as calls:
        if not cli_run:
            logger.setLevel(logging.DEBUG if debug else logging.WARNING)
        try:
            assert isinstance(store_for(root), LoggedStore) == (debug and not cli_run)
            result = fn(Run(root, here, inputs, debug))
        finally:
            logger.setLevel(saved)
    if not cli_run:
        logged = [r for r in caplog.records if r.name == "flyte_checkpoint.store"]
        assert bool(logged) == debug, "DEBUG must wrap the store and WARNING must not"
    assert calls.entries, "no store call was recorded"
    if name == "incremental save" and store.copy_limits is not None:  # else nothing would tell
        assert any(p[0] == "copy" for e in calls.entries if e[0] == "commit" for p in e[2]), calls.entries
    return _comparable(calls.entries, ordered), summary(result, normalize)


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_debug_logging_makes_the_same_store_calls_and_sends_the_same_bytes(
    place: Place, operation: str, inputs: dict[str, Inputs], tmp_path: Path, caplog: Any
) -> None:
    """Proves: at DEBUG (and with the command line's --debug) each operation makes exactly the
    store calls it makes at WARNING, with the same written bytes and server-side copies, and
    returns the same result."""
    caplog.set_level(logging.DEBUG, logger="flyte_checkpoint.store")  # captured; the level is set below
    logging.getLogger("flyte_checkpoint.store").setLevel(logging.NOTSET)
    quiet_calls, quiet_result = _run(place, operation, inputs[place.name], tmp_path, False, caplog)
    debug_calls, debug_result = _run(place, operation, inputs[place.name], tmp_path, True, caplog)
    assert debug_result == quiet_result
    assert debug_calls == quiet_calls
