"""A pool file that validates but makes the autoscaler crash at start-up: the bootstrap rolls back.

Before, a crash loop after a configuration change stopped the tree (exit 1) although the previous
configuration had run fine. Now the bootstrap (real supervisord, real programs) goes back to the
last configuration its autoscaler finished runs under, says so in one ERROR line, reports
``config_rejected``, and applies the next edit of the file.
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

STAND_IN = "tree_autoscaler.py"


def test_a_crash_loop_after_a_change_rolls_back_and_a_later_edit_is_applied(tmp_path, moto_server, signal_versions):
    config = tree_config(tmp_path, moto_server, signal_versions, versions=("v1",))
    config.write_main(signal_block(unique_name(), "v1"))
    config.write_pool({})
    good = config.pool_path.read_text()
    crash = ("--crash-starts", "3", "--crash-window", "60")
    # slower than startsecs=1 (supervisord alone never gives up); max_capacity 7 cannot start
    cman_args = "--period 0.3 --start-delay 1.2 --crash-if-max-capacity 7"
    bootstrap = Bootstrap(config, tmp_path, crash, cman_args=cman_args, autoscaler=STAND_IN)
    try:
        first = bootstrap.wait_for_run(lambda r: r["max_capacity"] == 9, timeout=60)
        bootstrap.wait_for_run(lambda r: True)  # its heartbeat is written: a configuration that ran

        config.pool_path.write_text(good.replace("max_capacity: 9", "max_capacity: 7"))
        edited = time.monotonic()
        back = bootstrap.wait_for_run(lambda r: r["pid"] != first["pid"], timeout=90)
        recovered = time.monotonic() - edited
        assert back["max_capacity"] == 9
        assert "the autoscaler finished a run under this configuration" in bootstrap.stderr
        # on a loaded machine the stand-in's 0.3 s period can also trip the heartbeat watch (its own
        # ERROR line, a restart): allowed; the rollback itself is said once, in one line
        lines = [line for line in bootstrap.stderr.splitlines() if " ERROR " in line]
        errors = [line for line in lines if "has not finished a run" not in line]
        assert len(errors) == 1, lines
        assert "CONFIGURATION ROLLED BACK: the change to " + str(config.pool_path) in errors[0]
        assert "the autoscaler keeps exiting: started 3 times in" in errors[0]
        assert "cannot start with max_capacity 7" in errors[0]
        rolled = bootstrap.wait_for_run(lambda r: any(e[0] == "CONFIG_REJECTED" for e in r["config_events"]))
        _, path, message = [e for e in rolled["config_events"] if e[0] == "CONFIG_REJECTED"][-1]
        assert path == str(config.pool_path) and "CONFIGURATION ROLLED BACK" in message
        print(f"crash loop after an edit: the old configuration runs again {recovered:.1f} s after the edit")

        # the rejected file is left alone (no second crash loop); a newer edit is applied
        time.sleep(1.0)
        assert bootstrap.stderr.count("CONFIGURATION ROLLED BACK") == 1
        config.pool_path.write_text(good.replace("max_capacity: 9", "max_capacity: 8"))
        fixed = time.monotonic()
        bootstrap.wait_for_run(lambda r: r["max_capacity"] == 8, timeout=60)
        print(f"the fixed file runs {time.monotonic() - fixed:.1f} s after the edit")

        bootstrap.proc.send_signal(signal.SIGTERM)
        assert bootstrap.wait_exit(60) == 0
    finally:
        bootstrap.kill()
