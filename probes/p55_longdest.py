"""A sharded save to a destination whose name is 255 bytes (ASCII / UTF-8) on the file store."""
import os, sys, tempfile
from pathlib import Path
import flyte_checkpoint as fc
from harness import mkshard, run_ranks, tree
name = sys.argv[1]
base = Path(tempfile.mkdtemp())
nm = {"ascii": "c" * 255, "utf8": "é" * 127 + "c", "spaces": ("a b " * 63) + "abc"}[name]
print(len(nm.encode()))
uri = str(base / "store" / nm)
shards = [mkshard(base, f"r{r}", {f"r{r}.bin": bytes([r]) * 1000}) for r in range(2)]
print(name, [x[:300] for x in run_ranks([dict(checkpoint=uri, folder=f, rank=r, world_size=2, job="j", timeout=20) for r, f in enumerate(shards)])])
with fc.Checkpoint(str(base / "next"), uri) as cp:
    try: print("load:", sorted(tree(cp.load_sync()) or []))
    except Exception as e: print("load FAILED", type(e).__name__, str(e)[:200])
print(sorted(os.listdir(base / "store")))
