"""Run a sharded save as real processes: one child per rank, coordinated through the environment.

Each child (:data:`CHILD`) saves its folder with ``save_sharded`` under ``RANK`` and
``WORLD_SIZE`` and prints ``OK`` or ``ERR <message>``. A child told to stop at a step of the
save (``"stop": "segment"``, see :mod:`flyte_checkpoint.sharded.coordinate`) prints
``AT <step>`` there and waits to be killed, so a kill lands where the code's own progress
put it, never after a delay. ``"fail": true`` makes its segment fail (an unreadable file).

Each child's stderr goes to a temporary file of its own (never a pipe nobody reads, which a
child's warnings could fill and block it on). When a child hangs (the hang guard, or the test's
timeout, interrupts :func:`finish` or :meth:`Actor.next`), it gets SIGABRT, which makes
``faulthandler`` write every thread's stack there, and that stderr is shown: in the guard's
error, and on the test's captured stderr. A child that ends without ``OK`` (an error, a crash,
a kill) has its stderr written to the test's captured stderr too, which pytest shows when the
test fails.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tests.childlines import Lines

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, sys, threading
job = json.loads(sys.argv[1])
from flyte_checkpoint.sharded import coordinate, save_sharded

rank = int(os.environ["RANK"])
if job.get("stop"):
    def stop(r, step):
        if r == rank and step == job["stop"]:
            print("AT", step, flush=True)
            threading.Event().wait()
    coordinate.observers.append(stop)
if job.get("fail"):
    def fail(r, step):
        if r == rank and step == "packing":
            raise OSError("this rank's disk is on fire")
    coordinate.observers.append(fail)
try:
    save_sharded(job["dest"], job["folder"], timeout=job.get("timeout"))
except Exception as exc:
    print("ERR", type(exc).__name__, str(exc).replace(chr(10), " "), flush=True)
else:
    print("OK", flush=True)
"""


@dataclass
class Rank:
    rank: int
    proc: subprocess.Popen
    lines: Lines
    #: The child's stderr (a temporary file; see the module docstring).
    stderr: IO[bytes] | None = None


#: How long a hung child is given to write its stacks after SIGABRT, before SIGKILL (a guard).
ABORT_GRACE = 30.0


def child_stderr(file: IO[bytes] | None) -> str:
    """What a child wrote to its stderr file so far."""
    if file is None or file.closed:
        return ""
    file.flush()
    file.seek(0)
    return file.read().decode(errors="replace")


def abort(proc: subprocess.Popen) -> None:
    """End a child that may hang: SIGABRT (``PYTHONFAULTHANDLER=1`` makes it write every
    thread's stack to its stderr first), then SIGKILL if it is still there after
    :data:`ABORT_GRACE` seconds."""
    if proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGABRT)
        proc.wait(ABORT_GRACE)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def stderr_report(what: str, code: int | None, last: str, file: IO[bytes] | None) -> str:
    """A child's stderr under a heading that names it, its exit status and its last line."""
    text = child_stderr(file).rstrip()
    return (
        f"----- {what}: exit status {code}, last line {last!r}; its stderr"
        f" ({'empty' if not text else f'{len(text)} characters'}):\n{text}\n----- end of {what}'s stderr"
    )


def show(text: str) -> None:
    """Write ``text`` to the test's stderr (captured; pytest shows it when the test fails)."""
    print(text, file=sys.stderr, flush=True)


