"""Incremental save over a damaged / replaced base at the destination (and as prev)."""
import os, sys, tempfile, time, tarfile, io, gzip, subprocess
from pathlib import Path
import flyte_checkpoint as fc
from harness import tree
scheme = sys.argv[1] if len(sys.argv) > 1 else "file"
case = sys.argv[2]
M = 5 << 20
base = Path(tempfile.mkdtemp())
root = str(base / "store") if scheme == "file" else (f"memory://d{time.time_ns()}" if scheme == "memory" else f"{scheme}/d{time.time_ns()}")
uri = root + "/ckpt"
src = base / "src"; src.mkdir()
for i in range(6):
    (src / f"f{i}").write_bytes(os.urandom(M + 1000 * i))
(src / "small").write_bytes(b"s" * 100)
def want():
    return {str(p.relative_to(src)): p.read_bytes() for p in sorted(src.rglob("*")) if p.is_file()}
from flyte_checkpoint.storage import registry  # noqa
def raw_get(u):
    with fc.Checkpoint(u + ".x", u) as cp:
        pass
def check(label, u=uri):
    with fc.Checkpoint(u + ".n", u) as cp:
        try:
            got = tree(cp.load_sync())
        except Exception as e:
            print(label, "LOAD FAILED", type(e).__name__, str(e)[:300]); return
    w = want()
    bad = [k for k in set(w) | set(got or {}) if w.get(k) != (got or {}).get(k)]
    print(label, "OK" if not bad else f"MISMATCH {bad[:5]}", flush=True)
def pull_bytes(u):
    out = subprocess.run([sys.executable, "-m", "flyte_checkpoint.cli", "pull", u, "-"], capture_output=True)
    assert out.returncode == 0, out.stderr
    return out.stdout
def push_bytes(u, data):
    out = subprocess.run([sys.executable, "-m", "flyte_checkpoint.cli", "push", "-", u], input=data, capture_output=True)
    assert out.returncode == 0, out.stderr
with fc.Checkpoint(uri) as cp:
    cp.save_sync(src)
data = pull_bytes(uri)
print("object", len(data))
if case == "truncate":
    new = data[: len(data) // 2]
elif case == "truncate_tail":
    new = data[:-100]
elif case == "garble_tail":
    new = bytearray(data); 
    for j in range(1, 400, 7): new[-j] ^= 0x55
    new = bytes(new)
elif case == "garble_mid":
    new = bytearray(data); new[len(data)//2] ^= 1; new = bytes(new)
elif case == "payload":
    new = b"just bytes" * 1000
elif case == "flyte":
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w:gz") as tf:
        for p in sorted(src.iterdir()): tf.add(p, arcname=p.name)
    new = bio.getvalue()
elif case == "appendjunk":
    new = data + b"\0" * 1000
elif case == "zero":
    new = b""
if case == "zero":
    subprocess.run([sys.executable, "-m", "flyte_checkpoint.cli", "push", "--allow-empty", "-", uri], input=b"", check=True)
else:
    push_bytes(uri, new)
(src / "f2").write_bytes(os.urandom(M + 2000))
with fc.Checkpoint(uri) as cp:
    try:
        cp.save_sync(src); check(f"{case}: save over damaged dest")
    except Exception as e:
        print(case, "SAVE FAILED", type(e).__name__, str(e)[:300])
# as prev: new attempt
u2 = root + "/ckpt2"
push_bytes(uri, new) if case != "zero" else None
with fc.Checkpoint(u2, uri) as cp:
    try:
        cp.save_sync(src); check(f"{case}: save with damaged prev", u2)
    except Exception as e:
        print(case, "SAVE2 FAILED", type(e).__name__, str(e)[:300])
