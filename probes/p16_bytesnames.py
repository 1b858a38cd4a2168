"""File names that are not UTF-8 (and NFC/NFD twins, backslashes), incremental and sharded."""
import os, sys, tempfile, time, unicodedata
from pathlib import Path
import flyte_checkpoint as fc
from flyte_checkpoint.sharded import load_sharded
from harness import run_ranks, tree
scheme = sys.argv[1]
base = Path(tempfile.mkdtemp())
root = str(base / "store") if scheme == "file" else (f"memory://y{time.time_ns()}" if scheme == "memory" else f"{scheme}/y{time.time_ns()}")
names = [os.fsdecode(b"caf\xe9.bin"), os.fsdecode(b"\xff\xfe"), unicodedata.normalize("NFC", "é.bin"), unicodedata.normalize("NFD", "é.bin"), "a\\b", "tab\tname", "new\nline", " lead", "trail ", "-dash"]
src = base / "src"; src.mkdir()
for i, n in enumerate(names):
    (src / n).write_bytes(os.urandom(70000 + i))
def disk(p):
    return {os.fsencode(str(q.relative_to(p))): q.read_bytes() for q in Path(p).rglob("*") if q.is_file()}
uri = root + "/ckpt"
with fc.Checkpoint(uri) as cp:
    cp.save_sync(src)
    (src / names[2]).write_bytes(os.urandom(70002))
    cp.save_sync(src)
with fc.Checkpoint(uri + ".n", uri) as cp:
    got = disk(cp.load_sync()); print("incremental:", "OK" if got == disk(src) else f"MISMATCH {set(got) ^ set(disk(src))}")
with fc.Checkpoint(uri + ".p", uri) as cp:
    for n in names[:4]:
        try:
            p = cp.load_sync(members=[n]); ok = (p / n).read_bytes() == (src / n).read_bytes()
            print("partial", repr(n), "OK" if ok else "WRONG")
        except Exception as e: print("partial", repr(n), type(e).__name__, str(e)[:150])
# sharded: rank 0 has NFC, rank 1 NFD and the non-UTF-8 names
r0 = base / "r0"; r1 = base / "r1"; r0.mkdir(); r1.mkdir()
(r0 / names[2]).write_bytes(b"nfc"); (r1 / names[3]).write_bytes(b"nfd"); (r1 / names[0]).write_bytes(b"latin1")
suri = root + "/sh"
print("sharded:", [x[:150] for x in run_ranks([dict(checkpoint=suri, folder=f, rank=r, world_size=2, job="j", timeout=20) for r, f in enumerate((r0, r1))])])
for r, f in enumerate((r0, r1)):
    with fc.Checkpoint(suri + f".o{r}", suri) as cp:
        p = load_sharded(cp, own=True, rank=r); g = disk(p)
        print(" own", r, "OK" if g == disk(f) else f"MISMATCH got {sorted(g)} want {sorted(disk(f))}")
