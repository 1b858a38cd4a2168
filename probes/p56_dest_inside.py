"""file store: the destination (and its .shard working folder) inside a rank's folder."""
import os, sys, tempfile, time
from pathlib import Path
import flyte_checkpoint as fc
from harness import mkshard, run_ranks, tree
case = sys.argv[1]
base = Path(tempfile.mkdtemp())
shared = mkshard(base, "shared", {"s0": b"rank0 file"})
uri = str(shared / "ckpt") if case != "deep" else str(shared / "sub" / "ckpt")
with fc.Checkpoint(uri) as cp: cp.save_sync(mkshard(base, "prev", {"prev": os.urandom(100000)}))
r1 = mkshard(base, "r1", {"s1": os.urandom(3 << 20)})
folders = [shared, r1] if case != "both" else [shared, shared]
if case == "both":
    (shared / "s1").write_bytes(b"x")
res = run_ranks([dict(checkpoint=uri, folder=f, rank=r, world_size=2, job="j", timeout=20) for r, f in enumerate(folders)], 120)
print(case, [x[:250] for x in res])
with fc.Checkpoint(str(base / "next"), uri) as cp:
    try:
        t = tree(cp.load_sync()); print("  load:", sorted((k, len(v)) for k, v in t.items()))
    except Exception as e: print("  load FAILED", type(e).__name__, str(e)[:200])
print("  left in shared:", sorted(os.listdir(shared)))
