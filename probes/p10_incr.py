"""Incremental saves on odd trees: save, modify, save again, load, compare."""
import os, sys, tempfile, time
from pathlib import Path
import flyte_checkpoint as fc
from harness import tree
scheme = sys.argv[1] if len(sys.argv) > 1 else "file"
M = 5 << 20
base = Path(tempfile.mkdtemp())
uri = str(base / "store/ckpt") if scheme == "file" else (f"memory://i{time.time_ns()}/ckpt" if scheme == "memory" else f"{scheme}/i{time.time_ns()}/ckpt")
src = base / "src"; src.mkdir()
files = {
    "empty": b"",
    "tiny": b"x",
    "m5": os.urandom(M),
    "m5-1": os.urandom(M - 1),
    "m5+1": os.urandom(M + 1),
    "zeros": bytes(M),
    "sp ace/ünï cödé.bin": os.urandom(70000),
    ("L" * 200) + "/" + ("n" * 250): os.urandom(70000),
    ".fcp-index": os.urandom(70000),
    "index.json": os.urandom(70000),
    "a/b/c": os.urandom(100000),
    "dup1": b"D" * 200000,
    "dup2": b"D" * 200000,
}
for k, v in files.items():
    p = src / k; p.parent.mkdir(parents=True, exist_ok=True); p.write_bytes(v)
with open(src / "sparse", "wb") as f:
    f.truncate(12 << 20); f.seek(6 << 20); f.write(b"mid"); 
os.symlink("m5", src / "link")
def want():
    return {str(p.relative_to(src)): p.read_bytes() for p in sorted(src.rglob("*")) if p.is_file()}
def check(label):
    with fc.Checkpoint(uri + ".n", uri) as cp:
        got = tree(cp.load_sync())
    w = want()
    bad = [k for k in set(w) | set(got) if w.get(k) != got.get(k)]
    print(label, "OK" if not bad else f"MISMATCH {bad[:5]}", flush=True)
with fc.Checkpoint(uri) as cp:
    cp.save_sync(src); check("first")
    (src / "m5").write_bytes(os.urandom(M)); cp.save_sync(src); check("m5 changed")
    (src / "tiny").write_bytes(b"y"); cp.save_sync(src); check("tiny changed")
    (src / "dup1").write_bytes(b"E" * 200000); cp.save_sync(src); check("dup1 changed")
    os.rename(src / "m5-1", src / "renamed"); cp.save_sync(src); check("rename")
    (src / "zeros").write_bytes(bytes(M - 7) + b"1234567"); cp.save_sync(src); check("zeros tail")
    os.remove(src / "link"); os.symlink("tiny", src / "link"); cp.save_sync(src); check("relink")
    # swap contents of two same-size files
    a, b = (src / "m5").read_bytes(), (src / "zeros").read_bytes()
    (src / "m5").write_bytes(b); (src / "zeros").write_bytes(a); cp.save_sync(src); check("swap")
    cp.save_sync(src); check("unchanged")
