"""World past the store's part limits; a shard that does not fit (sparse file)."""
import os, sys, tempfile, time, boto3
from pathlib import Path
from harness import mkshard, run_ranks
case = sys.argv[1]
ep = os.environ["FLYTE_CHECKPOINT_S3_ENDPOINT_URL"]
s3 = boto3.client("s3", endpoint_url=ep)
pre = f"l{time.time_ns()}"
uri = f"s3://adv36/{pre}/ckpt"
base = Path(tempfile.mkdtemp())
small = mkshard(base, "small", {"s.bin": b"s" * 1000})
def leftovers():
    objs = [o["Key"] for o in s3.list_objects_v2(Bucket="adv36", Prefix=pre).get("Contents", [])]
    ups = [(u["Key"], u["UploadId"]) for u in s3.list_multipart_uploads(Bucket="adv36", Prefix=pre).get("Uploads", [])]
    parts = {k: [(p["PartNumber"], p["Size"]) for p in s3.list_parts(Bucket="adv36", Key=k, UploadId=i).get("Parts", [])] for k, i in ups}
    return objs, parts
t0 = time.time()
if case == "world10000":
    specs = [dict(checkpoint=uri, folder=small, rank=r, world_size=10000, job="j", timeout=5) for r in (0, 1, 9999)]
elif case == "bigshard":
    big = base / "big"; big.mkdir()
    with open(big / "sparse.bin", "wb") as f: f.truncate(6 << 30)
    # world 9999: each rank holds one part (5 GiB); rank 1's 6 GiB cannot fit
    specs = [dict(checkpoint=uri, folder=small, rank=0, world_size=9999, job="j", timeout=5),
             dict(checkpoint=uri, folder=big, rank=1, world_size=9999, job="j", timeout=5)]
elif case == "bigshard2":
    big = base / "big"; big.mkdir()
    with open(big / "sparse.bin", "wb") as f: f.truncate(6 << 30)
    specs = [dict(checkpoint=uri, folder=small, rank=0, world_size=2, job="j", timeout=5),
             dict(checkpoint=uri, folder=big, rank=1, world_size=9999, job="j", timeout=5)]
res = run_ranks(specs, 300)
print(case, [r[:400] for r in res], f"{time.time()-t0:.1f}s")
print("left:", leftovers())
