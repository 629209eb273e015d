"""A bootstrap restarted in front of a bad file runs the last good configuration, and says so.

Before, the last good configuration lived only in the bootstrap's memory: killed (an OOM, a node
drain, `kill -9`) while the pool file was bad, the restarted bootstrap exited 1 and the pool had
no autoscaler until someone fixed the file. Now the configuration the autoscaler finished a run
under is kept in ``$CMAN_LAST_GOOD_DIR``; the restart runs it with one ERROR line and a
``config_rejected`` event, and applies the file once it is fixed.
"""

from __future__ import annotations

import signal
import time

import pytest

from itests.test_process_tree import tree_config
from itests.tree_helpers import Bootstrap
from itests.tree_helpers import signal_block
from itests.tree_helpers import unique_name

pytestmark = pytest.mark.slow


def test_a_restart_facing_a_bad_file_runs_the_kept_configuration(tmp_path, moto_server, signal_versions):
    config = tree_config(tmp_path, moto_server, signal_versions, versions=("v1",))
    config.write_main(signal_block(unique_name(), "v1"))
    config.write_pool({})
    good = config.pool_path.read_text()
    cman_args = "--period 0.3"
    first = Bootstrap(config, tmp_path, cman_args=cman_args, autoscaler="tree_autoscaler.py", name="first")
    second: Bootstrap | None = None
    try:
        first.wait_for_run(lambda r: r["max_capacity"] == 9, timeout=60)
        first.wait_kept()

        config.pool_path.write_text(good + "max_capacity: [\n")  # garbage: malformed YAML
        first.wait_log("malformed YAML")
        first.proc.send_signal(signal.SIGKILL)  # its tree dies with it (parent-death signals)
        first.wait_exit(30)

        restarted = time.monotonic()
        second = Bootstrap(config, tmp_path, cman_args=cman_args, autoscaler="tree_autoscaler.py", name="second")
        run = second.wait_for_run(lambda r: True, timeout=60)
        recovered = time.monotonic() - restarted
        assert run["max_capacity"] == 9
        errors = [line for line in second.stderr.splitlines() if " ERROR " in line]
        assert len(errors) == 1, errors
        assert "CONFIGURATION ROLLED BACK: " + str(config.pool_path) in errors[0]
        assert "malformed YAML" in errors[0] and "the bootstrap starts with the last configuration" in errors[0]
        rolled = second.wait_for_run(lambda r: any(e[0] == "CONFIG_REJECTED" for e in r["config_events"]))
        _, path, message = [e for e in rolled["config_events"] if e[0] == "CONFIG_REJECTED"][-1]
        assert path == str(config.pool_path) and "CONFIGURATION ROLLED BACK" in message
        print(f"bootstrap restarted facing a bad file: the kept configuration runs {recovered:.1f} s after the start")

        config.pool_path.write_text(good.replace("max_capacity: 9", "max_capacity: 8"))
        fixed = time.monotonic()
        second.wait_for_run(lambda r: r["max_capacity"] == 8, timeout=60)
        print(f"the fixed file runs {time.monotonic() - fixed:.1f} s after the edit")
        second.proc.send_signal(signal.SIGTERM)
        assert second.wait_exit(60) == 0
    finally:
        first.kill()
        if second is not None:
            second.kill()
