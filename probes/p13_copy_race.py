"""S3: the base object (the destination) is replaced while the incremental save's first
UploadPartCopy is held at a proxy. The save must end with this save's tree (or raise), never a mix."""
import os, sys, subprocess, tempfile, threading, time
from pathlib import Path
from flyte_checkpoint.testing.faultproxy import FaultProxy
mode = sys.argv[1] if len(sys.argv) > 1 else "diff"
moto = os.environ["FLYTE_CHECKPOINT_S3_ENDPOINT_URL"]
proxy = FaultProxy(moto).start()
base = Path(tempfile.mkdtemp())
uri = f"s3://adv36/c{time.time_ns()}/ckpt"
M = 6 << 20
src = base / "src"; src.mkdir()
for i in range(4): (src / f"f{i}").write_bytes(os.urandom(M))
other = base / "other"; other.mkdir()
for i in range(4): (other / f"f{i}").write_bytes(os.urandom(M) if mode == "diff" else (src / f"f{i}").read_bytes())
if mode == "empty": other = None
env_direct = dict(os.environ)
def push(path, u):
    r = subprocess.run([sys.executable, "-m", "flyte_checkpoint.cli", "push", str(path), u], capture_output=True, env=env_direct, text=True)
    assert r.returncode == 0, r.stderr
push(src, uri)
os.environ["FLYTE_CHECKPOINT_S3_ENDPOINT_URL"] = proxy.url
import flyte_checkpoint as fc
from harness import tree
hold = proxy.hold(b"x-amz-copy-source", times=1)
(src / "f2").write_bytes(os.urandom(M))
out = {}
def saver():
    try:
        with fc.Checkpoint(uri) as cp: cp.save_sync(src)
        out["r"] = "ok"
    except Exception as e:
        out["r"] = f"{type(e).__name__}: {e}"
t = threading.Thread(target=saver); t.start()
hold.wait_held(1)
if mode == "rm":
    subprocess.run([sys.executable, "-m", "flyte_checkpoint.cli", "rm", uri], env=env_direct, check=True)
else:
    push(other, uri)
hold.release_all()
t.join(300)
print(mode, "save:", out.get("r", "HANG")[:300])
with fc.Checkpoint(uri + ".n", uri) as cp:
    try:
        got = tree(cp.load_sync())
        w = {p.name: p.read_bytes() for p in src.iterdir()}
        print("load:", "OK this save" if got == w else ("the replacement" if other and got == {p.name: p.read_bytes() for p in other.iterdir()} else f"OTHER {None if got is None else sorted(got)}"))
    except Exception as e:
        print("load FAILED", type(e).__name__, str(e)[:300])
proxy.stop()
