"""S3 through a proxy: after the commit, writes of the outcome marker (or the deletes of the
markers) are refused (403/503). What do the ranks say, and what does the object hold?"""
import os, sys, tempfile, time
from pathlib import Path
from flyte_checkpoint.testing.faultproxy import FaultProxy, Fault
what, status = sys.argv[1], int(sys.argv[2])
moto = os.environ["FLYTE_CHECKPOINT_S3_ENDPOINT_URL"]
proxy = FaultProxy(moto).start()
os.environ["FLYTE_CHECKPOINT_S3_ENDPOINT_URL"] = proxy.url
os.environ.setdefault("FLYTE_CHECKPOINT_RETRY_ATTEMPTS", "2")
import flyte_checkpoint as fc
from harness import mkshard, run_ranks, tree
base = Path(tempfile.mkdtemp())
pre = f"o{time.time_ns()}"
uri = f"s3://adv36/{pre}/ckpt"
with fc.Checkpoint(uri) as cp: cp.save_sync(mkshard(base, "prev", {"prev": b"previous good"}))
data = {f"r{r}": os.urandom(1000) for r in range(2)}
shards = [mkshard(base, f"r{r}", {f"r{r}": data[f"r{r}"]}) for r in range(2)]
if what == "result":
    m = lambda line: line.startswith("PUT ") and f"/{pre}/ckpt.fcp-shard/" in line and line.split("?")[0].split(" ")[1].endswith(".result")
elif what == "complete":
    m = lambda line: line.startswith("POST ") and f"/{pre}/ckpt?uploadId=" in line
elif what == "delete":
    m = lambda line: (line.startswith("POST ") and "delete" in line) or line.startswith("DELETE ")
elif what == "report":
    m = lambda line: line.startswith("PUT ") and "done-1" in line
proxy.fail_request(m, Fault.answer(status), times=1000)
t0 = time.time()
res = run_ranks([dict(checkpoint=uri, folder=f, rank=r, world_size=2, job="j", timeout=15) for r, f in enumerate(shards)], 300)
print(what, status, [x[:330] for x in res], f"{time.time()-t0:.1f}s")
proxy.heal()
with fc.Checkpoint(uri + ".n", uri) as cp:
    t = tree(cp.load_sync())
    print("  object:", "NEW" if t == data else "PREVIOUS" if t == {"prev": b"previous good"} else t)
print("  requests failed:", [l for l in proxy.requests if m(l)][:3])
