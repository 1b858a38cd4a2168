"""Forked children: they save and load normally, and never touch the parent's workspace.

Data-loader workers are started with ``multiprocessing``'s ``fork`` method: the child
inherits the parent's memory but only the thread that forked, so a thread pool without
threads, a lock held by a thread that is not there, a client sharing the parent's sockets.
Each scenario runs in a fresh interpreter (a script), so the test process itself never
forks while its servers' threads run. A child that hangs is a failure: the parent waits
:data:`HANG` seconds (a guard only), makes the child dump its threads' stacks
(``faulthandler`` on ``SIGUSR1``), kills it and reports the stacks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.reliability import backends
from tests.reliability.backends import Backend

backend = backends.backend
backend_pool = backends.backend_pool

ROOT = Path(__file__).resolve().parents[2]
#: Seconds a child (or the whole script) may take before it counts as hung.
HANG = float(os.environ.get("FCP_HANG", "120"))

#: The parent makes a multipart save and a load (so pools, clients and their connections
#: exist) and forks three children with multiprocessing: right after (the child saves a
#: small and a large multipart object with a new ``Checkpoint``, loads back, and checks that
#: its store's SDK client and pools are not the parent's); while a thread is inside
#: ``save_sync`` and another inside ``load_sync`` (held in their progress callbacks: the child
#: saves and loads with those same ``Checkpoint`` objects); and while a thread is inside the
#: registry, building a store under its lock (the child asks the registry for a store).
FORK_SCRIPT = r"""
import faulthandler, multiprocessing, os, signal, sys, threading, traceback
from pathlib import Path
import flyte_checkpoint as fc
from flyte_checkpoint.storage.registry import register_store, store_for
from tests.reliability.trees import loaded, make_tree

backend, dest, other = sys.argv[1:4]
work, hang = Path(sys.argv[4]), float(sys.argv[5])
tree = work / "tree"
want = make_tree(tree, 1)


def sdk_objects(store):
    # The objects that must be rebuilt in a child: the SDK client and the pools that hold threads.
    store = getattr(store, "inner", store)
    if backend == "s3":
        return [store.client.get(), store.pool.executor]
    if backend == "gcs":
        return [store.client.session, store.client.storage, store.pool.executor]
    if backend == "azure":
        from flyte_checkpoint_azure.uris import parse
        return [store.client.service(parse(dest)), store.pool.executor]
    return []


def in_child(body):
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    hold.set()  # this process's copy: the child's own transfers are not held
    try:
        body()
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)


def fork(body):
    # Run body in a child forked now: its exit code, or HUNG (after dumping its stacks).
    proc = multiprocessing.get_context("fork").Process(target=in_child, args=(body,))
    proc.start()
    proc.join(hang)
    if not proc.is_alive():
        return str(proc.exitcode)
    os.kill(proc.pid, signal.SIGUSR1)  # the child prints every thread's stack to stderr
    proc.join(5)
    proc.kill()
    proc.join()
    return "HUNG"


hold = threading.Event()
cp = fc.Checkpoint(dest, dest)
cp.save_sync(tree)  # multipart on every cloud backend at the tests' part sizes
assert cp.load_sync() is not None and loaded(dest, work) == want
# Kept, not their ids: once freed in the child, a parent's object's address (its id) may be
# reused by the child's own client.
inherited = sdk_objects(store_for(dest))


def transfers():
    # A small multipart object first: no more parts than the pool has idle workers (threads
    # that do not exist in the child), then a large one; each loaded back.
    fc.Checkpoint(other).save_sync(os.urandom(600 * 1024))
    fc.Checkpoint(other).save_sync(tree)
    assert loaded(other, work / "c1") == want
    now = sdk_objects(store_for(dest))
    assert not [o for o in now if any(o is p for p in inherited)], f"the child uses the parent's: {now}"


print(f"after-transfers {fork(transfers)}", flush=True)

# Now with one thread inside save_sync and one inside load_sync of one Checkpoint each.
inside, building = threading.Barrier(3), threading.Event()


def held(done, total):
    # A progress callback: the first call with bytes done holds its thread inside the transfer.
    if done and not hold.is_set():
        inside.wait()
        hold.wait()


saver = fc.Checkpoint(dest, dest, progress=held)
loader = fc.Checkpoint(other, dest, progress=held)
threads = [
    threading.Thread(target=saver.save_sync, args=(tree,), name="held-save"),
    threading.Thread(target=loader.load_sync, name="held-load"),
]
for t in threads:
    t.start()
inside.wait(hang)


def same_checkpoints():
    saver.save_sync(tree)
    assert loaded(dest, work / "c2") == want
    assert loader.load_sync() is not None


print(f"inside-save-and-load {fork(same_checkpoints)}", flush=True)


def slow_factory():
    # A store factory that holds its thread inside the registry (which builds it under its lock).
    building.set()
    hold.wait()
    from flyte_checkpoint.storage.stores.memory import MemoryStore

    return MemoryStore()


