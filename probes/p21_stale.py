"""Attempt 1 (ranks 0, 1 of 3; rank 2 never comes) is killed after rank 1 reported; attempt 2 of the
same job starts at once, its rank 1 late: must commit attempt 2's data, never attempt 1's rank 1."""
import os, sys, subprocess, tempfile, time, signal
from harness import mkshard, load
scheme = sys.argv[1]; delay1 = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
prior = (sys.argv[3] if len(sys.argv) > 3 else "") == "prior"
base = tempfile.mkdtemp()
uri = f"{base}/store/ckpt" if scheme == "file" else f"{scheme}/s{time.time_ns()}/ckpt"
here = os.path.dirname(os.path.abspath(__file__))
N = 3
def start(tag, r, data, timeout):
    blob = os.urandom(1 << 20); data[f"r{r}.bin"] = blob
    d = mkshard(base, f"{tag}-r{r}", {f"r{r}.bin": blob})
    return subprocess.Popen([sys.executable, os.path.join(here, "rank_proc.py"), uri, str(r), str(N), "job1", str(d), str(timeout)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
if prior:
    d0 = {}; ps = [start("a0", r, d0, 30) for r in range(N)]
    print("prior:", [p.communicate()[0].strip()[:80] for p in ps])
d1 = {}
p1 = [start("a1", 0, d1, 60), start("a1", 1, d1, 60)]
time.sleep(4)
for p in p1: p.send_signal(signal.SIGKILL)
for p in p1: p.wait()
d2 = {}
p2 = [start("a2", 0, d2, 30), start("a2", 2, d2, 30)]
time.sleep(delay1)
p2.insert(1, start("a2", 1, d2, 30))
outs = []
for p in p2:
    try: outs.append(p.communicate(timeout=200)[0].strip()[-250:])
    except subprocess.TimeoutExpired: p.kill(); outs.append("HANG")
print("attempt2:", *outs, sep="\n  ")
try:
    t = load(uri)
    if t == d2: print("load: OK attempt 2")
    elif t is None: print("load: None")
    else: print("load: MIX/OTHER", {k: ("a2" if v == d2.get(k) else "a1" if v == d1.get(k) else "prior" if prior and v == d0.get(k) else "??") for k, v in t.items()})
except Exception as e:
    print("load FAILED", type(e).__name__, str(e)[:300])
