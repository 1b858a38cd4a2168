import os, sys, tempfile
from pathlib import Path
import flyte_checkpoint as fc
from flyte_checkpoint.sharded import load_sharded, save_sharded
from harness import mkshard, run_ranks
base = tempfile.mkdtemp(); uri = f"{base}/store/ckpt"
a = mkshard(base, "r0", {"a0": b"0"}); b = mkshard(base, "r1", {"b1": b"1"})
print(run_ranks([dict(checkpoint=uri, folder=f, rank=r, world_size=2, job="j", timeout=10) for r, f in enumerate((a, b))]))
try:
    save_sharded(uri, a, rank=-1, world_size=2, job="j", timeout=3)
except Exception as e: print("save rank=-1:", type(e).__name__, str(e)[:150])
for env in ({"RANK": "-1", "WORLD_SIZE": "2"}, {"RANK": "-2", "WORLD_SIZE": "2"}, {"RANK": "5", "WORLD_SIZE": "2"}):
    os.environ.update(env)
    with fc.Checkpoint(uri + ".n", uri) as cp:
        try:
            p = load_sharded(cp, own=True)
            print(env, "->", sorted(str(q.relative_to(p)) for q in Path(p).rglob("*")))
        except Exception as e: print(env, "->", type(e).__name__, str(e)[:150])
