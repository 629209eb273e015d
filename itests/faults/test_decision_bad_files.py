"""Bad srv-config files, as real processes see them: one line naming the file, the key and the line,
and nothing started (docs/faults.md, "Decision and configuration")."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from itests.tree_helpers import TreeConfig
from itests.tree_helpers import signal_block
from itests.tree_helpers import unique_name

LIMITS = "scaling_limits: {min_capacity: 1, max_capacity: 9, max_weight_to_add: 5, max_weight_to_remove: 5}\n"


@pytest.mark.parametrize(
    ("pool_text", "message"),
    [
        # YAML alone would run the pool at 90% without a word
        (LIMITS + "autoscaling:\n  setpoint: 0.6\n  setpoint: 0.9\n",
         "autoscaling.setpoint: given twice, at lines 3 and 4: YAML would silently keep the last; remove one"),
        (LIMITS + "autoscaling: {instance_loss_threshold: " + "9" * 5001 + "}\n",
         "autoscaling.instance_loss_threshold: line 2: a number of 5001 digits is too long"),
    ],
)  # fmt: skip
def test_the_bootstrap_refuses_a_bad_pool_file_before_anything_starts(tmp_path, pool_text, message):
    config = TreeConfig(tmp_path, "http://127.0.0.1:9", "unused-bucket", unique_name("pool"))
    config.write_main(signal_block("WhoAmI", "v1"))  # nothing is fetched: the bootstrap stops first
    config.write_pool({}, raw=pool_text)
    env = {
        **os.environ,
        "CMAN_CLUSTER": "itest-cluster",
        "CMAN_POOL": config.pool,
        "CMAN_SCHEDULER": "simulated",
        "CMAN_ENV_CONFIG_PATH": str(config.main_path),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "clusterman.batch.autoscaler_bootstrap"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert f"{config.pool_path}: {message}" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert "starting the tree" not in proc.stderr and "private directory" not in proc.stderr
