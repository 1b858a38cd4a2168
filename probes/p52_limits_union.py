"""Load limits apply to a save: does a sharded save whose union breaks them commit?"""
import os, sys, tempfile, time
from pathlib import Path
import flyte_checkpoint as fc
from harness import mkshard, run_ranks, tree
scheme = sys.argv[1]; var = sys.argv[2]
base = Path(tempfile.mkdtemp())
uri = f"{base}/store/ckpt" if scheme == "file" else (f"memory://u{time.time_ns()}/ckpt" if scheme == "memory" else f"{scheme}/u{time.time_ns()}/ckpt")
if var == "members":
    os.environ["FLYTE_CHECKPOINT_MAX_MEMBERS"] = "10"
    shards = [mkshard(base, f"r{r}", {f"r{r}-{i}": b"x" for i in range(7)}) for r in range(2)]
else:
    os.environ["FLYTE_CHECKPOINT_MAX_UNPACKED_BYTES"] = str(1 << 20)
    shards = [mkshard(base, f"r{r}", {f"r{r}.bin": os.urandom(700_000)}) for r in range(2)]
# each rank's own shard fits; a plain save of one shard is fine:
with fc.Checkpoint(str(base / "single") if scheme == "file" else uri + "-single") as cp:
    cp.save_sync(shards[0])
print("sharded:", [r[:200] for r in run_ranks([dict(checkpoint=uri, folder=f, rank=r, world_size=2, job="j", timeout=30) for r, f in enumerate(shards)])])
with fc.Checkpoint(uri + ".n", uri) as cp:
    try:
        got = tree(cp.load_sync()); print("load:", None if got is None else sorted(got))
    except Exception as e:
        print("load FAILED", type(e).__name__, str(e)[:300])
