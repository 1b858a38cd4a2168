"""Rank 0 gives up on save #1 and starts save #2; rank 1's save #1 arrives during save #2."""
import os, sys, tempfile, time, threading
from pathlib import Path
import flyte_checkpoint as fc
from flyte_checkpoint.sharded import save_sharded
from harness import mkshard, load
scheme = sys.argv[1]; stepped = len(sys.argv) > 2 and sys.argv[2] == "step"
base = Path(tempfile.mkdtemp())
uri = f"{base}/store/ckpt" if scheme == "file" else (f"memory://q{time.time_ns()}/ckpt" if scheme == "memory" else f"{scheme}/q{time.time_ns()}/ckpt")
r0s1 = mkshard(base, "r0s1", {"r0": b"save1"}); r0s2 = mkshard(base, "r0s2", {"r0": b"save2"})
r1s1 = mkshard(base, "r1s1", {"r1": b"save1"}); r1s2 = mkshard(base, "r1s2", {"r1": b"save2"})
log = []
started2 = threading.Event()
def call(tag, folder, rank, timeout, step):
    try:
        kw = dict(step=step) if stepped else {}
        save_sharded(uri, folder, rank=rank, world_size=2, job="j", timeout=timeout, **kw); log.append((tag, "ok"))
    except Exception as e:
        log.append((tag, f"{type(e).__name__}: {str(e)[:220]}"))
def rank0():
    call("r0 save1", r0s1, 0, 2, 1)
    started2.set()
    call("r0 save2", r0s2, 0, 12, 2)
def rank1():
    started2.wait(); time.sleep(1.0)
    call("r1 save1 (late)", r1s1, 1, 12, 1)
    call("r1 save2", r1s2, 1, 12, 2)
ts = [threading.Thread(target=rank0), threading.Thread(target=rank1)]
[t.start() for t in ts]; [t.join(120) for t in ts]
for l in log: print(" ", l)
t = load(uri)
print("load:", t)
