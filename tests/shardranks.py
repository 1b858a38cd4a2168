"""Run a sharded save as real processes: one child per rank, coordinated through the environment.

Each child (:data:`CHILD`) saves its folder with ``save_sharded`` under ``RANK`` and
``WORLD_SIZE`` and prints ``OK`` or ``ERR <message>``. A child told to stop at a step of the
save (``"stop": "segment"``, see :mod:`flyte_checkpoint.sharded.coordinate`) prints
``AT <step>`` there and waits to be killed, so a kill lands where the code's own progress
put it, never after a delay. ``"fail": true`` makes its segment fail (an unreadable file).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, json.dumps(job)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env=child_env,
            cwd=ROOT,
        )
        ranks.append(Rank(rank, proc, Lines(proc.stdout)))  # type: ignore[arg-type]
    return ranks


def finish(ranks: list[Rank]) -> list[str]:
    """Each child's last line (``""`` for one that was killed), once all have ended; a child
    that prints nothing within the hang guard fails the test, and every child is killed then."""
    out = []
    try:
        for r in ranks:
            last = ""
            while (line := r.lines.next(f"rank {r.rank}")) != "":
                last = line
            r.proc.wait()
            out.append(last)
    except BaseException:
        for r in ranks:
            if r.proc.poll() is None:
                r.proc.kill()
        raise
    return out


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
#: ``FAIL_RANK`` names a rank whose segment fails.
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
    save_sharded(dest, prefix + str(rank))
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
