"""prev replaced (push of another tree) between load() and the first save of the attempt."""
import os, sys, tempfile, time, subprocess
from pathlib import Path
import flyte_checkpoint as fc
from harness import tree
scheme = sys.argv[1] if len(sys.argv) > 1 else "file"
case = sys.argv[2] if len(sys.argv) > 2 else "shift"
M = 5 << 20
base = Path(tempfile.mkdtemp())
root = str(base / "store") if scheme == "file" else (f"memory://d{time.time_ns()}" if scheme == "memory" else f"{scheme}/d{time.time_ns()}")
prev, dest = root + "/a1", root + "/a2"
src = base / "src"; src.mkdir()
for i in range(4):
    (src / f"f{i}").write_bytes(os.urandom(M + 1000 * i))
other = base / "other"; other.mkdir()
for i in range(4):
    (other / f"f{i}").write_bytes((src / f"f{i}").read_bytes() if case == "shift" else os.urandom(M + 1000 * i))
(other / "aaaa").write_bytes(os.urandom(300000))  # sorts first: shifts every offset
with fc.Checkpoint(prev) as cp:
    cp.save_sync(src)
def push(path, u):
    r = subprocess.run([sys.executable, "-m", "flyte_checkpoint.cli", "push", str(path), u], capture_output=True)
    assert r.returncode == 0, r.stderr
with fc.Checkpoint(dest, prev) as cp:
    got = tree(cp.load_sync())
    assert got == {p.name: p.read_bytes() for p in src.iterdir()}
    push(other, prev) if scheme == "file" else None
    if scheme == "memory":
        with fc.Checkpoint(prev) as c2: c2.save_sync(other)
    (src / "f1").write_bytes(os.urandom(M + 1000))
    try:
        cp.save_sync(src)
    except Exception as e:
        print("save failed", type(e).__name__, e)
    with fc.Checkpoint(dest + ".n", dest) as c3:
        got = tree(c3.load_sync())
    w = {p.name: p.read_bytes() for p in src.iterdir()}
    print(case, scheme, "OK" if got == w else f"MISMATCH {[k for k in w if w[k] != got.get(k)]} extra={set(got)-set(w)}")