def start(
    dest: str,
    folders: list[Path],
    *,
    env: dict[str, str] | None = None,
    world: int | None = None,
    only: set[int] | None = None,
    **per_rank: dict,
) -> list[Rank]:
    """Start one child per folder (or for the ranks in ``only``), in a job of ``world`` ranks
    (default: one per folder); ``per_rank`` maps a job key to {rank: value} (``stop``, ``fail``,
    ``timeout``)."""
    ranks = []
    for rank, folder in enumerate(folders):
        if only is not None and rank not in only:
            continue
        job = {"dest": dest, "folder": str(folder)}
        for key, values in per_rank.items():
            if rank in values:
                job[key] = values[rank]
        child_env = {**os.environ, **(env or {}), "RANK": str(rank), "WORLD_SIZE": str(world or len(folders))}
        child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), child_env.get("PYTHONPATH")]))
        child_env["PYTHONFAULTHANDLER"] = "1"  # SIGABRT writes every thread's stack to stderr
        err = tempfile.TemporaryFile()  # noqa: SIM115 - read and closed by finish/kill_all
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, json.dumps(job)],
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=child_env,
            cwd=ROOT,
        )
        ranks.append(Rank(rank, proc, Lines(proc.stdout), err))  # type: ignore[arg-type]
    return ranks


def finish(ranks: list[Rank]) -> list[str]:
    """Each child's last line (``""`` for one that was killed), once all have ended; a child
    that prints nothing within the hang guard fails the test, and every child is ended then
    (SIGABRT: its stacks), its stderr in the error. The stderr of a child whose last line is
    not ``OK`` is written to the test's captured stderr."""
    out = [""] * len(ranks)  # each child's last line so far
    try:
        for i, r in enumerate(ranks):
            while (line := r.lines.next(f"rank {r.rank}")) != "":
                out[i] = line
            r.proc.wait()
    except BaseException as exc:  # the hang guard, or the test's timeout (pytest-timeout)
        for r in ranks:
            abort(r.proc)
        reports = "\n".join(
            stderr_report(f"rank {r.rank}", r.proc.returncode, last, r.stderr)
            for r, last in zip(ranks, out, strict=True)
        )
        show(reports)
        close(ranks)
        if isinstance(exc, AssertionError):
            raise AssertionError(f"{exc}\n{reports}") from exc
        raise
    for r, last in zip(ranks, out, strict=True):
        if not last.startswith("OK") or r.proc.returncode != 0:
            show(stderr_report(f"rank {r.rank}", r.proc.returncode, last, r.stderr))
    close(ranks)
    return out


def close(ranks: list[Rank]) -> None:
    """Close the children's stderr files (their text is gone then)."""
    for r in ranks:
        if r.stderr is not None:
            r.stderr.close()


def run(dest: str, folders: list[Path], **kw) -> list[str]:
    return finish(start(dest, folders, **kw))


def kill_at(ranks: list[Rank], rank: int) -> bool:
    """Wait until ``rank`` reports its stop (True, then SIGKILL it) or ends without reaching it."""
    r = ranks[rank]
    line = r.lines.next(f"rank {rank}")
    if line.startswith("AT "):
        os.kill(r.proc.pid, signal.SIGKILL)
        return True
    return False


def kill_all(ranks: list[Rank]) -> None:
    """SIGKILL every child still running, and reap them."""
    for r in ranks:
        if r.proc.poll() is None:
            r.proc.kill()
        r.proc.wait()
    close(ranks)


#: A rank that makes several calls of save_sharded in turn (``job["saves"]``: each a folder, and
#: optionally a timeout and ``world``, its WORLD_SIZE), printing ``OK <n>`` or ``ERR <n> <message>``
#: after call n. At each step named in ``job["pause"]`` (``"<step>@<n>"``) it prints ``AT <step>@<n>``
#: and waits for a line on stdin: the test moves it on when the others reached their points.
ACTOR = r"""
import json, os, sys
job = json.loads(sys.argv[1])
from flyte_checkpoint.sharded import coordinate, save_sharded

rank = int(os.environ["RANK"])
call = [0]
def pause(r, step):
    if r == rank and f"{step}@{call[0]}" in job.get("pause", ()):
        print("AT", f"{step}@{call[0]}", flush=True)
        sys.stdin.readline()
coordinate.observers.append(pause)
for n, save in enumerate(job["saves"], 1):
    call[0] = n
    if "world" in save:
        os.environ["WORLD_SIZE"] = str(save["world"])
    try:
        save_sharded(job["dest"], save["folder"], timeout=save.get("timeout", 60))
    except Exception as exc:
        print("ERR", n, type(exc).__name__, str(exc).replace(chr(10), " "), flush=True)
    else:
        print("OK", n, flush=True)
"""


