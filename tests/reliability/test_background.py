"""Background saves on every backend: round trips, loads during a save, SIGKILLs, forks, leaks.

- A background save of a folder loads back whole on file, S3, GCS and Azure; a load while it
  is held mid-upload (a gate on the spy store) sees the previous checkpoint whole.
- Crash: a child makes background saves of a folder whose content is a function of its
  version, pacing itself so some saves are superseded and some wait, and is SIGKILLed at a
  point of one of its uploads that it reports (tests/reliability/killpoints.py: the *n*-th
  writer, at its opening, a part boundary, the commit, or after it; *n* and the point drawn
  from a seeded random generator). The child logs what it knows as it goes (saves started,
  superseded, confirmed committed). After each kill the destination is loaded: it must be one
  version whole (no torn or mixed checkpoint), never a superseded one, never older than one
  confirmed committed, and never more than two saves old (at most two saves started after it
  were not superseded: the one in flight and the one waiting). ``KILLS_PER_BACKEND`` kills per
  backend in CI; ``FCP_BG_KILLS`` sets the total over the four backends (100 for the goal).
- Fork: a child forked while its parent's background upload is held saves in the background
  with the same ``Checkpoint`` (a lane of its own: no dead worker, no held lock).
- Leaks: cycles of ``save_background`` + ``close()`` leave no worker thread, staging folder,
  open upload (writers opened minus ended; S3 multipart uploads) or file descriptor.

Run with ``-s`` to see one summary line per backend.
"""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import flyte_checkpoint as fc
from flyte_checkpoint.lifecycle.background import THREAD_NAME
from flyte_checkpoint.lifecycle.snapshot import PREFIX
from flyte_checkpoint.uri import scheme_of
from tests.reliability import backends
from tests.reliability.backends import Backend, s3_open_uploads
from tests.reliability.gates import HANG, Gate
from tests.reliability.killpoints import WRITER_ENV, kill_at
from tests.reliability.trees import loaded, make_tree
from tests.spystore import spying

backend = backends.backend
backend_pool = backends.backend_pool

