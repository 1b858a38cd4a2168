"""After world_size=2.0 fails, the next save of the same process/job with world_size=2."""
import sys, tempfile, time, os
from pathlib import Path
from harness import mkshard, run_ranks, load
base = Path(tempfile.mkdtemp()); uri = str(base / "store" / "ckpt")
a = mkshard(base, "r0", {"a": b"a"}); b = mkshard(base, "r1", {"b": b"b"})
print("float:", [x[:100] for x in run_ranks([dict(checkpoint=uri, folder=f, rank=r, world_size=2.0, job="j", timeout=5) for r, f in enumerate((a, b))], 60)])
print("markers:", sorted(os.listdir(base / "store")), [sorted(os.listdir(base / "store" / d)) for d in os.listdir(base / "store") if d.endswith(".shard")])
t0 = time.time()
print("int:", [x[:250] for x in run_ranks([dict(checkpoint=uri, folder=f, rank=r, world_size=2, job="j", timeout=20) for r, f in enumerate((a, b))], 60)], f"{time.time()-t0:.1f}s")
t0 = time.time()
print("int, other job:", [x[:250] for x in run_ranks([dict(checkpoint=uri, folder=f, rank=r, world_size=2, job="k", timeout=20) for r, f in enumerate((a, b))], 60)], f"{time.time()-t0:.1f}s")
print("load:", sorted(load(uri) or []))