class Actor:
    """One rank process running :data:`ACTOR`: its lines read one at a time, moved on from its
    pauses by :meth:`go`. Its stderr goes to a temporary file, shown when it hangs or fails
    (see the module docstring)."""

    def __init__(
        self, dest: str, rank: int, saves: list[dict], *, pause: tuple[str, ...] = (), env=None
    ) -> None:
        from tests.childlines import Child

        child_env = {**os.environ, **(env or {}), "RANK": str(rank), "WORLD_SIZE": "1"}
        child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), child_env.get("PYTHONPATH")]))
        saves = [{**s, "folder": str(s["folder"])} for s in saves]
        job = {"dest": dest, "saves": saves, "pause": list(pause)}
        self.rank = rank
        self.last = ""
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed by actors_end
        # Child sets PYTHONFAULTHANDLER=1: SIGABRT writes every thread's stack to the file.
        self.child = Child(
            [sys.executable, "-c", ACTOR, json.dumps(job)], child_env, ROOT, stderr=self.stderr
        )

    def report(self) -> str:
        return stderr_report(f"rank {self.rank} (actor)", self.child.proc.poll(), self.last, self.stderr)

    def next(self) -> str:
        """The next line the rank printed (``""`` once it ended). A rank that prints nothing
        within the hang guard (or the test's timeout) is ended with SIGABRT, and the error
        carries its stderr (its stacks)."""
        try:
            line = self.child.next()
        except BaseException as exc:
            abort(self.child.proc)
            text = self.report()
            show(text)
            if isinstance(exc, AssertionError):
                raise AssertionError(f"{exc}\n{text}") from exc
            raise
        self.last = line or self.last
        return line

    def at(self, point: str) -> None:
        """Wait until the rank reports that it reached ``point`` (``"<step>@<n>"``)."""
        line = self.next()
        assert line == f"AT {point}", f"rank {self.rank} printed {line!r}, not AT {point}\n{self.report()}"

    def go(self) -> None:
        self.child.say()

    def end(self) -> None:
        try:
            code, rest = self.child.end()
        except AssertionError as exc:  # it did not end: Child.end sent SIGABRT (its stacks)
            raise AssertionError(f"{exc}\n{self.report()}") from exc
        assert code == 0 and rest.strip() == "", (code, rest, self.report())


def actors_end(*actors: Actor) -> None:
    """End every actor, killing those still running, even after a failed assertion (then with
    SIGABRT first: their stacks). After a failure, every actor's stderr goes to the test's
    captured stderr (shown when the test fails); otherwise that of an actor that ended with an
    exit status other than 0 on its own."""
    failing = sys.exc_info()[0] is not None  # called from a ``finally`` of a failing test
    for actor in actors:
        running = actor.child.proc.poll() is None
        if running:
            if failing:
                abort(actor.child.proc)
            else:
                actor.child.proc.kill()
        actor.child.end()
        if failing or (not running and actor.child.proc.returncode != 0):
            show(actor.report())
        actor.stderr.close()


def make_folders(root: Path, world: int, *, tag: str = "a", size: int = 100_000) -> list[Path]:
    """One folder per rank, laid out as torch.distributed.checkpoint writes (rank 0 has .metadata),
    with a shared subfolder; file contents carry ``tag`` so two saves are told apart."""
    folders = []
    for rank in range(world):
        folder = root / f"{tag}-rank{rank}"
        (folder / "extra").mkdir(parents=True, exist_ok=True)
        (folder / f"__{rank}_0.distcp").write_bytes((tag.encode() + os.urandom(64)) * (size // 66 + rank))
        (folder / "extra" / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "tag": tag}))
        if rank == 0:
            (folder / ".metadata").write_text(tag)
        folders.append(folder)
    return folders


