"""flyte_sharded_dcp: torch_sharded_dcp.py's 4 CPU ranks in a Flyte task: one sharded checkpoint;
a rank is killed, the task is retried, the ranks resume exactly. Two ways to run the task here.

The task is a flyteplugins-pytorch task (``Elastic(nnodes=1, nproc_per_node=4)``, gloo on CPU).
Each rank trains with torch_sharded_dcp's ``worker`` and saves its ``torch.distributed.checkpoint``
shard with ``save_sharded`` into the attempt's one checkpoint (``fc.ctx().checkpoint``). In the
first attempt rank 1 SIGKILLs itself after epoch ``--kill-at``'s save: the attempt fails, the
retry's checkpoint resumes from the object the killed attempt committed, and the final weights
equal those of a run that was never killed. Then Flyte's own reader,
``flyte.Checkpoint(...).load_sync()``, restores that object (one gzip tar of the union of the
ranks' folders, also listed with ``tarfile``) and DCP loads the final weights from its tree.

- **Flyte's local mode** (default; ``flyte.with_runcontext(mode="local")``). The plugin does not
  start ranks there: in local mode (``TaskContext.mode == "local"``) its ``execute`` calls the
  function once, in the calling process (run so, the body sees no ``RANK``/``WORLD_SIZE``), and
  only outside local mode runs torch's ``elastic_launch`` with ``nproc_per_node`` processes. So
  the body, finding no ``RANK``, starts the 4 ranks itself with torchrun (the command-line face
  of ``elastic_launch``) and hands them the checkpoint's two URIs (Flyte's task context does not
  reach other processes). **Flyte's local mode retries the task** (``retries=`` below; our
  ``fc.task`` is not used: inside a Flyte task it leaves the retries to Flyte), and in local
  mode every attempt saves to the same destination, which the retry resumes from.
- **As pods** (``--pods``): each attempt is started the way a Flyte backend starts a task's pod,
  with Flyte's pod entrypoint ``a0`` (attempt n saves to ``ck/n/``, its previous path is
  ``ck/n-1/``, ``FLYTE_ATTEMPT_NUMBER=n``); this script plays the backend, starting attempt 1
  when attempt 0 fails. There the plugin's own path runs: ``elastic_launch`` starts the 4 ranks,
  each runs the task's body with Flyte's context (so ``fc.ctx().checkpoint`` in every rank).

Run: python examples/flyte_sharded_dcp.py [--pods] [--work /tmp/flyte-sharded] [--kill-at 3]
Needs: pip install torch flyte==2.12.1 flyteplugins-pytorch==2.12.1
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path

import flyte
from flyteplugins.pytorch import Elastic
from torch_sharded_dcp import WORLD, launch, make_model, weights, worker

import flyte_checkpoint as fc

EPOCHS = 6
#: Epoch after which rank 1 of a job that started from scratch is killed (-1: never); an
#: environment variable, so the pods get it as they get the rest of their environment.
KILL_AT_ENV = "FLYTE_SHARDED_KILL_AT"
#: The process id of the script that runs the task: the body tells whether it runs in it.
CALLER_ENV = "FLYTE_SHARDED_CALLER"

env = flyte.TaskEnvironment(
    name="flyte_sharded_dcp",
    # A rank that dies fails the attempt (no restart of the ranks within it): Flyte retries.
    plugin_config=Elastic(nnodes=1, nproc_per_node=WORLD, max_restarts=0, monitor_interval=1),
)


@env.task(retries=flyte.RetryStrategy(count=1, backoff=flyte.Backoff(base=timedelta(0))))
def train_sharded() -> str:
    """One attempt (as a pod: one rank of it); returns the checkpoint's destination."""
    cp = fc.ctx().checkpoint
    assert cp is not None, "Flyte gave this attempt no checkpoint destination"
    kill_at = int(os.environ.get(KILL_AT_ENV, "-1"))
    if "RANK" in os.environ:  # one of the ranks the plugin's elastic_launch started
        worker(cp.remote_destination, cp.remote_source, EPOCHS, kill_at)
        return cp.remote_destination
    # Flyte's local mode: the plugin ran this body once, in the calling process; start the ranks.
    where = "the calling process" if os.environ.get(CALLER_ENV) == str(os.getpid()) else "another process"
    print(f"task attempt: no RANK, in {where}; checkpoint source {cp.remote_source}", flush=True)
    code = launch(cp.remote_destination, cp.remote_source, EPOCHS, kill_at)
    if code != 0:
        raise RuntimeError(f"the ranks failed (torchrun exit code {code}); Flyte retries the task")
    return cp.remote_destination


