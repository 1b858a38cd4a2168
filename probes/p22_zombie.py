"""Attempt 1 (ranks 0, 1 of 3; rank 2 never comes) still alive while attempt 2 of the same job
starts all 3 ranks on the same URI. Never a mix of the two attempts."""
import os, sys, subprocess, tempfile, time, signal
from harness import mkshard, load
scheme = sys.argv[1]; order = sys.argv[2] if len(sys.argv) > 2 else "012"
base = tempfile.mkdtemp()
uri = f"{base}/store/ckpt" if scheme == "file" else f"{scheme}/z{time.time_ns()}/ckpt"
here = os.path.dirname(os.path.abspath(__file__))
N = 3
def start(tag, r, data, timeout):
    blob = os.urandom(1 << 20); data[f"r{r}.bin"] = blob
    d = mkshard(base, f"{tag}-r{r}", {f"r{r}.bin": blob})
    return subprocess.Popen([sys.executable, os.path.join(here, "rank_proc.py"), uri, str(r), str(N), "job1", str(d), str(timeout)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
d1 = {}
p1 = [start("a1", 0, d1, 20), start("a1", 1, d1, 20)]
time.sleep(4)
d2 = {}
p2 = []
for r in order:
    p2.append(start("a2", int(r), d2, 20)); time.sleep(1)
def res(ps):
    out = []
    for p in ps:
        try: out.append(p.communicate(timeout=200)[0].strip()[-300:])
        except subprocess.TimeoutExpired: p.kill(); out.append("HANG")
    return out
print("attempt1:", *res(p1), sep="\n  ")
print("attempt2:", *res(p2), sep="\n  ")
try:
    t = load(uri)
    if t == d2: print("load: OK attempt 2")
    elif t is None: print("load: None")
    else: print("load: MIX/OTHER", {k: ("a2" if v == d2.get(k) else "a1" if v == d1.get(k) else "??") for k, v in t.items()})
except Exception as e:
    print("load FAILED", type(e).__name__, str(e)[:300])