def folders_of(root: Path, trees: list[dict[str, bytes]], name: str = "r{rank}") -> list[Path]:
    """A folder per rank under ``root`` (``name`` formatted with its rank) holding its tree's files."""
    folders = []
    for rank, files in enumerate(trees):
        folder = root / name.format(rank=rank)
        folder.mkdir()
        for file, data in files.items():
            (folder / file).write_bytes(data)
        folders.append(folder)
    return folders


def save_previous(uri: str, tmp: Path) -> None:
    """Save the previous checkpoint a failed save must leave: a folder holding ``prev``."""
    import flyte_checkpoint as fc

    prev = tmp / "prev"
    prev.mkdir()
    (prev / "prev").write_bytes(b"the previous checkpoint")
    with fc.Checkpoint(uri) as cp:
        cp.save_sync(prev)


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by relative name, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def union(folders: list[Path]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for folder in folders:
        out.update(tree(folder))
    return out


#: A torchrun worker: initializes gloo, saves ``<prefix><rank>`` to ``dest`` with save_sharded
#: (coordinated through torch.distributed), and writes ``OK`` or ``ERR <message>`` to the file
#: ``$RESULTS/rank<r>``.
#: ``FAIL_RANK`` names a rank whose segment fails; ``STEP_RANK`` a rank that names its save
#: ``step=1`` (the others count their calls).
TORCH_CHILD = r"""
import os, sys
import torch.distributed as dist
from flyte_checkpoint.sharded import coordinate, save_sharded

dest, prefix = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
rank = dist.get_rank()
if os.environ.get("FAIL_RANK") == str(rank):
    def fail(r, step):
        if step == "packing":
            raise OSError("this rank's disk is on fire")
    coordinate.observers.append(fail)
try:
    save_sharded(dest, prefix + str(rank), step=1 if os.environ.get("STEP_RANK") == str(rank) else None)
except Exception as exc:
    result = " ".join(["ERR", type(exc).__name__, str(exc).replace(chr(10), " ")])
else:
    result = "OK"
with open(os.environ["RESULTS"] + f"/rank{rank}", "w") as f:  # torchrun mixes the ranks' stdout
    f.write(result)
dist.destroy_process_group()
"""


def torchrun(
    dest: str, prefix: str, tmp: Path, world: int = 4, env: dict[str, str] | None = None
) -> dict[int, str]:
    """Run :data:`TORCH_CHILD` under torchrun (``world`` CPU ranks); each rank's result line."""
    script = tmp / "torch_child.py"
    script.write_text(TORCH_CHILD)
    folder = tmp / f"results-{uuid.uuid4().hex}"
    folder.mkdir()
    child_env = {**os.environ, **(env or {}), "OMP_NUM_THREADS": "1", "RESULTS": str(folder)}
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), child_env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}"]
    out = subprocess.run(
        [*cmd, str(script), dest, prefix],
        capture_output=True,
        text=True,
        env=child_env,
        timeout=600,
        cwd=ROOT,
    )
    results = {r: (folder / f"rank{r}").read_text() for r in range(world) if (folder / f"rank{r}").exists()}
    assert len(results) == world, out.stdout + out.stderr
    return results


def check_gathered(dest: str, tmp: Path) -> None:
    """On a store without the sharded capability: 4 rank processes save one object of the union
    (gathered by rank 0), a failing rank commits nothing, and after the next save no temporary
    piece is left under the coordination prefix."""
    import flyte_checkpoint as fc
    from flyte_checkpoint.storage.registry import store_for

    def restored() -> dict[str, bytes]:
        with fc.Checkpoint(str(tmp / "next"), dest) as cp:
            return tree(cp.load_sync())  # type: ignore[arg-type]

    first = make_folders(tmp, 4, tag="first")
    assert run(dest, first) == ["OK"] * 4
    assert restored() == union(first)
    results = run(dest, make_folders(tmp, 4, tag="second"), fail={2: True})
    assert all("rank 2: OSError: this rank's disk is on fire" in r for r in results), results
    assert restored() == union(first)
    assert run(dest, first) == ["OK"] * 4
    assert [u for u in store_for(dest).list(dest + ".fcp-shard/") if ".piece-" in u] == []


