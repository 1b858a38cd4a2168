"""A rank's file changes (grows / vanishes) while the sharded save runs."""
import os, sys, tempfile, time, threading
from pathlib import Path
import flyte_checkpoint as fc
from harness import mkshard, run_ranks, tree
scheme, case = sys.argv[1], sys.argv[2]
base = Path(tempfile.mkdtemp())
uri = f"{base}/store/ckpt" if scheme == "file" else f"{scheme}/w{time.time_ns()}/ckpt"
with fc.Checkpoint(uri) as cp: cp.save_sync(mkshard(base, "prev", {"prev": b"previous good"}))
r0 = mkshard(base, "r0", {"a": os.urandom(1000)})
r1 = mkshard(base, "r1", {f"b{i}": os.urandom(4 << 20) for i in range(8)})
stop = threading.Event()
def mutate():
    i = 0
    while not stop.is_set():
        p = r1 / f"b{i % 8}"
        try:
            if case == "grow":
                with open(p, "ab") as f: f.write(b"x")
            elif case == "vanish":
                if p.exists(): p.unlink()
            elif case == "rewrite":
                p.write_bytes(os.urandom(4 << 20))
        except FileNotFoundError: pass
        i += 1; time.sleep(0.01)
t = threading.Thread(target=mutate, daemon=True)
res_holder = {}
def go(): res_holder["r"] = run_ranks([dict(checkpoint=uri, folder=f, rank=r, world_size=2, job="j", timeout=20) for r, f in enumerate((r0, r1))], 120)
g = threading.Thread(target=go); g.start(); time.sleep(0.05); t.start(); g.join(); stop.set()
res = res_holder["r"]
print(case, [x[:260] for x in res])
with fc.Checkpoint(uri + ".n", uri) as cp:
    try:
        tr = tree(cp.load_sync()); print("  object:", "PREVIOUS" if tr == {"prev": b"previous good"} else sorted((k, len(v)) for k, v in tr.items()))
    except Exception as e: print("  load FAILED", type(e).__name__, str(e)[:200])
