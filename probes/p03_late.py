"""A rank arrives after the save it belongs to was committed (same job, same step)."""
import sys, tempfile, time
from harness import *
scheme = sys.argv[1] if len(sys.argv) > 1 else "file"
base = tempfile.mkdtemp()
uri = f"{base}/store/ckpt" if scheme == "file" else f"memory://b{time.time_ns()}/ckpt"
a = mkshard(base, "r0", {"a.bin": b"A" * 1000})
b = mkshard(base, "r1", {"b.bin": b"B" * 1000})
x = mkshard(base, "r1x", {"x.bin": b"X" * 1000})
T = 6
print(run_ranks([dict(checkpoint=uri, folder=a, rank=0, world_size=2, job="j", timeout=T, step=5),
                 dict(checkpoint=uri, folder=b, rank=1, world_size=2, job="j", timeout=T, step=5)]))
t0 = time.time()
print("late dup:", run_ranks([dict(checkpoint=uri, folder=x, rank=1, world_size=2, job="j", timeout=T, step=5)]), round(time.time() - t0, 1))
print("load:", {k: len(v) for k, v in load(uri).items()})
