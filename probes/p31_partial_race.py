"""S3: a partial load (members=) while the object is replaced between its ranged reads."""
import os, sys, subprocess, tempfile, threading, time
from pathlib import Path
from flyte_checkpoint.testing.faultproxy import FaultProxy
nth = int(sys.argv[1]); mode = sys.argv[2] if len(sys.argv) > 2 else "same-layout"
what = sys.argv[3] if len(sys.argv) > 3 else "partial"
moto = os.environ["FLYTE_CHECKPOINT_S3_ENDPOINT_URL"]
proxy = FaultProxy(moto).start()
base = Path(tempfile.mkdtemp())
uri = f"s3://adv36/p{time.time_ns()}/ckpt"
A = base / "A"; A.mkdir(); B = base / "B"; B.mkdir()
for i in range(4):
    (A / f"f{i}").write_bytes(os.urandom(1 << 20))
    (B / f"f{i}").write_bytes(os.urandom((1 << 20) + (0 if mode == "same-layout" else 777 * i)))
env_direct = dict(os.environ)
def push(path):
    r = subprocess.run([sys.executable, "-m", "flyte_checkpoint.cli", "push", str(path), uri], capture_output=True, env=env_direct, text=True)
    assert r.returncode == 0, r.stderr
push(A)
os.environ["FLYTE_CHECKPOINT_S3_ENDPOINT_URL"] = proxy.url
import flyte_checkpoint as fc
hold = proxy.hold(b"ange: bytes=", times=100)
out = {}
def loader():
    try:
        with fc.Checkpoint(str(base / "next"), uri) as cp:
            p = cp.load_sync(members=["f1", "f3"]) if what == "partial" else cp.load_sync()
            out["r"] = {q.name: q.read_bytes() for q in Path(p).rglob("*") if q.is_file()}
    except Exception as e:
        out["r"] = f"{type(e).__name__}: {e}"
t = threading.Thread(target=loader); t.start()
for k in range(1, nth):
    hold.wait_held(k); hold.release(1)
try:
    hold.wait_held(nth, timeout=20)
    push(B)
    replaced = True
except AssertionError:
    replaced = False
hold.release_all()
t.join(120)
r = out.get("r", "HANG")
def which(r):
    if isinstance(r, str): return r[:300]
    s = {}
    for k, v in r.items():
        s[k] = "A" if v == (A / k).read_bytes() else "B" if v == (B / k).read_bytes() else "?"
    return s
print(what, mode, "hold at ranged GET", nth, "replaced" if replaced else "(fewer ranged GETs)", "->", which(r))
proxy.stop()
