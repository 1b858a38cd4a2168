"""Azure: an incremental save's Put Block From URL fails (source deleted while held / answered
403/500): does any error or log line carry the SAS signature or the account key?"""
import os, sys, tempfile, threading, time, logging, io, re, subprocess
from pathlib import Path
from flyte_checkpoint.testing.faultproxy import FaultProxy
mode = sys.argv[1]
cs = os.environ["FLYTE_CHECKPOINT_AZURE_CONNECTION_STRING"]
ep = re.search(r"BlobEndpoint=([^;]+)", cs).group(1)
host = ep.split("/devstoreaccount1")[0]
key = re.search(r"AccountKey=([^;]+)", cs).group(1)
proxy = FaultProxy(host).start()
base = Path(tempfile.mkdtemp())
uri = f"az://adv36/s{time.time_ns()}/ckpt"
src = base / "src"; src.mkdir()
for i in range(4): (src / f"f{i}").write_bytes(os.urandom(1 << 20))
os.environ["FLYTE_CHECKPOINT_AZURE_CONNECTION_STRING"] = cs.replace(host, proxy.url)
import flyte_checkpoint as fc
with fc.Checkpoint(uri) as cp: cp.save_sync(src)
buf = io.StringIO(); h = logging.StreamHandler(buf); h.setLevel(logging.DEBUG)
logging.getLogger().addHandler(h); logging.getLogger().setLevel(logging.DEBUG)
(src / "f1").write_bytes(os.urandom(1 << 20))
if mode in ("403", "500", "404", "400"):
    proxy.fail_request(lambda line: "comp=block" in line and "blockid" in line.lower(), nth=1, times=100, status=int(mode)) if False else None
out = {}
if mode == "delete":
    hold = proxy.hold(b"x-ms-copy-source", times=1)
    def saver():
        try:
            with fc.Checkpoint(uri) as cp: cp.save_sync(src)
            out["r"] = "ok"
        except Exception as e: out["r"] = f"{type(e).__name__}: {e}"
    t = threading.Thread(target=saver); t.start()
    hold.wait_held(1)
    from azure.storage.blob import BlobServiceClient
    BlobServiceClient.from_connection_string(cs).get_blob_client("adv36", uri.split("adv36/", 1)[1]).delete_blob()
    hold.release_all(); t.join(300)
else:
    import inspect
    print(inspect.signature(proxy.fail_request))
    from flyte_checkpoint.testing.faultproxy import Fault
    proxy.fail_request(lambda line: "comp=block" in line and os.environ.get("ADV_MATCH", "") in line, Fault.answer(int(mode)), times=1000)
    try:
        with fc.Checkpoint(uri) as cp: cp.save_sync(src)
        out["r"] = "ok"
    except Exception as e: out["r"] = f"{type(e).__name__}: {e}"
text = out.get("r", "HANG") + "\n" + buf.getvalue()
print(mode, "result:", out.get("r", "HANG")[:400])
for pat in ("sig=", key[:20], "AccountKey"):
    if pat in text:
        i = text.index(pat); print("LEAK", repr(pat), "...", text[max(0, i - 200): i + 80].replace("\n", " | "))
proxy.stop()