ROOT = Path(__file__).resolve().parents[2]
#: Kills per backend (CI); ``FCP_BG_KILLS`` is the total over the four backends.
KILLS_PER_BACKEND = max(1, int(os.environ.get("FCP_BG_KILLS", "4")) // 4)
#: Background saves each crash child makes.
SAVES = 8
#: save_background + close cycles (file backend; the clouds run ``CLOUD_CYCLES``).
CYCLES = int(os.environ.get("FCP_BG_LEAK_CYCLES", "150"))
CLOUD_CYCLES = int(os.environ.get("FCP_BG_LEAK_CLOUD_CYCLES", "15"))

#: The files of version ``v`` of the crash tree: name -> size (content from ``content``).
FILES = {"model.bin": 400 * 1024, "optim.bin": 200 * 1024, "meta.json": 0}


def content(name: str, version: int) -> bytes:
    if name == "meta.json":
        return f'{{"version": {version}}}'.encode()
    return random.Random(f"{name}-{version}").randbytes(FILES[name])


def write_version(folder: Path, version: int) -> None:
    folder.mkdir(exist_ok=True)
    for name in FILES:
        (folder / name).write_bytes(content(name, version))


CRASH_SCRIPT = r"""
import os, sys
from pathlib import Path
from tests.reliability import killpoints
from tests.reliability.test_background import write_version

dest, work, saves = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
killpoints.arm(dest)
import flyte_checkpoint as fc

log = os.open(work / "progress.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
note = lambda line: os.write(log, (line + "\n").encode())
tree = work / "tree"
cp = fc.Checkpoint(dest)
handles, reported, live = {}, set(), []
for v in range(1, saves + 1):
    write_version(tree, v)
    handles[v] = cp.save_background(tree)
    for w, h in handles.items():  # superseded ones first: a kill between leaves fewer counted
        if h.superseded and w not in reported:
            reported.add(w)
            note(f"superseded {w}")
            live.remove(w)
    note(f"started {v}")
    live.append(v)
    if v % 2 == 0 and len(live) >= 2:  # every other step waits for the save before the newest
        handles[live[-2]].result()
        note(f"committed {live[-2]}")
cp.wait()
note(f"committed {live[-1]}")
cp.close()
killpoints.reach("saved")
killpoints.done()
"""


def version_loaded(dest: str, scratch: Path) -> int | None:
    """The version the destination holds, checked whole: every file is that version's."""
    snap = loaded(dest, scratch)
    if snap is None:
        return None
    meta = [name for name in snap if name == "meta.json"]
    assert meta, f"no meta.json in {sorted(snap)}"
    with fc.Checkpoint(str(scratch / "again"), dest) as cp:
        path = cp.load_sync()
        assert path is not None
        version = int((path / "meta.json").read_text().split(":")[1].strip(" }"))
        for name in FILES:
            got = hashlib.sha256((path / name).read_bytes()).hexdigest()
            want = hashlib.sha256(content(name, version)).hexdigest()
            assert got == want, f"{name} is not version {version}'s: a torn or mixed checkpoint"
    assert sorted(snap) == sorted(FILES), sorted(snap)
    return version


def crash_points(backend: str) -> list[str]:
    part = 320 * 1024 if backend == "azure" else 256 * 1024
    return ["open", f"bytes:{part}", f"bytes:{2 * part}", "commit", "committed"]


def test_sigkill_during_background_saves_leaves_a_whole_recent_checkpoint(backend: Backend, tmp_path: Path):
    """Proves (issue 17 goal): SIGKILLed at drawn points inside drawn uploads of a run of
    background saves, on every backend, the destination holds one version whole, never a
    superseded one, never older than one confirmed committed, at most two saves old."""
    rng = random.Random(f"bg-crash-{backend.name}")
    log = tmp_path / "children.log"
    kills, finished, ages = 0, 0, []
    attempts = 0
    while kills < KILLS_PER_BACKEND:
        attempts += 1
        assert attempts <= 4 * KILLS_PER_BACKEND + 4, "too few children reached their point"
        work = tmp_path / f"run{attempts}"
        work.mkdir()
        dest = backend.fresh("bg")
        writer, point = rng.randint(1, SAVES // 2 + 1), rng.choice(crash_points(backend.name))
        env = backend.child_env(**{WRITER_ENV: str(writer)})
        kill = kill_at(point, CRASH_SCRIPT, [dest, str(work), str(SAVES)], env, log)
        progress = (work / "progress.log").read_text().split()
        events = list(zip(progress[::2], map(int, progress[1::2]), strict=True))
        started = [v for e, v in events if e == "started"]
        superseded = {v for e, v in events if e == "superseded"}
        committed = max((v for e, v in events if e == "committed"), default=0)
        got = version_loaded(dest, work)
        if kill.finished:
            finished += 1
            assert got == started[-1] == SAVES, (got, events)
            continue
        kills += 1
        where = f"killed at {point!r} of writer {writer} ({events})"
        assert got is None or got not in superseded, f"a superseded save was stored: {where}"
        assert (got or 0) >= committed, f"the checkpoint is older than one confirmed committed: {where}"
        newer = [v for v in started if v > (got or 0) and v not in superseded]
        assert len(newer) <= 2, f"{got} is more than two saves old: {where}"
        ages.append(len(newer))
    print(
        f"\nbackground crash[{backend.name}]: {kills} SIGKILLs inside background saves"
        f" ({finished} children finished before their point): 0 torn or mixed; saves newer than the"
        f" one loaded (not superseded): {dict(sorted((a, ages.count(a)) for a in set(ages)))}"
    )


def test_a_background_save_round_trips_and_loads_during_it_see_the_previous_whole(
    backend: Backend, tmp_path: Path
):
    """Proves: on every backend, a load while a background save of a folder is held mid-upload
    restores the previous checkpoint whole; once the save has ended it loads the new tree whole
    (S3 leaves no multipart upload open)."""
    real = backend.fresh("bg-load")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    old = make_tree(tmp_path / "v1", 1)
    fc.Checkpoint(real).save_sync(tmp_path / "v1")
    new = make_tree(tmp_path / "v2", 2)
    gate = Gate(writes=3)
    with spying(scheme_of(real), gate.hook) as spy:
        cp = fc.Checkpoint(spy.uri_for(real))
        handle = cp.save_background(tmp_path / "v2")
        gate.wait_reached()
        assert loaded(real, scratch) == old
        gate.release.set()
        handle.result(timeout=HANG)
        cp.close()
    assert loaded(real, scratch) == new
    if backend.name == "s3":
        assert s3_open_uploads(backend, real) == []


FORK_SCRIPT = r"""
import multiprocessing, os, sys, threading
from pathlib import Path
import flyte_checkpoint as fc
from flyte_checkpoint.lifecycle.background import THREAD_NAME

dest, child_dest, work, hang = sys.argv[1], sys.argv[2], Path(sys.argv[3]), float(sys.argv[4])
inside, hold = threading.Event(), threading.Event()


def held(done, total):
    # The progress callback runs in the worker: the first call with bytes holds the upload.
    if done and not hold.is_set():
        inside.set()
        hold.wait()


(work / "tree").mkdir()
(work / "tree" / "a.bin").write_bytes(os.urandom(300_000))
cp = fc.Checkpoint(dest, progress=held)
parent_save = cp.save_background(work / "tree")
assert inside.wait(hang)


def child():
    hold.set()  # this process's copy: the child's own upload is not held
    handle = cp.save_background(b"from the child")
    handle.result(timeout=hang)
    cp.wait(timeout=hang)
    cp.close()
    other = fc.Checkpoint(child_dest)
    other.save_background(b"child's own").result(timeout=hang)
    other.close()
    assert [t for t in threading.enumerate() if t.name == THREAD_NAME] == []
    os._exit(0)


proc = multiprocessing.get_context("fork").Process(target=child)
proc.start()
proc.join(hang)
print(f"child {proc.exitcode}", flush=True)
hold.set()
parent_save.result(timeout=hang)
cp.close()
print("parent saved", flush=True)
"""


def test_a_forked_child_saves_in_the_background_while_the_parents_upload_is_held(tmp_path: Path):
    """Proves: a child forked while the parent's background upload is held inside its worker
    saves in the background with the same ``Checkpoint`` (its own lane, no dead worker, no held
    lock) and with a new one, and ends with no worker thread; the parent's save then commits."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    dest, child_dest = str(tmp_path / "parent.obj"), str(tmp_path / "child.obj")
    done = subprocess.run(
        [sys.executable, "-c", FORK_SCRIPT, dest, child_dest, str(tmp_path), str(HANG)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=5 * HANG,
    )
    assert done.stdout.splitlines() == ["child 0", "parent saved"], done.stdout + done.stderr[-3000:]
    with fc.Checkpoint(str(tmp_path / "unused"), child_dest) as cp:
        path = cp.load_sync()
        assert path is not None and path.read_bytes() == b"child's own"
    with fc.Checkpoint(str(tmp_path / "unused2"), dest) as cp:
        path = cp.load_sync()
        assert path is not None and (path / "a.bin").stat().st_size == 300_000


def counts(places: list[Path]) -> dict[str, int]:
    files = 0  # open descriptors other than sockets (a pool keeps some connections open)
    for name in os.listdir("/proc/self/fd"):
        try:
            files += not os.readlink(f"/proc/self/fd/{name}").startswith("socket:")
        except FileNotFoundError:  # the listing's own descriptor
            continue
    return {
        "workers": sum(t.name == THREAD_NAME for t in threading.enumerate()),
        "staging": sum(1 for p in places for _ in p.glob(PREFIX + "*"))
        + sum(1 for _ in Path(tempfile.gettempdir()).glob("flyte-checkpoint-ws-*/" + PREFIX + "*")),
        "workspaces": sum(1 for _ in Path(tempfile.gettempdir()).glob("flyte-checkpoint-ws-*")),
        "fds": files,
    }


def test_save_background_and_close_cycles_leave_nothing_behind(backend: Backend, tmp_path: Path, monkeypatch):
    """Proves (issue 17 goal): cycles of ``save_background`` of a folder and ``close()`` leave no
    worker thread, staging folder, workspace, open upload (writers opened and not ended, and S3
    multipart uploads) or file descriptor (counted after a warm-up; CYCLES on file, CLOUD_CYCLES
    on the clouds; FCP_BG_LEAK_CYCLES / FCP_BG_LEAK_CLOUD_CYCLES raise them)."""
    cycles = CYCLES if backend.name == "file" else CLOUD_CYCLES
    private = tmp_path / "tmp"  # workspaces are counted here, away from other processes'
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    real = backend.fresh("leak")
    folder = tmp_path / "model"
    write_version(folder, 1)
    opened = {"open_write": 0, "ended": 0}

    def hook(op: str, uri: str) -> None:
        if ".fcp-history/" in uri:  # a save's manifest and summary (docs/history.md): not its upload
            return
        if op in ("open_write", "write_bytes", "upload_file"):
            opened["open_write"] += 1
        if op in ("commit", "abort", "write_bytes", "upload_file"):
            opened["ended"] += 1

    places = [tmp_path, private, *private.glob("flyte-checkpoint-ws-*")]
    with spying(scheme_of(real), hook) as spy:
        dest = spy.uri_for(real)
        for i in range(cycles + 5):
            if i == 5:
                before = counts(places)  # after a warm-up: the store, its pools, its connections
            cp = fc.Checkpoint(dest)
            cp.save_background(folder if i % 2 else str(i).encode())
            cp.close()
        after = counts(places)
    assert after["workers"] == before["workers"] == 0
    assert after["staging"] == before["staging"] == 0
    assert after["workspaces"] == before["workspaces"]
    assert after["fds"] <= before["fds"], (before, after)
    assert opened["open_write"] == opened["ended"] == cycles + 5
    if backend.name == "s3":
        assert s3_open_uploads(backend, real) == []
    print(f"\nbackground leaks[{backend.name}]: {cycles} save_background/close cycles: {before} -> {after}")
