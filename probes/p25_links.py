"""Symbolic links in a rank's shard: what the plain save does vs the sharded save, and the load."""
import os, sys, tempfile, time
from pathlib import Path
import flyte_checkpoint as fc
from harness import mkshard, run_ranks
case = sys.argv[1]; scheme = sys.argv[2] if len(sys.argv) > 2 else "file"
base = Path(tempfile.mkdtemp())
uri = f"{base}/store/ckpt" if scheme == "file" else f"memory://l{time.time_ns()}/ckpt"
a = mkshard(base, "r0", {"a": b"a"})
b = mkshard(base, "r1", {"b": b"b"})
outside = base / "outside"; outside.mkdir(); (outside / "secret").write_bytes(b"outside-file")
if case == "dangling_abs": os.symlink("/nonexistent/abs", b / "l")
if case == "dangling_rel": os.symlink("nothing-here", b / "l")
if case == "abs_inside": os.symlink(str(b / "b"), b / "l")
if case == "outside_file": os.symlink(str(outside / "secret"), b / "l")
if case == "outside_dir": os.symlink(str(outside), b / "l")
if case == "loop": os.symlink("l2", b / "l"); os.symlink("l", b / "l2")
if case == "to_parent": os.symlink("..", b / "l")
if case == "to_self": os.symlink(".", b / "l")
if case == "to_other_rank": os.symlink("../r0/a", b / "l")
def show(p):
    return sorted((str(q.relative_to(p)), ("L->" + os.readlink(q)) if q.is_symlink() else (q.read_bytes()[:20] if q.is_file() else "D")) for q in Path(p).rglob("*"))
try:
    with fc.Checkpoint(str(base / "plain") if scheme == "file" else uri + "-plain") as cp: cp.save_sync(b)
    plain = "saved"
except Exception as e: plain = f"{type(e).__name__}"
res = run_ranks([dict(checkpoint=uri, folder=f, rank=r, world_size=2, job="j", timeout=8) for r, f in enumerate((a, b))], 120)
try:
    with fc.Checkpoint(uri + ".n", uri) as cp:
        p = cp.load_sync(); ld = show(p) if p else None
except Exception as e: ld = f"LOAD FAILED {type(e).__name__}: {str(e)[:200]}"
print(f"{case}: plain={plain} sharded={[x[:120] for x in res]} load={ld}")
