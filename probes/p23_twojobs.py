"""Two jobs (explicit names) save sharded to one URI at once: one whole union or the previous."""
import os, sys, tempfile, time
from harness import mkshard, run_ranks, load
scheme = sys.argv[1]; n = int(sys.argv[2]); W = int(sys.argv[3]) if len(sys.argv) > 3 else 2
for it in range(n):
    base = tempfile.mkdtemp()
    uri = f"{base}/store/ckpt" if scheme == "file" else (f"memory://t{time.time_ns()}/ckpt" if scheme == "memory" else f"{scheme}/t{time.time_ns()}/ckpt")
    data = {"A": {}, "B": {}}
    specs = []
    for j in "AB":
        for r in range(W):
            blob = os.urandom(1 << 20); data[j][f"r{r}.bin"] = blob
            specs.append(dict(checkpoint=uri, folder=mkshard(base, f"{j}{r}", {f"r{r}.bin": blob}), rank=r, world_size=W, job=j, timeout=10))
    specs = [specs[i] for i in ([0, W] + [k for k in range(2 * W) if k not in (0, W)])]  # both rank 0s first
    res = run_ranks(specs, 120)
    try:
        t = load(uri)
        got = "A" if t == data["A"] else "B" if t == data["B"] else "None" if t is None else "MIX " + str({k: ("A" if v == data["A"].get(k) else "B" if v == data["B"].get(k) else "?") for k, v in t.items()})
    except Exception as e:
        got = f"load {type(e).__name__}: {e}"
    print(it, got, [r[:int(os.environ.get("W", 60))] for r in res], flush=True)
