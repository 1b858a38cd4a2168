"""Random trees around S3's 5 MiB part and 64 KiB thresholds; random changes; every load checked."""
import os, sys, random, tempfile, time, shutil
from pathlib import Path
import flyte_checkpoint as fc
from harness import tree
scheme, seed, gens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(seed)
M = 5 << 20; K = 64 << 10
SIZES = [0, 1, 511, 512, 513, K - 1, K, K + 1, M - 1024, M - 512, M - 513, M, M + 1, M + 512, 2 * M - 512, 8 << 20, (8 << 20) + (5 << 20) - 512, 3 << 20, 1 << 20]
base = Path(tempfile.mkdtemp())
uri = f"{base}/store/ckpt" if scheme == "file" else (f"memory://f{seed}-{time.time_ns()}/ckpt" if scheme == "memory" else f"{scheme}/f{seed}-{time.time_ns()}/ckpt")
src = base / "src"; src.mkdir()
def rbytes(n):
    kind = rnd.random()
    if kind < 0.2: return bytes(n)
    if kind < 0.3: return (b"abc" * (n // 3 + 1))[:n]
    return rnd.randbytes(n)
names = [f"d{rnd.randint(0,2)}/f{i:02d}" if rnd.random() < 0.5 else f"f{i:02d}" for i in range(rnd.randint(3, 12))]
for n in names:
    p = src / n; p.parent.mkdir(parents=True, exist_ok=True); p.write_bytes(rbytes(rnd.choice(SIZES)))
bad = 0
for g in range(gens):
    with fc.Checkpoint(uri) as cp:
        cp.save_sync(src)
    with fc.Checkpoint(uri + ".n", uri) as cp:
        try:
            got = tree(cp.load_sync())
        except Exception as e:
            print(f"seed {seed} gen {g}: LOAD FAILED {type(e).__name__}: {str(e)[:300]}", flush=True); bad += 1; break
    want = {str(p.relative_to(src)): p.read_bytes() for p in sorted(src.rglob("*")) if p.is_file()}
    if got != want:
        print(f"seed {seed} gen {g}: MISMATCH {[k for k in set(want)|set(got) if want.get(k)!=got.get(k)][:5]}", flush=True); bad += 1; break
    # mutate
    files = [p for p in src.rglob("*") if p.is_file()]
    for _ in range(rnd.randint(1, 3)):
        op = rnd.random(); p = rnd.choice(files)
        if op < 0.5: p.write_bytes(rbytes(p.stat().st_size))  # same size, new bytes
        elif op < 0.65: p.write_bytes(rbytes(rnd.choice(SIZES)))
        elif op < 0.75: p.write_bytes(p.read_bytes())  # same bytes, new mtime
        elif op < 0.85:
            q = src / f"n{g}-{rnd.randint(0,99)}"; q.write_bytes(rbytes(rnd.choice(SIZES)))
        elif op < 0.95 and len(files) > 2: p.unlink(); files.remove(p)
        else:
            with open(p, "r+b") as f:
                sz = p.stat().st_size
                if sz: f.seek(rnd.randrange(sz)); f.write(b"\x01")
print(f"seed {seed}: {gens} gens, {'OK' if not bad else 'FAILED'}", flush=True)
