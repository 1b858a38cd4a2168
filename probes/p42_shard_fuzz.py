"""Sharded saves with random per-rank trees around S3's part boundaries; every load checked."""
import os, sys, random, tempfile, time
from pathlib import Path
import flyte_checkpoint as fc
from flyte_checkpoint.sharded import load_sharded
from harness import run_ranks, tree
scheme, seed, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(seed)
M = 5 << 20; P = 8 << 20
SIZES = [0, 1, 512, M - 1024, M - 600, M - 512, M, M + 1, P - 512, P, P + M - 1024, P + M, 2 * P - 512, 3 << 20]
for it in range(n):
    base = Path(tempfile.mkdtemp())
    uri = f"{base}/store/ckpt" if scheme == "file" else (f"memory://h{seed}-{time.time_ns()}/ckpt" if scheme == "memory" else f"{scheme}/h{seed}-{it}-{time.time_ns()}/ckpt")
    W = rnd.randint(1, 4)
    specs, want, own = [], {}, []
    for r in range(W):
        d = base / f"r{r}"; d.mkdir()
        mine = {}
        for i in range(rnd.choice([0, 1, 1, 2, 3])):
            sz = rnd.choice(SIZES)
            data = bytes(sz) if rnd.random() < 0.3 else rnd.randbytes(sz)
            (d / f"r{r}-{i}").write_bytes(data); mine[f"r{r}-{i}"] = data
        want.update(mine); own.append(mine)
        specs.append(dict(checkpoint=uri, folder=d, rank=r, world_size=W, job="j", timeout=60))
    res = run_ranks(specs, 600)
    sizes = [sorted(len(v) for v in o.values()) for o in own]
    if any(x != "ok" for x in res):
        print(f"seed {seed} it {it} W={W} sizes={sizes}: SAVE {[x[:300] for x in res]}", flush=True); continue
    try:
        with fc.Checkpoint(uri + ".n", uri) as cp:
            got = tree(cp.load_sync())
        ok = got == want
        for r in range(W):
            with fc.Checkpoint(uri + f".o{r}", uri) as cp:
                p = load_sharded(cp, own=True, rank=r)
                g = tree(p) if p else None
                if g != own[r]: ok = False; print(f"  own rank {r}: {None if g is None else sorted(g)} want {sorted(own[r])}")
        print(f"seed {seed} it {it} W={W} sizes={sizes}: {'OK' if ok else 'MISMATCH'}", flush=True)
    except Exception as e:
        print(f"seed {seed} it {it} W={W} sizes={sizes}: LOAD FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
