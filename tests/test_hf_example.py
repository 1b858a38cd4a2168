"""examples/hf_trainer_retention.py: HF Trainer's save_total_limit, mirrored with a retention policy."""

from __future__ import annotations

import re

from tests.test_examples import run
from tests.test_frameworks import need


def test_hf_trainer_remote_keeps_what_save_total_limit_keeps(tmp_path):
    need("transformers", "transformers")
    need("accelerate", "accelerate")
    out = run("hf_trainer_retention.py", tmp_path)
    assert "attempt 0: starting fresh" in out
    assert re.search(r"attempt 1: resuming from checkpoint-\d+", out)
    local = re.search(r"local:  (.*)", out)
    remote = re.search(r"remote: (.*)", out)
    assert local and remote and local.group(1) == remote.group(1) == "['checkpoint-10', 'checkpoint-8']"
    assert "history: [10]" in out  # keep_last=1: no older copy of the folder
