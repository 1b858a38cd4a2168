"""Odd timeouts: nan, inf, 0, negative, huge; via timeout= and FLYTE_CHECKPOINT_SHARD_TIMEOUT."""
import os, sys, tempfile, time
from pathlib import Path
from harness import mkshard, run_ranks
via, val = sys.argv[1], sys.argv[2]
base = Path(tempfile.mkdtemp()); uri = str(base / "store" / "ckpt")
a = mkshard(base, "r0", {"a": b"a"})
kw = dict(checkpoint=uri, folder=a, rank=0, world_size=2, job="j")
if via == "arg": kw["timeout"] = float(val)
else: os.environ["FLYTE_CHECKPOINT_SHARD_TIMEOUT"] = val
t0 = time.time()
print(via, val, [x[:200] for x in run_ranks([kw], 25)], f"{time.time()-t0:.1f}s")
