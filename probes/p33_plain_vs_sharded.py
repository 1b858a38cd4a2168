"""A plain save to the URI while a sharded save is in flight: one whole object, never a mix."""
import os, sys, tempfile, time, threading
from pathlib import Path
import flyte_checkpoint as fc
from harness import mkshard, run_ranks, tree
scheme, delay = sys.argv[1], float(sys.argv[2])
base = Path(tempfile.mkdtemp())
uri = f"{base}/store/ckpt" if scheme == "file" else f"{scheme}/v{time.time_ns()}/ckpt"
sh = {f"r{r}": os.urandom(12 << 20) for r in range(3)}
shards = [mkshard(base, f"r{r}", {f"r{r}": sh[f"r{r}"]}) for r in range(3)]
plain = {"p": os.urandom(6 << 20)}
pd = mkshard(base, "plain", plain)
out = {}
def sharded(): out["s"] = run_ranks([dict(checkpoint=uri, folder=f, rank=r, world_size=3, job="j", timeout=30) for r, f in enumerate(shards)], 200)
t = threading.Thread(target=sharded); t.start()
time.sleep(delay)
import subprocess
r = subprocess.run([sys.executable, "-m", "flyte_checkpoint.cli", "push", str(pd), uri], capture_output=True, text=True)
t.join()
print(scheme, delay, "sharded:", [x[:100] for x in out["s"]], "plain rc", r.returncode, r.stderr.strip()[-200:] if r.returncode else "")
with fc.Checkpoint(uri + ".n", uri) as cp:
    try:
        tr = tree(cp.load_sync()); print("  object:", "SHARDED" if tr == sh else "PLAIN" if tr == plain else sorted(tr))
    except Exception as e: print("  load FAILED", type(e).__name__, str(e)[:200])