def run_local(work: Path) -> str:
    """Run the task in Flyte's local mode (raw data under ``work/raw``); the checkpoint's URI."""
    flyte.init()
    name = f"flyte-sharded-dcp-{uuid.uuid4().hex[:12]}"
    run_ctx = flyte.with_runcontext(
        mode="local",
        name=name,
        raw_data_path=str(work / "raw"),
        run_base_dir=str(work / "meta"),
        disable_run_cache=True,
    )
    try:
        return run_ctx.run(train_sharded).outputs()[0]
    finally:  # Flyte's local mode keeps each run's metadata here, whatever run_base_dir says
        shutil.rmtree(Path("/tmp/flyte/metadata") / name, ignore_errors=True)


def run_pods(work: Path, retries: int = 1) -> str:
    """Start each attempt as Flyte's pod entrypoint (``a0``), as a Flyte backend does, until one
    succeeds or ``retries`` retries are spent; the checkpoint's URI of the attempt that succeeded."""
    here = Path(__file__).resolve().parent
    prev = ""
    for attempt in range(retries + 1):
        dest = str(work / "ck" / str(attempt) / "_flytecheckpoints")
        out = work / "out" / str(attempt)
        out.mkdir(parents=True)
        (out / "inputs.pb").write_bytes(b"")  # the task has no inputs: an empty message
        cmd = [str(Path(sys.executable).with_name("a0")), "--inputs", str(out / "inputs.pb")]
        cmd += ["--outputs-path", str(out), "--run-base-dir", str(out), "--raw-data-path", str(work / "raw")]
        cmd += ["--checkpoint-path", dest, "--prev-checkpoint", prev, "--version", "v1"]
        cmd += ["--run-name", "r1", "--name", "a0", "--project", "p", "--domain", "d", "--org", "o"]
        cmd += ["--resolver", "flyte._internal.resolvers.default.DefaultTaskResolver"]
        cmd += ["mod", "flyte_sharded_dcp", "instance", "train_sharded"]
        path = os.pathsep.join(filter(None, [str(here), os.environ.get("PYTHONPATH")]))
        # A clustered worker runs without a connection to a Flyte backend (there is none here).
        pod_env = {**os.environ, "PYTHONPATH": path, "FLYTE_CLUSTERED_WORKER": "1"}
        pod_env["FLYTE_ATTEMPT_NUMBER"] = str(attempt)
        print(f"pod attempt {attempt}: checkpoint {dest}, previous {prev or 'none'}", flush=True)
        code = subprocess.call(cmd, env=pod_env, cwd=here)
        if code == 0:
            return dest
        print(f"pod attempt {attempt} failed (exit code {code})", flush=True)
        prev = dest
    sys.exit(1)


def read_with_flyte(dest: str, work: Path) -> None:
    """Flyte's own reader on the object: its tar members, the tree ``flyte.Checkpoint`` restores,
    and the weights ``torch.distributed.checkpoint`` loads from that tree."""
    import torch
    import torch.distributed.checkpoint as dcp

    body = Path(dest.removeprefix("file://")).read_bytes()
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:  # one gzip tar
        names = sorted(m.name for m in tar.getmembers() if m.isfile())
    print(f"tar members: {names}", flush=True)
    theirs = flyte.Checkpoint(str(work / "next"), dest)  # its workspace lives as long as it does
    restored = theirs.load_sync()
    assert restored is not None and restored.is_dir(), restored
    print(f"flyte.Checkpoint restored: {sorted(str(p.relative_to(restored)) for p in restored.rglob('*'))}")
    model = make_model()
    state = {"model": model.state_dict(), "epoch": torch.tensor(-1)}
    dcp.load(state, checkpoint_id=str(restored))  # one process, no process group
    model.load_state_dict(state["model"])
    print(f"weights read through flyte.Checkpoint: {weights(model)} (epoch {int(state['epoch'])})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", action="store_true", help="start each attempt as Flyte's pod entrypoint")
    parser.add_argument("--work", default=None, help="a folder for the run's data (default: a temporary one)")
    parser.add_argument(
        "--kill-at", type=int, default=3, help="epoch after which rank 1 is killed (-1: never)"
    )
    args = parser.parse_args()
    os.environ[KILL_AT_ENV] = str(args.kill_at)
    os.environ[CALLER_ENV] = str(os.getpid())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        dest = run_pods(work) if args.pods else run_local(work)
        print(f"checkpoint: {dest}", flush=True)
        read_with_flyte(dest, Path(tmp))


if __name__ == "__main__":
    main()
