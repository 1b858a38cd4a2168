"""A reader loads in a loop while sharded saves (and plain saves) commit new generations."""
import os, sys, tempfile, time, threading
from pathlib import Path
import flyte_checkpoint as fc
from harness import mkshard, run_ranks, tree
scheme = sys.argv[1]; gens = int(sys.argv[2]); size = int(sys.argv[3]); mode = sys.argv[4] if len(sys.argv) > 4 else "sharded"
base = tempfile.mkdtemp()
uri = f"{base}/store/ckpt" if scheme == "file" else (f"memory://r{time.time_ns()}/ckpt" if scheme == "memory" else f"{scheme}/r{time.time_ns()}/ckpt")
saved = []  # list of dict trees
stop = threading.Event()
seen = {"ok": 0, "none": 0, "bad": [], "err": []}
def reader():
    while not stop.is_set():
        try:
            with fc.Checkpoint(uri + ".reader", uri) as cp:
                t = tree(cp.load_sync())
            if t is None: seen["none"] += 1
            elif any(t == s for s in list(saved)) or any(t == s for s in pending): seen["ok"] += 1
            else: seen["bad"].append(sorted((k, len(v)) for k, v in t.items()))
        except Exception as e:
            seen["err"].append(f"{type(e).__name__}: {str(e)[:200]}")
pending = []
th = threading.Thread(target=reader, daemon=True); th.start()
for g in range(gens):
    d0 = {f"g{g}-a.bin": os.urandom(size)}; d1 = {f"g{g}-b.bin": os.urandom(size)}
    pending[:] = [{**d0, **d1}]
    if mode == "sharded" or (mode == "mixed" and g % 2 == 0):
        a = mkshard(base, f"g{g}r0", d0); b = mkshard(base, f"g{g}r1", d1)
        res = run_ranks([dict(checkpoint=uri, folder=a, rank=0, world_size=2, job="j", timeout=20),
                         dict(checkpoint=uri, folder=b, rank=1, world_size=2, job="j", timeout=20)], 120)
    else:
        src = mkshard(base, f"g{g}plain", {**d0, **d1})
        try:
            with fc.Checkpoint(uri) as cp: cp.save_sync(src)
            res = ["ok"]
        except Exception as e: res = [f"{type(e).__name__}: {e}"]
    if any(r != "ok" for r in res): print("gen", g, res)
    saved.append({**d0, **d1})
time.sleep(1); stop.set(); th.join(60)
print(scheme, mode, "loads ok", seen["ok"], "none", seen["none"], "bad", seen["bad"][:3], "errors", len(seen["err"]), seen["err"][:3])
