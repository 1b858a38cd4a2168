"""Odd arguments to save_sharded (two ranks given the same odd value)."""
import os, sys, tempfile, time, math
from pathlib import Path
from harness import mkshard, run_ranks, load
cases = {
    "job=''": dict(job=""), "job='a/b/../c'": dict(job="a/b/../c"), "job=10k": dict(job="x" * 10000),
    "job=nul": dict(job="a\x00b"), "step=-1": dict(step=-1), "step=True": dict(step=True), "step=2**70": dict(step=2**70),
    "step=1.5": dict(step=1.5), "world=True": dict(world_size=True), "rank=True/False": None, "world=2.0": dict(world_size=2.0),
}
for name, extra in cases.items():
    base = Path(tempfile.mkdtemp()); uri = str(base / "store" / "ckpt")
    a = mkshard(base, "r0", {"a": b"a"}); b = mkshard(base, "r1", {"b": b"b"})
    if extra is None:
        specs = [dict(checkpoint=uri, folder=a, rank=False, world_size=2, job="j", timeout=5), dict(checkpoint=uri, folder=b, rank=True, world_size=2, job="j", timeout=5)]
    else:
        base_kw = dict(job="j", world_size=2, timeout=5); base_kw.update(extra)
        specs = [dict(checkpoint=uri, folder=f, rank=r, **base_kw) for r, f in enumerate((a, b))]
    res = run_ranks(specs, 30)
    try: ld = sorted(load(uri) or [])
    except Exception as e: ld = f"{type(e).__name__}"
    print(f"{name}: {[x[:110] for x in res]} load={ld}")
