"""One rank as a process: rank_proc.py URI RANK WORLD JOB FOLDER TIMEOUT [STEP]"""
import sys, time
from flyte_checkpoint.sharded import save_sharded
uri, rank, world, job, folder, timeout = sys.argv[1:7]
step = int(sys.argv[7]) if len(sys.argv) > 7 and sys.argv[7] != "-" else None
t0 = time.time()
try:
    save_sharded(uri, folder, rank=int(rank), world_size=int(world), job=job, timeout=float(timeout), step=step)
    print(f"RESULT rank {rank}: ok {time.time()-t0:.1f}s", flush=True)
except Exception as e:
    print(f"RESULT rank {rank}: {type(e).__name__}: {e} {time.time()-t0:.1f}s", flush=True)
    sys.exit(1)
