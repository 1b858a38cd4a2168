import time
from flyte_checkpoint_gcs_tests.server import run_server
with run_server() as s:
    s.create_bucket("adv36")
    open("/tmp/adv36_gcs", "w").write(s.endpoint)
    print("up", s.endpoint, flush=True)
    time.sleep(3 * 3600)
