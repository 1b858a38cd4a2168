"""Two threads both claim rank 1 of world 2."""
import sys, tempfile
from harness import *
base = tempfile.mkdtemp()
uri = sys.argv[1] if len(sys.argv) > 1 else f"{base}/store/ckpt"
a = mkshard(base, "r0", {"a.bin": b"A" * 1000})
b1 = mkshard(base, "r1x", {"b.bin": b"X" * 1000})
b2 = mkshard(base, "r1y", {"c.bin": b"Y" * 1000})
specs = [dict(checkpoint=uri, folder=a, rank=0, world_size=2, job="j", timeout=10),
         dict(checkpoint=uri, folder=b1, rank=1, world_size=2, job="j", timeout=10),
         dict(checkpoint=uri, folder=b2, rank=1, world_size=2, job="j", timeout=10)]
print(run_ranks(specs, 60))
try:
    print({k: len(v) for k, v in load(uri).items()})
except Exception as e:
    print("load:", type(e).__name__, e)