def parallel_restore(dest: str, tmp: Path, monkeypatch: Any) -> dict[str, bytes]:
    """Our full load of ``dest`` with the parallel inflate forced (2 threads), checked to have
    taken that path."""
    import flyte_checkpoint as fc
    from flyte_checkpoint.format import inflate

    taken: list[bool] = []
    real = inflate.restore_indexed

    def spy(*args: Any, **kwargs: Any) -> bool:
        taken.append(real(*args, **kwargs))
        return taken[-1]

    monkeypatch.setattr(inflate, "restore_indexed", spy)
    monkeypatch.setenv(inflate.THREADS_ENV, "2")
    with fc.Checkpoint(str(tmp / "parallel"), dest) as cp:
        restored = tree(cp.load_sync())  # type: ignore[arg-type]
    assert taken == [True], "the load did not inflate in parallel"
    return restored


def tar_files(body: bytes) -> dict[str, bytes]:
    """The regular files of a (gzip) tar object, by name, read with ``tarfile``."""
    import io
    import tarfile

    out = {}
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        for m in tar.getmembers():
            if m.isfile():
                out[m.name] = tar.extractfile(m).read()  # type: ignore[union-attr]
    return out


def restore(uri: str, tmp: Path) -> dict[str, bytes]:
    """The tree a ``Checkpoint`` whose previous attempt saved ``uri`` restores."""
    import uuid

    import flyte_checkpoint as fc

    with fc.Checkpoint(str(tmp / f"next-{uuid.uuid4().hex}"), uri) as cp:
        return tree(cp.load_sync())  # type: ignore[arg-type]


def check_random_kill(
    dest: str,
    tmp: Path,
    seed: int,
    read: Callable[[], dict[str, bytes]],
    leftovers: Callable[[], list[str]],
    world: int = 4,
) -> None:
    """Save ``a``; SIGKILL a rank chosen by ``seed`` at a step of saving ``b``; ``read()`` (the
    object's files) must then be ``a``'s union or ``b``'s, whole (``b``'s exactly when every rank
    had reported), and after the next save ``leftovers()`` (pieces, uploads) must be empty."""
    rng = random.Random(seed)
    a = make_folders(tmp, world, tag="a")
    b = make_folders(tmp, world, tag="b")
    assert run(dest, a) == ["OK"] * world
    victim = rng.randrange(world)
    steps = (
        ["session", "packing", "segment", "committing", "outcome"]
        if victim == 0
        else ["packing", "segment", "reported"]
    )
    point = rng.choice(steps)
    ranks = start(dest, b, stop={victim: point})
    assert kill_at(ranks, victim), f"rank {victim} never reached {point}"
    committed = point == ("outcome" if victim == 0 else "reported")  # see the file store's test
    if committed:
        assert [r for i, r in enumerate(finish(ranks)) if i != victim] == ["OK"] * (world - 1)
    else:
        kill_all(ranks)
    assert read() == union(b if committed else a), f"rank {victim} killed at {point}"
    assert run(dest, a) == ["OK"] * world
    assert read() == union(a)
    assert leftovers() == []


