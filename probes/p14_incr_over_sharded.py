"""A plain (incremental) folder save over a sharded object: copies from the sharded object."""
import os, sys, tempfile, time, shutil
from pathlib import Path
import flyte_checkpoint as fc
from harness import mkshard, run_ranks, tree
scheme = sys.argv[1]; size = int(sys.argv[2]) if len(sys.argv) > 2 else 6 << 20
base = Path(tempfile.mkdtemp())
uri = f"{base}/store/ckpt" if scheme == "file" else (f"memory://x{time.time_ns()}/ckpt" if scheme == "memory" else f"{scheme}/x{time.time_ns()}/ckpt")
shards = []
for r in range(3):
    shards.append(mkshard(base, f"r{r}", {f"s/r{r}-{i}.bin": os.urandom(size + 4096 * i) for i in range(3)} | {f"small{r}": b"x" * 10}))
print(run_ranks([dict(checkpoint=uri, folder=f, rank=r, world_size=3, job="j", timeout=30) for r, f in enumerate(shards)]))
union = base / "union"
for f in shards: shutil.copytree(f, union, dirs_exist_ok=True)
(union / "s" / "r1-1.bin").write_bytes(os.urandom(size + 4096))
import logging; logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
with fc.Checkpoint(uri) as cp:
    cp.save_sync(union)
with fc.Checkpoint(uri + ".n", uri) as cp:
    try:
        got = tree(cp.load_sync())
        w = {str(p.relative_to(union)): p.read_bytes() for p in union.rglob("*") if p.is_file()}
        print(scheme, "OK" if got == w else f"MISMATCH {[k for k in w if w[k] != got.get(k)]}")
    except Exception as e:
        print("load FAILED", type(e).__name__, str(e)[:300])
