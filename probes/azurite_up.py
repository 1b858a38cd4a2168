import time
from flyte_checkpoint_azure_tests.server import run_server
with run_server() as s:
    s.create_bucket("adv36")
    open("/tmp/adv36_azurite", "w").write(s.connection_string)
    print("up", s.endpoint, flush=True)
    time.sleep(3 * 3600)
