"""Run sharded-save ranks as threads; collect outcomes."""
import os, threading, traceback, hashlib
from pathlib import Path
import flyte_checkpoint as fc
from flyte_checkpoint.sharded import save_sharded, load_sharded


def run_ranks(specs, timeout=30):
    """specs: list of dicts of kwargs for save_sharded incl. 'checkpoint', 'folder'. Returns list of results."""
    results = [None] * len(specs)
    def go(i, kw):
        try:
            kw = dict(kw)
            cp = kw.pop("checkpoint"); folder = kw.pop("folder")
            save_sharded(cp, folder, **kw)
            results[i] = "ok"
        except BaseException as e:  # noqa
            results[i] = f"{type(e).__name__}: {e}"
    ts = [threading.Thread(target=go, args=(i, kw), daemon=True) for i, kw in enumerate(specs)]
    for t in ts: t.start()
    for t in ts: t.join(timeout)
    for i, t in enumerate(ts):
        if t.is_alive(): results[i] = "HANG"
    return results


def tree(path):
    if path is None: return None
    p = Path(path)
    if p.is_file(): return {"<payload>": p.read_bytes()}
    return {str(f.relative_to(p)): f.read_bytes() for f in sorted(p.rglob("*")) if f.is_file()}


def load(uri):
    with fc.Checkpoint(uri + ".next", uri) as cp:
        return tree(cp.load_sync())


def mkshard(root, name, files):
    d = Path(root) / name
    d.mkdir(parents=True, exist_ok=True)
    for k, v in files.items():
        f = d / k; f.parent.mkdir(parents=True, exist_ok=True); f.write_bytes(v)
    return d