def torchrun_case(dest: str, tmp: Path, stored: Callable[[], dict[str, bytes]], world: int = 4) -> None:
    """torchrun ranks save one object; a second save whose rank 2 fails commits nothing."""
    folders = make_folders(tmp, world, tag="t")
    assert torchrun(dest, str(tmp / "t-rank"), tmp) == {r: "OK" for r in range(world)}
    assert stored() == union(folders)
    make_folders(tmp, world, tag="u")
    results = torchrun(dest, str(tmp / "u-rank"), tmp, env={"FAIL_RANK": "2"})
    assert all("rank 2: OSError" in r for r in results.values()), results
    assert stored() == union(folders)


#: A short lease, so that a rank proves rank 0 alive (a renewal seen) within a second.
SHORT_LEASE = {"FLYTE_CHECKPOINT_SHARD_LEASE": "3s"}


def save_threads(dest: str, folders: list[Path], **kw: Any) -> list[BaseException]:
    """Threads of this process as the ranks (rank= and world_size= given); their errors."""
    return [o for o in rank_outcomes(dest, folders, **kw) if isinstance(o, BaseException)]


def rank_outcomes(dest: str, folders: list[Path], *, timeout: float = 60, **kw: Any) -> list[object]:
    """Threads of this process as the ranks, each saving its folder (rank= and world_size=
    given; ``timeout`` and ``kw`` passed on): ``"ok"`` or the rank's error, by rank."""
    import threading

    from flyte_checkpoint.sharded import save_sharded

    outcomes: list[object] = [None] * len(folders)

    def rank(r: int) -> None:
        try:
            save_sharded(dest, folders[r], rank=r, world_size=len(folders), timeout=timeout, **kw)
            outcomes[r] = "ok"
        except BaseException as exc:  # returned to the test
            outcomes[r] = exc

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(len(folders))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def session_opened(dest: str, folder: Path, *, world: int = 2, env: dict[str, str] = SHORT_LEASE) -> Actor:
    """Rank 0 (``WORLD_SIZE=world``) started and held once its session is open (``AT packing@1``)."""
    r0 = Actor(dest, 0, [{"folder": folder, "world": world}], pause=("packing@1",), env=env)
    try:
        r0.at("packing@1")
    except BaseException:
        actors_end(r0)
        raise
    return r0


def check_world_mismatch(
    dest: str, tmp: Path, read: Callable[[], dict[str, bytes]], worlds: tuple[int, ...]
) -> None:
    """Issue 32, item 1: three ranks started with the WORLD_SIZEs ``worlds`` (rank 0's differs
    from another's). Rank 0 waits, once its session is open, until both others reported; then
    every rank raises, naming the world sizes, and the object is still the previous one."""
    before = make_folders(tmp, 2, tag="before")
    assert save_threads(dest, before) == []
    folders = make_folders(tmp, 3, tag="mixed")
    ranks = [session_opened(dest, folders[0], world=worlds[0])]
    try:
        for rank in (1, 2):
            ranks.append(
                Actor(
                    dest,
                    rank,
                    [{"folder": folders[rank], "world": worlds[rank]}],
                    env=SHORT_LEASE,
                    pause=("reported@1",),
                )
            )
            ranks[rank].at("reported@1")
        for actor in ranks:
            actor.go()
        results = [actor.next() for actor in ranks]
        assert all(r.startswith("ERR 1 ShardedSaveError") for r in results), results
        assert all("needs the same world size" in r and "Nothing was committed" in r for r in results), (
            results
        )
        assert all(f"sharded save to {dest} failed" in r for r in results), results
        assert read() == union(before)
    finally:
        actors_end(*ranks)


