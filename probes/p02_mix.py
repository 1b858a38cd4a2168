import sys, tempfile, time
from harness import *
case = sys.argv[1]; scheme = sys.argv[2] if len(sys.argv) > 2 else "file"
base = tempfile.mkdtemp()
uri = f"{base}/store/ckpt" if scheme == "file" else (f"memory://b{time.time_ns()}/ckpt" if scheme == "memory" else f"{scheme}/b{time.time_ns()}/ckpt")
a = mkshard(base, "r0", {"a.bin": b"A" * 1000})
b = mkshard(base, "r1", {"b.bin": b"B" * 1000})
c = mkshard(base, "r2", {"c.bin": b"C" * 1000})
T = 8
if case == "worlds":
    specs = [dict(checkpoint=uri, folder=a, rank=0, world_size=2, job="j", timeout=T),
             dict(checkpoint=uri, folder=b, rank=1, world_size=3, job="j", timeout=T),
             dict(checkpoint=uri, folder=c, rank=2, world_size=3, job="j", timeout=T)]
elif case == "worlds2":
    specs = [dict(checkpoint=uri, folder=a, rank=0, world_size=3, job="j", timeout=T),
             dict(checkpoint=uri, folder=b, rank=1, world_size=2, job="j", timeout=T),
             dict(checkpoint=uri, folder=c, rank=2, world_size=3, job="j", timeout=T)]
elif case == "samename":
    b = mkshard(base, "r1b", {"a.bin": b"Z" * 1000})
    specs = [dict(checkpoint=uri, folder=a, rank=0, world_size=2, job="j", timeout=T),
             dict(checkpoint=uri, folder=b, rank=1, world_size=2, job="j", timeout=T)]
elif case == "samefolder":
    specs = [dict(checkpoint=uri, folder=a, rank=0, world_size=2, job="j", timeout=T),
             dict(checkpoint=uri, folder=a, rank=1, world_size=2, job="j", timeout=T)]
elif case == "empty":
    e0 = mkshard(base, "e0", {}); e1 = mkshard(base, "e1", {})
    specs = [dict(checkpoint=uri, folder=e0, rank=0, world_size=2, job="j", timeout=T),
             dict(checkpoint=uri, folder=e1, rank=1, world_size=2, job="j", timeout=T)]
elif case == "zerofiles":
    e0 = mkshard(base, "e0", {"z0": b""}); e1 = mkshard(base, "e1", {"z1": b"", "d/z2": b""})
    specs = [dict(checkpoint=uri, folder=e0, rank=0, world_size=2, job="j", timeout=T),
             dict(checkpoint=uri, folder=e1, rank=1, world_size=2, job="j", timeout=T)]
elif case == "jobs":
    specs = [dict(checkpoint=uri, folder=a, rank=0, world_size=2, job="j", timeout=T),
             dict(checkpoint=uri, folder=b, rank=1, world_size=2, job="k", timeout=T)]
elif case == "steps":
    specs = [dict(checkpoint=uri, folder=a, rank=0, world_size=2, job="j", timeout=T, step=1),
             dict(checkpoint=uri, folder=b, rank=1, world_size=2, job="j", timeout=T, step=2)]
elif case == "rankoob":
    specs = [dict(checkpoint=uri, folder=a, rank=0, world_size=2, job="j", timeout=T),
             dict(checkpoint=uri, folder=b, rank=2, world_size=2, job="j", timeout=T)]
elif case == "world1":
    specs = [dict(checkpoint=uri, folder=a, rank=0, world_size=1, job="j", timeout=T)]
t0 = time.time()
print(case, scheme, run_ranks(specs, 60), round(time.time() - t0, 1))
try:
    r = load(uri); print("load:", r if r is None else {k: v[:3] + b".." + bytes([len(v) % 256]) for k, v in r.items()})
except Exception as e:
    print("load:", type(e).__name__, e)
