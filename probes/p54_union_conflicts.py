"""Names that are distinct per rank but collide in the union: file vs folder, link vs folder."""
import os, sys, tempfile, time
from pathlib import Path
import flyte_checkpoint as fc
from harness import run_ranks, tree
scheme = sys.argv[1]; case = sys.argv[2]
base = Path(tempfile.mkdtemp())
uri = f"{base}/store/ckpt" if scheme == "file" else (f"memory://c{time.time_ns()}/ckpt" if scheme == "memory" else f"{scheme}/c{time.time_ns()}/ckpt")
good = base / "good"; good.mkdir(); (good / "state").write_bytes(b"good")
with fc.Checkpoint(uri) as cp: cp.save_sync(good)
r0 = base / "r0"; r1 = base / "r1"; r0.mkdir(); r1.mkdir()
if case == "filedir":
    (r0 / "x").write_bytes(b"file x")
    (r1 / "x").mkdir(); (r1 / "x" / "y").write_bytes(b"y")
elif case == "dirfile":
    (r0 / "x").mkdir(); (r0 / "x" / "y").write_bytes(b"y")
    (r1 / "x").write_bytes(b"file x")
elif case == "linkdir":
    (r0 / "sub").mkdir(); (r0 / "sub" / "a").write_bytes(b"a")
    os.symlink("sub", r0 / "x")
    (r1 / "x").mkdir(); (r1 / "x" / "evil").write_bytes(b"evil")
elif case == "linkfile":
    (r0 / "t").write_bytes(b"t"); os.symlink("t", r0 / "x")
    (r1 / "x").mkdir(); (r1 / "x" / "y").write_bytes(b"y")
elif case == "filedeep":
    (r0 / "a").mkdir(); (r0 / "a" / "b").write_bytes(b"file b")
    (r1 / "a" / "b").mkdir(parents=True); (r1 / "a" / "b" / "c").write_bytes(b"c")
res = run_ranks([dict(checkpoint=uri, folder=f, rank=r, world_size=2, job="j", timeout=30) for r, f in enumerate((r0, r1))])
print(case, scheme, "sharded:", [x[:220] for x in res])
with fc.Checkpoint(uri + ".n", uri) as cp:
    try:
        p = cp.load_sync()
        print("  load:", sorted((str(q.relative_to(p)), "L" if q.is_symlink() else "D" if q.is_dir() else "F") for q in Path(p).rglob("*")))
    except Exception as e:
        print("  load FAILED", type(e).__name__, str(e)[:250])