def check_late_rank(dest: str, tmp: Path, read: Callable[[], dict[str, bytes]]) -> None:
    """Issue 32, item 2: rank 0's save #1 times out (rank 1 not started) and it goes on to save
    #2; rank 1, started then, is in its call for save #1: it must raise (out of step), not join
    save #2 with its step-1 folder. Its next call joins save #2: both return, the object is
    step 2's union."""
    one, two = make_folders(tmp, 2, tag="step1"), make_folders(tmp, 2, tag="step2")
    r0 = Actor(
        dest,
        0,
        [{"folder": one[0], "world": 2, "timeout": 1}, {"folder": two[0], "world": 2}],
        pause=("packing@2",),
        env=SHORT_LEASE,
    )
    r1 = None
    try:
        first = r0.next()
        assert first.startswith("ERR 1 ShardedSaveError") and "rank 1 did not report within 1s" in first, (
            first
        )
        r0.at("packing@2")
        r1 = Actor(dest, 1, [{"folder": one[1], "world": 2}, {"folder": two[1], "world": 2}], env=SHORT_LEASE)
        r0.go()
        late = r1.next()
        assert late.startswith("ERR 1 ShardedSaveError"), late
        assert "rank 1: rank 0 is at save #2, this rank at save #1: the ranks are out of step" in late, late
        assert dest in late and "Nothing was committed by this call" in late, late
        assert (r0.next(), r1.next()) == ("OK 2", "OK 2")
        assert read() == union(two)
    finally:
        actors_end(r0, *([r1] if r1 else []))


def check_two_jobs(dest: str, tmp: Path, read: Callable[[], dict[str, bytes]]) -> None:
    """Issue 32, item 3: job A's rank 0 opens its save; job B's rank 0 (another
    FLYTE_CHECKPOINT_JOB) must refuse, naming A's session, and B's rank 1 raise with it; A's
    rank 1 joins A's save, which commits A's union alone."""
    a, b = make_folders(tmp, 2, tag="jobA"), make_folders(tmp, 2, tag="jobB")
    env_a, env_b = {**SHORT_LEASE, "FLYTE_CHECKPOINT_JOB": "A"}, {**SHORT_LEASE, "FLYTE_CHECKPOINT_JOB": "B"}
    a0 = session_opened(dest, a[0], env=env_a)
    started = [a0]
    try:
        b0 = Actor(dest, 0, [{"folder": b[0], "world": 2}], pause=("packing@1",), env=env_b)
        started.append(b0)
        refused = b0.next()
        assert refused.startswith("ERR 1 ShardedSaveError"), refused
        assert (
            f"rank 0: another sharded save is in progress at {dest} (job 'A', save #1 of 2 ranks" in refused
        )
        assert (
            "two jobs must not save to one URI at once" in refused
            and "previous checkpoint is unchanged" in refused
        )
        b1 = Actor(dest, 1, [{"folder": b[1], "world": 2}], env=env_b)
        a1 = Actor(dest, 1, [{"folder": a[1], "world": 2}], env=env_a, pause=("reported@1",))
        started += [b1, a1]
        told = b1.next()
        assert told.startswith("ERR 1 ShardedSaveError"), told
        assert (
            "rank 1: rank 0 of this job did not begin save #1: rank 0: another sharded save is in progress"
            in told
        )
        a1.at("reported@1")
        a1.go()
        a0.go()
        assert (a0.next(), a1.next()) == ("OK 1", "OK 1")
        assert read() == union(a)
    finally:
        actors_end(*started)


def check_empty_files_at_the_edges(dest: str, tmp: Path) -> None:
    """Each rank's ``load_sharded(own=True)`` restores exactly its own folder when empty files
    sit at the edges of the ranks' segments: saved last by rank 0, alone by rank 1 (its data
    "starts" where the segment ends, which is where the next one begins). Issue 32's mutant of
    ``own_files`` (``low <= x < high``) moved each to the next rank."""
    import flyte_checkpoint as fc
    from flyte_checkpoint.format.index import read_index
    from flyte_checkpoint.sharded import load_sharded
    from flyte_checkpoint.sharded.api import own_files
    from flyte_checkpoint.storage.registry import store_for

    layout = [{"a": b"a" * 1000, "zz-last": b""}, {"only-empty": b""}, {"m": b"m" * 10, "zz-end": b""}]
    folders = folders_of(tmp, layout, "edges-rank{rank}")
    assert save_threads(dest, folders) == []
    index = read_index(store_for(dest), dest)
    assert index is not None
    owned = [own_files(index, rank) for rank in range(3)]
    assert owned == [sorted(files) for files in layout], owned
    for rank, folder in enumerate(folders):
        with fc.Checkpoint(str(tmp / f"edges-next{rank}"), dest) as cp:
            assert tree(load_sharded(cp, own=True, rank=rank)) == tree(folder)  # type: ignore[arg-type]


