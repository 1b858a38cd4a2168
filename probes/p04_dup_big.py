"""Two processes claim rank 1 concurrently, big shards; check outcome consistency."""
import sys, tempfile, time, os
from harness import *
scheme = sys.argv[1] if len(sys.argv) > 1 else "file"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 5
size = int(sys.argv[3]) if len(sys.argv) > 3 else 8 << 20
for it in range(n):
    base = tempfile.mkdtemp()
    uri = f"{base}/store/ckpt" if scheme == "file" else (f"memory://b{time.time_ns()}/ckpt" if scheme == "memory" else f"{scheme}/it{it}-{time.time_ns()}/ckpt")
    A = os.urandom(size); X = os.urandom(size); Y = os.urandom(size)
    a = mkshard(base, "r0", {"a.bin": A})
    b1 = mkshard(base, "r1x", {"b.bin": X})
    b2 = mkshard(base, "r1y", {"b.bin": Y})
    specs = [dict(checkpoint=uri, folder=a, rank=0, world_size=2, job="j", timeout=5),
             dict(checkpoint=uri, folder=b1, rank=1, world_size=2, job="j", timeout=5),
             dict(checkpoint=uri, folder=b2, rank=1, world_size=2, job="j", timeout=5)]
    res = run_ranks(specs, 60)
    try:
        t = load(uri)
        got = None if t is None else ("X" if t.get("b.bin") == X else "Y" if t.get("b.bin") == Y else "OTHER", t.get("a.bin") == A, sorted(t))
    except Exception as e:
        got = f"load {type(e).__name__}: {str(e)[:200]}"
    print(it, [r[:90] for r in res], got, flush=True)
