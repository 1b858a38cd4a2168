"""A file grows between a rank's walk (its bound, its part plan) and its read: do its parts
stay within its part numbers? World 9,999 on S3: rank 1 owns part number 2 only."""
import os, sys, tempfile, time, threading, boto3
from pathlib import Path
from harness import mkshard, run_ranks
ep = os.environ["FLYTE_CHECKPOINT_S3_ENDPOINT_URL"]
s3 = boto3.client("s3", endpoint_url=ep)
pre = f"g{time.time_ns()}"
uri = f"s3://adv36/{pre}/ckpt"
W = int(sys.argv[1]) if len(sys.argv) > 1 else 9999
grow = int(sys.argv[2]) if len(sys.argv) > 2 else 30 << 20
base = Path(tempfile.mkdtemp())
small = mkshard(base, "small", {"s.bin": b"s" * 1000})
f1 = mkshard(base, "r1", {"x.bin": b"x" * 1000})
seen = {}
stop = threading.Event()
def watch():
    while not stop.is_set():
        try:
            for u in s3.list_multipart_uploads(Bucket="adv36", Prefix=pre).get("Uploads", []):
                for p in s3.list_parts(Bucket="adv36", Key=u["Key"], UploadId=u["UploadId"]).get("Parts", []):
                    seen[p["PartNumber"]] = p["Size"]
        except Exception:
            pass
        time.sleep(0.1)
threading.Thread(target=watch, daemon=True).start()
res = {}
def r1():
    res[1] = run_ranks([dict(checkpoint=uri, folder=f1, rank=1, world_size=W, job="j", timeout=15)], 300)
t = threading.Thread(target=r1); t.start()
time.sleep(2.0)
with open(f1 / "x.bin", "ab") as f: f.write(os.urandom(grow))
res[0] = run_ranks([dict(checkpoint=uri, folder=small, rank=0, world_size=W, job="j", timeout=15)], 300)
t.join()
stop.set()
print("parts seen (number: size):", dict(sorted(seen.items())))
print(res[0][0][:300]); print(res[1][0][:300])