def check_outside_rank_after_the_commit(dest: str, tmp: Path, read: Callable[[], dict[str, bytes]]) -> None:
    """Issue 32, item 1, as the issue saw it: rank 2 started with WORLD_SIZE=3 joins the save of
    ranks 0 and 1 (WORLD_SIZE=2) but reports after rank 0 committed: it must raise (its files
    are not in the object), where it returned normally before."""
    folders = make_folders(tmp, 3, tag="outside")
    r0 = session_opened(dest, folders[0])
    started = [r0]
    try:
        r2 = Actor(dest, 2, [{"folder": folders[2], "world": 3}], pause=("session@1",), env=SHORT_LEASE)
        started.append(r2)
        r2.at("session@1")  # it took rank 0's session
        r1 = Actor(dest, 1, [{"folder": folders[1], "world": 2}], env=SHORT_LEASE)
        started.append(r1)
        r0.go()
        assert (r0.next(), r1.next()) == ("OK 1", "OK 1")
        r2.go()
        late = r2.next()
        assert late.startswith("ERR 1 ShardedSaveError"), late
        assert (
            f"rank 2: rank 0 committed the sharded save to {dest} without this rank (rank 2 was started"
            in late
        )
        assert "WORLD_SIZE=3, rank 0 with 2" in late and "This call's files are not in the checkpoint" in late
        assert read() == union(folders[:2])
    finally:
        actors_end(*started)


def check_two_processes_as_one_rank(dest: str, tmp: Path, read: Callable[[], dict[str, bytes]]) -> None:
    """Two jobs with no name save to one URI at once, each with a rank 1 at the same save: when
    both report before rank 0 decides, the save fails on every rank, naming both processes;
    when the second reports after rank 0 committed the first's part, it raises instead of
    returning (the object holds the first's files, not its)."""
    before = make_folders(tmp, 2, tag="before")
    assert save_threads(dest, before) == []
    ours, theirs = make_folders(tmp, 2, tag="ours"), make_folders(tmp, 2, tag="theirs")
    r0 = Actor(
        dest, 0, [{"folder": ours[0], "world": 2}] * 2, pause=("packing@1", "packing@2"), env=SHORT_LEASE
    )
    started = [r0]
    try:
        r0.at("packing@1")
        for folder, second in ((ours[1], ()), (theirs[1], ("session@2",))):
            started.append(
                Actor(
                    dest,
                    1,
                    [{"folder": folder, "world": 2}] * 2,
                    pause=("reported@1", *second),
                    env=SHORT_LEASE,
                )
            )
            started[-1].at("reported@1")
        r0, mine, other = started
        for actor in started:
            actor.go()
        results = [actor.next() for actor in started]
        assert all(r.startswith("ERR 1 ShardedSaveError") for r in results), results
        assert all("two processes reported as rank 1, on host" in r for r in results), results
        assert all("name each job (job= or FLYTE_CHECKPOINT_JOB)" in r for r in results), results
        assert read() == union(before)
        # Save #2: the other job's rank 1 joins, but reports only after rank 0 committed.
        r0.at("packing@2")
        other.at("session@2")
        r0.go()
        assert (r0.next(), mine.next()) == ("OK 2", "OK 2")
        other.go()
        late = other.next()
        assert late.startswith("ERR 2 ShardedSaveError"), late
        assert "with another process's part for rank 1" in late and "files are not in the checkpoint" in late
        assert read() == union(ours)
    finally:
        actors_end(*started)