register_store("slow-factory", ("slowfactory",), slow_factory)
threads.append(threading.Thread(target=store_for, args=("slowfactory://x/y",), name="held-registry"))
threads[-1].start()
assert building.wait(hang)
print(f"inside-registry {fork(lambda: store_for(dest).stat(dest))}", flush=True)
hold.set()
for t in threads:
    t.join(hang)
"""


def run_script(script: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=5 * HANG,
    )


def test_a_forked_child_saves_and_loads_whatever_the_parent_was_doing(backend: Backend, tmp_path: Path):
    """Proves (issue 14, item 4): a child forked after a multipart transfer, while parent
    threads are inside ``save_sync`` and ``load_sync`` of one ``Checkpoint`` and inside the
    registry, saves and loads (with that same ``Checkpoint`` too) and gets its own SDK
    client and pools, on every backend. A hang fails with the child's stacks."""
    dest, other = backend.fresh("parent"), backend.fresh("child")
    done = run_script(FORK_SCRIPT, backend.child_env(), backend.name, dest, other, str(tmp_path), str(HANG))
    report = f"stdout:\n{done.stdout}\nstderr (a hung child's stacks):\n{done.stderr[-6000:]}"
    want = ["after-transfers 0", "inside-save-and-load 0", "inside-registry 0"]
    assert done.stdout.splitlines() == want, report
    assert done.returncode == 0, report


#: A parent makes a workspace, puts a file in it, and forks three children that each end
#: differently with their copy of the ``Checkpoint``; after each, the workspace must be whole.
WORKSPACE_SCRIPT = r"""
import gc, os, sys
import flyte_checkpoint as fc

cp = fc.Checkpoint(sys.argv[1])
workspace = cp.path
(workspace / "weights.bin").write_bytes(b"parent's state")
for how in ("exit", "drop", "close"):
    pid = os.fork()
    if pid == 0:
        if how == "exit":
            sys.exit(0)  # a normal interpreter exit: atexit runs the workspace's finalizer
        if how == "drop":
            del cp
            gc.collect()
        if how == "close":
            cp.close()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0, (how, status)
    kept = (workspace / "weights.bin").exists()
    print(f"{how} {'kept' if kept else 'removed'}", flush=True)
    if not kept:  # start again with a new workspace
        cp.close()
        workspace = cp.path
        (workspace / "weights.bin").write_bytes(b"parent's state")
root = workspace.parent
cp.close()
print(f"parent-close {'removed' if not root.exists() else 'kept'}", flush=True)
"""


def test_a_forked_child_never_removes_the_parents_workspace(tmp_path: Path):
    """Proves (issue 14, item 5): a child that exits, drops its copy of the ``Checkpoint`` or
    closes it leaves the parent's workspace (and the files in it) alone; the parent's own
    ``close()`` still removes it."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = run_script(WORKSPACE_SCRIPT, env, str(tmp_path / "dest"))
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines == ["exit kept", "drop kept", "close kept", "parent-close removed"], lines
    assert not list(tmp_path.glob("flyte-checkpoint-ws-*"))


#: A parent makes a workspace (its ``Checkpoint`` has loaded nothing yet) and puts a file in it;
#: a forked child loads with its copy of that ``Checkpoint``, checks what it got and exits.
CHILD_LOAD_SCRIPT = r"""
import os, sys
import flyte_checkpoint as fc

src, tree = sys.argv[1], sys.argv[2]
fc.Checkpoint(src).save_sync(tree)
cp = fc.Checkpoint(sys.argv[3], src)
workspace = cp.path
(workspace / "weights.bin").write_bytes(b"parent's state")
pid = os.fork()
if pid == 0:
    path = cp.load_sync()
    ok = path is not None and (path / "a.txt").read_bytes() == b"restored"
    print(f"child-loaded {'ok' if ok else path}", flush=True)
    cp.close()  # removes what this process made, and only that
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert status == 0, status
weights = workspace / "weights.bin"
kept = weights.exists() and weights.read_bytes() == b"parent's state"
print("parent's file", "kept" if kept else "removed", flush=True)
others = [p for p in workspace.parent.parent.glob("flyte-checkpoint-ws-*") if p != workspace.parent]
print("other workspaces", len(others), flush=True)
cp.close()
"""


def test_a_forked_child_that_loads_leaves_the_parents_workspace_as_it_was(tmp_path: Path):
    """Proves (found by the state machine): a child that loads with its copy of a ``Checkpoint``
    whose workspace the parent made restores into a workspace of its own; the parent's (and
    the file the parent put in it) stays as it was."""
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "a.txt").write_bytes(b"restored")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    args = [str(tmp_path / name) for name in ("src", "tree", "d")]
    done = run_script(CHILD_LOAD_SCRIPT, env, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "child-loaded ok",
        "parent's file kept",
        "other workspaces 0",
    ], done.stdout
