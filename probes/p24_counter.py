"""Rank 1's first call fails on its own input; the second round (both good, no step=) must commit."""
import os, sys, tempfile, time
from pathlib import Path
import flyte_checkpoint as fc
from harness import mkshard, run_ranks, load
scheme, case = sys.argv[1], sys.argv[2]
base = Path(tempfile.mkdtemp())
uri = f"{base}/store/ckpt" if scheme == "file" else (f"memory://n{time.time_ns()}/ckpt" if scheme == "memory" else f"{scheme}/n{time.time_ns()}/ckpt")
a = mkshard(base, "r0", {"a": b"a"})
bad = base / "bad"
if case == "dangling":
    bad.mkdir(); (bad / "x").write_bytes(b"x"); os.symlink("nothing-here", bad / "dangling")
elif case == "missing":
    pass
elif case == "file":
    bad.write_bytes(b"not a folder")
elif case == "sameuri_local":
    bad = Path(uri)  # saving the destination itself
b = mkshard(base, "r1", {"b": b"b"})
T = 8
print(case, "round 1:", [x[:200] for x in run_ranks([dict(checkpoint=uri, folder=a, rank=0, world_size=2, job="j", timeout=T), dict(checkpoint=uri, folder=bad, rank=1, world_size=2, job="j", timeout=T)], 120)])
t0 = time.time()
print(case, "round 2:", [x[:300] for x in run_ranks([dict(checkpoint=uri, folder=a, rank=0, world_size=2, job="j", timeout=T), dict(checkpoint=uri, folder=b, rank=1, world_size=2, job="j", timeout=T)], 120)], f"{time.time()-t0:.1f}s")
print(case, "load:", sorted(load(uri) or []))
