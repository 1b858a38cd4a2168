"""load_sharded(own=True) edge cases."""
import os, sys, tempfile, time
from pathlib import Path
import flyte_checkpoint as fc
from flyte_checkpoint.sharded import load_sharded
from harness import mkshard, run_ranks, tree
scheme = sys.argv[1] if len(sys.argv) > 1 else "file"
base = tempfile.mkdtemp()
uri = f"{base}/store/ckpt" if scheme == "file" else (f"memory://o{time.time_ns()}/ckpt" if scheme == "memory" else f"{scheme}/o{time.time_ns()}/ckpt")
a = mkshard(base, "r0", {"shared/a.bin": b"A" * 70000, "top0": b"0"})
b = mkshard(base, "r1", {"shared/b.bin": b"B" * 70000})
e = mkshard(base, "r2", {})
l = mkshard(base, "r3", {"z.bin": b"Z" * 100})
os.symlink("z.bin", l / "zlink")
print(run_ranks([dict(checkpoint=uri, folder=f, rank=r, world_size=4, job="j", timeout=10) for r, f in enumerate((a, b, e, l))]))
for rank in (0, 1, 2, 3, 4, 7, -1):
    with fc.Checkpoint(uri + ".n", uri) as cp:
        try:
            p = load_sharded(cp, own=True, rank=rank)
            print(rank, "->", None if p is None else sorted((str(q.relative_to(p)), q.is_symlink()) for q in Path(p).rglob("*")))
        except Exception as ex:
            print(rank, "->", type(ex).__name__, str(ex)[:250])
with fc.Checkpoint(uri + ".n", uri) as cp:
    p = load_sharded(cp); print("all ->", sorted(str(q.relative_to(p)) for q in Path(p).rglob("*")))
