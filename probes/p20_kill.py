"""Attempt 1: world of N ranks as processes, SIGKILL one (or rank 0) at a random time; the others
must raise (not hang). Attempt 2: same job, fresh data; must commit exactly attempt 2's data."""
import os, sys, random, subprocess, tempfile, time, signal
from pathlib import Path
from harness import mkshard, load
scheme, victim, N, size, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
same_job = (sys.argv[6] if len(sys.argv) > 6 else "same") == "same"
random.seed(seed)
base = tempfile.mkdtemp()
uri = f"{base}/store/ckpt" if scheme == "file" else f"{scheme}/k{time.time_ns()}/ckpt"
here = os.path.dirname(os.path.abspath(__file__))
def attempt(tag, kill_at, timeout):
    data = {}
    procs = []
    for r in range(N):
        blob = os.urandom(size)
        d = mkshard(base, f"{tag}-r{r}", {f"r{r}.bin": blob}); data[f"r{r}.bin"] = blob
        procs.append(subprocess.Popen([sys.executable, os.path.join(here, "rank_proc.py"), uri, str(r), str(N), "job1" if same_job else f"job-{tag}", str(d), str(timeout)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    if kill_at is not None:
        time.sleep(kill_at)
        procs[victim].send_signal(signal.SIGKILL)
    outs = []
    t0 = time.time()
    for r, p in enumerate(procs):
        try:
            o, e = p.communicate(timeout=timeout * 4 + 60)
            outs.append(o.strip()[-300:] or f"rc={p.returncode} {e.strip()[-200:]}")
        except subprocess.TimeoutExpired:
            p.kill(); outs.append("HANG")
    return data, outs
kill_at = random.uniform(float(os.environ.get("KMIN", 0.2)), float(os.environ.get("KMAX", 1.5)))
d1, o1 = attempt("a1", kill_at, 8)
print(f"attempt1 kill rank {victim} at {kill_at:.2f}s:", *o1, sep="\n  ")
try:
    t = load(uri); print("after attempt1 load:", None if t is None else sorted(t), "== a1" if t == d1 else "")
except Exception as e:
    print("after attempt1 load FAILED", type(e).__name__, str(e)[:200])
d2, o2 = attempt("a2", None, 20)
print("attempt2:", *o2, sep="\n  ")
try:
    t = load(uri)
    print("after attempt2 load:", "OK a2" if t == d2 else ("a1!" if t == d1 else f"MISMATCH {None if t is None else sorted(t)}"))
except Exception as e:
    print("after attempt2 load FAILED", type(e).__name__, str(e)[:300])
