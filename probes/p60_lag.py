"""Listings that lag: hide the shard markers (or a subset) from K listings."""
import os, sys, tempfile, time
from pathlib import Path
import flyte_checkpoint as fc
from flyte_checkpoint.testing.counting import CountingLatencyStore
from harness import mkshard, run_ranks, tree
what, K, W = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 3
store = CountingLatencyStore(latency=0.0)
fc.register_store("lag", ("lag",), lambda: store)
base = Path(tempfile.mkdtemp())
uri = "lag://b/ckpt"
data = {}
shards = []
for r in range(W):
    blob = os.urandom(1000); data[f"r{r}"] = blob
    shards.append(mkshard(base, f"r{r}", {f"r{r}": blob}))
if what == "all":
    store.hide(uri + ".fcp-shard/", K)
else:
    store.hide(lambda u: u.startswith(uri + ".fcp-shard/") and what in u.rsplit("/", 1)[-1], K)
t0 = time.time()
res = run_ranks([dict(checkpoint=uri, folder=f, rank=r, world_size=W, job="j", timeout=3) for r, f in enumerate(shards)], 120)
print(what, K, [x[:200] for x in res], f"{time.time()-t0:.1f}s")
print("  keys:", sorted(k.rsplit("/", 1)[-1] for k in store.inner.list("lag://b/") ) if hasattr(store.inner, "list") else "")
with fc.Checkpoint("lag://b/next", uri) as cp:
    t = tree(cp.load_sync())
    print("  load:", "OK" if t == data else t if t is None else sorted(t))
