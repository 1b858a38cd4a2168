"""Azure: a failed sharded save leaves staged blocks on the blob; then plain, incremental and
sharded saves to the same blob must commit what they saved."""
import os, sys, tempfile, time
from pathlib import Path
import flyte_checkpoint as fc
from harness import mkshard, run_ranks, tree
scheme = sys.argv[1]
base = Path(tempfile.mkdtemp())
uri = f"{scheme}/z{time.time_ns()}/ckpt"
def check(label, want):
    with fc.Checkpoint(uri + ".n", uri) as cp:
        try:
            got = tree(cp.load_sync()); print(label, "OK" if got == want else f"MISMATCH {None if got is None else sorted(got)}")
        except Exception as e: print(label, "LOAD FAILED", type(e).__name__, str(e)[:200])
big = {f"w{i}": os.urandom(9 << 20) for i in range(3)}
r0 = mkshard(base, "r0", big)
r1 = mkshard(base, "r1", {"x": b"x"})
print("failed sharded:", [x[:100] for x in run_ranks([dict(checkpoint=uri, folder=r0, rank=0, world_size=2, job="j", timeout=5)], 120)])
src = mkshard(base, "plain", {f"p{i}": os.urandom(9 << 20) for i in range(3)})
want = {p.name: p.read_bytes() for p in src.iterdir()}
try:
    with fc.Checkpoint(uri) as cp: cp.save_sync(src)
    check("plain after failed sharded:", want)
except Exception as e: print("plain SAVE FAILED", type(e).__name__, str(e)[:300])
(src / "p1").write_bytes(os.urandom(9 << 20)); want = {p.name: p.read_bytes() for p in src.iterdir()}
try:
    with fc.Checkpoint(uri) as cp: cp.save_sync(src)
    check("incremental:", want)
except Exception as e: print("incr SAVE FAILED", type(e).__name__, str(e)[:300])
print("failed sharded 2:", [x[:100] for x in run_ranks([dict(checkpoint=uri, folder=r0, rank=0, world_size=2, job="k", timeout=5)], 120)])
print("sharded:", [x[:200] for x in run_ranks([dict(checkpoint=uri, folder=f, rank=r, world_size=2, job="m", timeout=30) for r, f in enumerate((r0, r1))], 120)])
check("sharded after:", {**big, "x": b"x"})
(src / "p2").write_bytes(os.urandom(9 << 20)); want = {p.name: p.read_bytes() for p in src.iterdir()}
try:
    with fc.Checkpoint(uri) as cp: cp.save_sync(src)
    check("plain over sharded:", want)
except Exception as e: print("plain2 SAVE FAILED", type(e).__name__, str(e)[:300])
