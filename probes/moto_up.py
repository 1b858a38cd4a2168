import sys, time
from flyte_checkpoint_s3_tests.server import run_server
with run_server(min_part_size=None) as s:
    s.create_bucket("adv36")
    print(s.endpoint, flush=True)
    open("/tmp/adv36_moto", "w").write(s.endpoint)
    time.sleep(3 * 3600)
