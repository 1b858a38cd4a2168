"""Many ranks (threads) with small shards: the union and each rank's own files."""
import os, sys, tempfile, time, random
from pathlib import Path
import flyte_checkpoint as fc
from flyte_checkpoint.sharded import load_sharded
from harness import mkshard, run_ranks, tree
scheme, W = sys.argv[1], int(sys.argv[2])
base = Path(tempfile.mkdtemp())
uri = f"{base}/store/ckpt" if scheme == "file" else (f"memory://m{time.time_ns()}/ckpt" if scheme == "memory" else f"{scheme}/m{time.time_ns()}/ckpt")
own = []
specs = []
rnd = random.Random(W)
for r in range(W):
    files = {f"r{r:03d}-{i}": rnd.randbytes(rnd.choice([0, 1, 100, 70000])) for i in range(rnd.choice([0, 1, 2]))}
    own.append(files)
    specs.append(dict(checkpoint=uri, folder=mkshard(base, f"r{r}", files), rank=r, world_size=W, job="j", timeout=120))
t0 = time.time()
res = run_ranks(specs, 600)
bad = [(i, x[:200]) for i, x in enumerate(res) if x != "ok"]
print(scheme, W, "ranks:", "all ok" if not bad else bad[:3], f"{time.time()-t0:.1f}s")
want = {k: v for o in own for k, v in o.items()}
with fc.Checkpoint(uri + ".n", uri) as cp:
    got = tree(cp.load_sync()); print("union:", "OK" if got == want else f"MISMATCH {len(got)} vs {len(want)}")
wrong = []
for r in rnd.sample(range(W), min(W, 12)):
    with fc.Checkpoint(uri + f".o{r}", uri) as cp:
        p = load_sharded(cp, own=True, rank=r); g = tree(p) if p else None
        if g != own[r]: wrong.append((r, None if g is None else sorted(g), sorted(own[r])))
print("own:", "OK" if not wrong else wrong[:4])
